"""Backends: how the controller reaches model servers (vLLM, SGLang, OpenAI-compatible servers,
our engine emulator, fakes). docs/backends.md describes the kinds and their options.

See :mod:`agentrt_controller.backends.api` for the seam, its capability interfaces (pins, token
counts)
and its error tree; :mod:`agentrt_controller.backends.breaker` for the per-backend circuit breaker.
"""

from agentrt_controller.backends.api import (
    Backend,
    BackendCapabilities,
    BackendDisconnected,
    BackendError,
    BackendLoad,
    BackendRequest,
    BackendResponse,
    BackendUnavailable,
    DetectsFeatures,
    PinError,
    PinResult,
    PinsUnsupported,
    SupportsPins,
    SupportsTokenize,
    pins_of,
)
from agentrt_controller.backends.breaker import BreakerConfig, BreakerState, CircuitBreaker
from agentrt_controller.backends.factory import BACKEND_KINDS, build_backend
from agentrt_controller.backends.spec import BackendSpec

__all__ = [
    "BACKEND_KINDS",
    "Backend",
    "BackendCapabilities",
    "BackendDisconnected",
    "BackendError",
    "BackendLoad",
    "BackendRequest",
    "BackendResponse",
    "BackendSpec",
    "BackendUnavailable",
    "BreakerConfig",
    "BreakerState",
    "CircuitBreaker",
    "DetectsFeatures",
    "PinError",
    "PinResult",
    "PinsUnsupported",
    "SupportsPins",
    "SupportsTokenize",
    "build_backend",
    "pins_of",
]
