"""Requests the controller routes but does not schedule: ``POST /v1/embeddings`` (OpenAI),
``POST /tokenize`` and ``POST /detokenize`` (vLLM).

They take no decode slot worth queueing for, so they skip the queues, the process table and
charging; but they need what a generation needs from the controller — a tenant's API key
(when keys are configured), a healthy backend of the request's ``model`` (the least loaded;
:meth:`~agentrt_controller.service.core.facade.ControllerCore.backends_for_model`), the
controller's own credential for that backend (the backend adds it), and the same header
filter (program tags and session headers stay here; a ``vllm_xargs.agentic_context`` is taken
out of the body). A backend that cannot be reached is left for the next one; the answer,
whatever its status, is passed back as it came::

    read body (413) → JSON object (400) → model known (404) → first reachable backend
    (503 without one, 502 when none answered) → status, content type and body unchanged
"""

from __future__ import annotations

import json

from agentrt_controller.backends.api import BackendError, BackendRequest, BackendUnavailable
from agentrt_controller.service.core.facade import ControllerCore
from agentrt_controller.service.core.tenants import TENANT_STATE, Tenant
from agentrt_controller.service.errors import (
    BadRequest,
    NoBackend,
    ServiceError,
    Unauthorized,
    UpstreamFailed,
    error_body,
)
from agentrt_controller.service.http.access_log import access_facts
from agentrt_controller.service.http.identity import strip_agentic_context
from agentrt_controller.service.http.incoming import (
    ClientGone,
    Receive,
    Scope,
    Send,
    decode_body,
    forwarded_headers,
    read_body,
)
from agentrt_controller.service.http.limits import RequestLimits
from agentrt_controller.service.telemetry.metrics import ServiceMetrics

__all__ = ["PASSTHROUGH_PATHS", "PassthroughEndpoint"]

#: Path -> operation name (the ``endpoint`` label of the request counter).
PASSTHROUGH_PATHS = {
    "/v1/embeddings": "embeddings",
    "/tokenize": "tokenize",
    "/detokenize": "detokenize",
}
_PASSED_BACK = frozenset({"x-request-id", "openai-processing-ms", "openai-version"})


async def _send(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_error(send: Send, error: ServiceError) -> None:
    headers = [(b"content-type", b"application/json")]
    headers += [(k.encode(), v.encode()) for k, v in error.headers().items()]
    await _send(send, error.status_code, error.body(), headers)


class PassthroughEndpoint:
    """ASGI app for one routed, unscheduled path of :data:`PASSTHROUGH_PATHS`: backends from
    ``core``, counts on ``metrics``."""

    def __init__(
        self,
        path: str,
        core: ControllerCore,
        *,
        metrics: ServiceMetrics,
        limits: RequestLimits,
    ) -> None:
        self.path = path
        self.operation = PASSTHROUGH_PATHS[path]
        self.core = core
        self.metrics = metrics
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            body = error_body(
                f"{scope['method']} is not allowed on {self.path}: use POST",
                "invalid_request_error",
                None,
                "method_not_allowed",
            )
            headers = [(b"content-type", b"application/json"), (b"allow", b"POST")]
            await _send(send, 405, body, headers)
            return
        tenant = scope.get("state", {}).get(TENANT_STATE)  # set by the app's authentication
        if not isinstance(tenant, Tenant):
            await _send_error(send, Unauthorized("calls need a tenant's API key"))
            return
        try:
            status, body, headers = await self._answer(scope, receive)
        except ClientGone:
            return
        except ServiceError as error:
            self.metrics.requests.inc(1.0, self.operation, str(error.status_code))
            await _send_error(send, error)
            return
        self.metrics.requests.inc(1.0, self.operation, str(status))
        await _send(send, status, body, headers)

    async def _answer(
        self, scope: Scope, receive: Receive
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        core = self.core
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        raw = await read_body(receive, headers, self.limits.max_body_bytes)
        body = await decode_body(raw, scope)
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise BadRequest("'model' must be a string", param="model")
        if model is not None:  # aliases and fallbacks as for generation calls (404 unknown)
            resolved = core.resolve_model(model)
            if resolved != model:
                body["model"] = model = resolved
                raw = json.dumps(body, separators=(",", ":")).encode()
        access = access_facts(scope)
        if access is not None:
            access.model = model
        if strip_agentic_context(body):
            raw = json.dumps(body, separators=(",", ":")).encode()
        outgoing = forwarded_headers(
            headers, authorization=self.limits.forward_client_authorization
        )
        backends = core.backends_for_model(model)
        if not backends:
            raise NoBackend("no healthy backend serves this model", retry_after_s=1)
        failure: BackendError | None = None
        for backend in backends:
            # The backend adds its own credential (never a tenant's key) when it sends.
            request = BackendRequest(self.path, raw, body, stream=False, headers=outgoing)
            try:
                response = await backend.send(request)
                answer = await response.aread()
            except BackendUnavailable as exc:
                failure = exc
                continue
            except BackendError as exc:
                raise UpstreamFailed(f"backend {backend.backend_id} failed: {exc}") from exc
            if access is not None:
                access.backend = backend.backend_id
            content_type = response.headers.get("content-type", "application/json")
            passed = [(b"content-type", content_type.encode())]
            passed += [
                (k.encode(), v.encode()) for k, v in response.headers.items() if k in _PASSED_BACK
            ]
            return response.status_code, answer, passed
        raise UpstreamFailed(f"no backend could answer: {failure}")
