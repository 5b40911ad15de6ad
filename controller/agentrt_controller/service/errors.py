"""Every error the service answers with, as OpenAI-style JSON bodies — the whole tree.

Each maps to one HTTP status. They derive from the project's error tree
(:mod:`agentrt.errors`); the core and the endpoints raise them and the endpoints turn them
into responses (:meth:`ServiceError.body`, :meth:`ServiceError.headers`)::

    AgentrtError
    └── ServiceError                an HTTP error answer (status, OpenAI error type, param)
        ├── BadRequest (400)        malformed JSON, missing model, bad agentrt header or event
        ├── Unauthorized (401)      no API key, or a key of no tenant (WWW-Authenticate)
        ├── Forbidden (403)         the backend admin API without the admin token / loopback
        ├── ModelNotFound (404)     no backend serves the requested model
        ├── ProgramNotFound (404)   no live program of the caller's tenant with these ids
        ├── BackendNotFound (404)   the admin API names no such backend
        ├── Conflict (409)          a backend id in use; a program at its open tool waits cap
        ├── BodyTooLarge (413)      body over max_body_bytes
        ├── QuotaExceeded (429)     a tenant's quota (Retry-After)
        ├── UpstreamFailed (502)    a backend failed after retries
        ├── NoBackend (503)         no healthy backend, or the queues are full (Retry-After)
        │   └── ModelUnavailable    every backend of the call's model is out, others are up
        ├── TableFull (503)         the process table is at max_programs, none idle
        └── DeadlinePassed (504)    the call's deadline (X-Agentrt-Timeout-Ms) ran out

Errors of other libraries never reach a client as such: a backend's are
:class:`~agentrt_controller.backends.api.BackendError` (httpx's are translated in
:mod:`agentrt_controller.backends`) and become :class:`UpstreamFailed` or a retry in the core;
JSON and pydantic validation errors become :class:`BadRequest` where a body is read; anything
else is the OpenAI-shaped 500 of :mod:`~agentrt_controller.service.http.hardening`.
"""

from __future__ import annotations

import json
import math

from agentrt.errors import AgentrtError

__all__ = [
    "BackendNotFound",
    "BadRequest",
    "BodyTooLarge",
    "Conflict",
    "DeadlinePassed",
    "Forbidden",
    "ModelNotFound",
    "ModelUnavailable",
    "NoBackend",
    "ProgramNotFound",
    "QuotaExceeded",
    "ServiceError",
    "TableFull",
    "Unauthorized",
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


class Unauthorized(ServiceError):
    """HTTP 401 with ``WWW-Authenticate: Bearer``: no key, or a key of no tenant."""

    status_code = 401
    error_type = "authentication_error"

    def __init__(self, message: str) -> None:
        super().__init__(message, code="invalid_api_key")

    def headers(self) -> dict[str, str]:
        return {"www-authenticate": "Bearer"}


class Forbidden(ServiceError):
    status_code = 403
    error_type = "permission_error"


class ModelNotFound(ServiceError):
    status_code = 404
    error_type = "invalid_request_error"


class ProgramNotFound(ServiceError):
    """HTTP 404: no such program *of the caller's tenant* (another tenant's program with the
    same ids answers the same: its existence is not revealed)."""

    status_code = 404
    error_type = "invalid_request_error"


class BackendNotFound(ServiceError):
    status_code = 404
    error_type = "invalid_request_error"


class Conflict(ServiceError):
    status_code = 409
    error_type = "invalid_request_error"


class BodyTooLarge(ServiceError):
    status_code = 413
    error_type = "invalid_request_error"


class QuotaExceeded(ServiceError):
    """HTTP 429: the tenant is over one of its quotas; ``Retry-After`` says when to retry
    (``retry_after_s`` seconds, rounded up, at least 1)."""

    status_code = 429
    error_type = "rate_limit_error"

    def __init__(self, message: str, *, code: str, retry_after_s: float) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = max(1, math.ceil(retry_after_s))

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s)}


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


class ModelUnavailable(NoBackend):
    """HTTP 503 ``model_unavailable``: every backend of the call's model is out while backends
    of other models take calls. No ``Retry-After`` and ``x-should-retry: false`` (the openai
    client's own switch): the caller should choose another model — an SDK node with model
    candidates tries its next one — or come back later (docs/routing.md, "Several
    models")."""

    def __init__(self, model: str) -> None:
        super().__init__(f"no healthy backend serves the model {model!r}", code="model_unavailable")

    def headers(self) -> dict[str, str]:
        return {"x-should-retry": "false"}


class TableFull(ServiceError):
    """HTTP 503: the process table is at ``max_programs`` and no program in it is idle."""

    status_code = 503
    error_type = "service_unavailable"

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message, code="process_table_full")
        self.retry_after_s = max(1, retry_after_s)

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
