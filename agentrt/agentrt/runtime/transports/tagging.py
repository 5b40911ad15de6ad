"""``TaggingTransport``: the call tags (``agentrt.protocol.CallTags``) on every LLM request.

An LLM call carries its program, thread, node, parents, attempt, objective, budget and the
W3C trace context of its span (``traceparent``, ``tracestate``, and the caller's ``baggage``,
written by the OpenTelemetry propagator; docs/protocol.md, docs/tracing.md); any other request
carries the session id. A node with more than ``agentrt.protocol.WIRE_PARENT_IDS`` parents (the
reduce of a wide map-reduce) lists the first ones plus the count and the digest of all
(``CallTags.for_node``), so a fan-in of any width fits in a request head.
"""

from __future__ import annotations

import httpx

from agentrt.protocol import HEADER_SESSION_ID, CallTags
from agentrt.runtime.telemetry import inject_trace_context
from agentrt.runtime.transports.target import target_of

__all__ = ["TaggingTransport"]


class TaggingTransport(httpx.AsyncBaseTransport):
    """Writes the call tags of session ``session_id`` and passes the request to ``inner``."""

    def __init__(self, inner: httpx.AsyncBaseTransport, session_id: str) -> None:
        self.inner = inner
        self.session_id = session_id

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
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        """No-op: the runtime owns and closes the connection pools."""
