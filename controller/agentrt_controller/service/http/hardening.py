"""The controller's part of the hardened HTTP surface (docs/security.md): the OpenAI-shaped 500
that Starlette answers an unhandled exception with.

The guard itself — limits, input checks, the catch-all that logs and counts a crash — is
:class:`agentrt_serving.hardening.HardenedApp`, shared with the engine emulator; the controller
installs it with its own error envelope in :mod:`agentrt_controller.service.http.server`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from agentrt_controller.service.errors import error_body
from agentrt_serving.hardening import INTERNAL_ERROR_MESSAGE

__all__ = ["internal_error_response"]


async def internal_error_response(request: Request, exc: Exception) -> Response:
    """A Starlette exception handler for ``Exception``: the OpenAI-shaped 500. Starlette
    answers with it and re-raises; :class:`~agentrt_serving.hardening.HardenedApp` then logs
    and counts the error once (so the handler does neither)."""
    body = error_body(INTERNAL_ERROR_MESSAGE, "server_error", None, "internal_error")
    return Response(body, 500, media_type="application/json")
