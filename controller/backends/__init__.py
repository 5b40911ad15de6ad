"""Backends: how the controller reaches model servers (vLLM, OpenAI-compatible, fakes).

See :mod:`controller.backends.api` for the seam and its error tree.
"""

from controller.backends.api import (
    Backend,
    BackendCapabilities,
    BackendError,
    BackendLoad,
    BackendRequest,
    BackendResponse,
    BackendUnavailable,
)
from controller.backends.factory import BACKEND_KINDS, build_backend
from controller.backends.spec import BackendSpec

__all__ = [
    "BACKEND_KINDS",
    "Backend",
    "BackendCapabilities",
    "BackendError",
    "BackendLoad",
    "BackendRequest",
    "BackendResponse",
    "BackendSpec",
    "BackendUnavailable",
    "build_backend",
]
