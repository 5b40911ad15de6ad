"""OpenAI-style error bodies (as vLLM writes them) for the emulator's HTTP answers."""

from __future__ import annotations

from pydantic import ValidationError
from starlette.responses import JSONResponse

from agentrt.errors import InvalidRequest

__all__ = ["error_body", "error_response", "from_validation_error"]

_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    408: "RequestTimeout",
    413: "RequestTooLarge",
    431: "RequestHeaderFieldsTooLarge",
    500: "InternalServerError",
}


def error_response(exc: InvalidRequest | Exception, status_code: int | None = None) -> JSONResponse:
    """``{"error": {"message", "type", "param", "code"}}`` with the right HTTP status."""
    if isinstance(exc, InvalidRequest):
        status = status_code or exc.status_code
        param = exc.param
    else:
        status = status_code or 500
        param = None
    body = {
        "error": {
            "message": str(exc),
            "type": _TYPES.get(status, "BadRequestError"),
            "param": param,
            "code": status,
        }
    }
    return JSONResponse(body, status_code=status)


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    """The bytes of :func:`error_response`'s body for ``status``."""
    return bytes(error_response(InvalidRequest(message, status_code=status, param=param)).body)


def from_validation_error(exc: ValidationError) -> InvalidRequest:
    """Translate pydantic's error into ours, naming the first offending field."""
    first = exc.errors()[0]
    loc = ".".join(str(part) for part in first["loc"])
    message = f"{loc}: {first['msg']}" if loc else str(first["msg"])
    return InvalidRequest(message, param=loc or None)
