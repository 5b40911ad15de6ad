"""``TaggingTransport``: the call tags (``agentrt.protocol.CallTags``) on every LLM request.

An LLM call carries its program, thread, node, parents, attempt, objective, budget and the
W3C trace context of its span (``traceparent``, ``tracestate``, and the caller's ``baggage``,
written by the OpenTelemetry propagator; docs/protocol.md, docs/tracing.md); any other request
carries the session id. A node with more than ``agentrt.protocol.WIRE_PARENT_IDS`` parents (the
reduce of a wide map-reduce) lists the first ones plus the count and the digest of all
(``CallTags.for_node``), so a fan-in of any width fits in a request head.

With ``peer_hints`` (``RuntimeConfig.peer_hints``) an LLM call's JSON body carries other
routers' program hints too: ``"vllm-router"`` adds ``vllm_xargs.agentic_context`` (session,
program, agent = thread, step = the node's index in its thread, the budget in seconds) as a
JSON string, which vllm-router reads as it reads an object and vLLM accepts in ``vllm_xargs``
(docs/protocol.md, "Hints for other routers").
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import httpx

from agentrt.protocol import HEADER_SESSION_ID, CallTags
from agentrt.runtime.telemetry import inject_trace_context
from agentrt.runtime.transports.target import target_of

__all__ = ["TaggingTransport"]


class TaggingTransport(httpx.AsyncBaseTransport):
    """Writes the call tags of session ``session_id`` and passes the request to ``inner``."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        session_id: str,
        *,
        peer_hints: Sequence[str] = (),
    ) -> None:
        self.inner = inner
        self.session_id = session_id
        self.vllm_router = "vllm-router" in peer_hints

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        headers = request.headers
        target = target_of(request)
        if target is None:
            headers[HEADER_SESSION_ID] = self.session_id
            return await self.inner.handle_async_request(request)
        node = target.node
        tags = CallTags.for_node(
            session_id=self.session_id,
            program_id=target.graph.id,
            thread_id=node.thread_id,
            node_id=node.id,
            parent_ids=node.parent_ids,
            attempt=max(1, node.attempts),
            timeout_ms=target.timeout_ms,
            objective="throughput" if node.objective == "throughput" else "latency",
        )
        for name, value in tags.to_headers().items():  # faster than Headers.update
            headers[name] = value
        inject_trace_context(headers, target.span)
        if self.vllm_router:
            request = _with_agentic_context(request, self._context(tags))
        return await self.inner.handle_async_request(request)

    def _context(self, tags: CallTags) -> dict[str, object]:
        """vllm-router's ``agentic_context`` of one call (its program scheduler's contract)."""
        context: dict[str, object] = {
            "session_id": self.session_id,
            "program_id": tags.program_id,
            "agent_id": tags.thread_id,
        }
        # vllm-router takes a step as a non-negative integer: the node's index in its thread.
        step = tags.node_id.rpartition(":")[2]
        if step.isdigit():
            context["step_id"] = int(step)
        if tags.timeout_ms is not None:
            context["request_deadline_seconds"] = tags.timeout_ms / 1000
        return context

    async def aclose(self) -> None:
        """No-op: the runtime owns and closes the connection pools."""


def _with_agentic_context(request: httpx.Request, context: dict[str, object]) -> httpx.Request:
    """``request`` with ``vllm_xargs.agentic_context`` in its JSON body; a body that is not a
    JSON object (or already names a context) goes unchanged."""
    try:
        body = json.loads(request.content)
    except (ValueError, httpx.RequestNotRead):
        return request
    if not isinstance(body, dict):
        return request
    xargs = body.get("vllm_xargs")
    if xargs is None:
        xargs = body["vllm_xargs"] = {}
    if not isinstance(xargs, dict) or "agentic_context" in xargs:
        return request
    xargs["agentic_context"] = json.dumps(context, separators=(",", ":"))
    headers = request.headers.copy()
    del headers["content-length"]
    return httpx.Request(
        request.method,
        request.url,
        headers=headers,
        content=json.dumps(body, separators=(",", ":")).encode(),
        extensions=request.extensions,
    )
