"""Errors the service answers with, as OpenAI-style JSON bodies.

Each maps to one HTTP status. They derive from the project's error tree
(:mod:`agentrt.errors`); handlers raise them and one place turns them into responses::

    AgentrtError
    └── ServiceError               an HTTP error answer (status, OpenAI error type, param)
        ├── BadRequest  (400)      malformed JSON, missing model, bad agentrt header
        ├── ModelNotFound (404)    no backend serves the requested model
        ├── BodyTooLarge (413)     body over max_body_bytes
        ├── DeadlinePassed (504)   X-Agentrt-Timeout-Ms ran out before an answer
        ├── NoBackend (503)        no healthy backend, or the queues are full (Retry-After)
        └── UpstreamFailed (502)   a backend failed after retries
"""

from __future__ import annotations

import json

from agentrt.errors import AgentrtError

__all__ = [
    "BadRequest",
    "BodyTooLarge",
    "DeadlinePassed",
    "ModelNotFound",
    "NoBackend",
    "ServiceError",
    "UpstreamFailed",
    "error_body",
]


class ServiceError(AgentrtError):
    """An error answered to the client as ``{"error": {...}}`` with :attr:`status_code`."""

    status_code = 500
    error_type = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def headers(self) -> dict[str, str]:
        return {}

    def body(self) -> bytes:
        return error_body(self.message, self.error_type, self.param, self.code)


class BadRequest(ServiceError):
    status_code = 400
    error_type = "invalid_request_error"


class ModelNotFound(ServiceError):
    status_code = 404
    error_type = "invalid_request_error"


class BodyTooLarge(ServiceError):
    status_code = 413
    error_type = "invalid_request_error"


class DeadlinePassed(ServiceError):
    status_code = 504
    error_type = "timeout"


class NoBackend(ServiceError):
    status_code = 503
    error_type = "service_unavailable"

    def __init__(self, message: str, *, retry_after_s: int = 1, code: str = "no_backend") -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s)}


class UpstreamFailed(ServiceError):
    status_code = 502
    error_type = "upstream_error"


def error_body(
    message: str, error_type: str, param: str | None = None, code: str | None = None
) -> bytes:
    """The OpenAI error envelope: ``{"error": {"message", "type", "param", "code"}}``."""
    return json.dumps(
        {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    ).encode()
