"""The tagging HTTP transport: every request any client of the runtime sends carries the
call tags of the program it is made in (agentrt.protocol.CallTags), read from contextvars.

It wraps the real connection pool, so any ``httpx.AsyncClient`` built on it — and therefore
any ``openai.AsyncOpenAI`` the runtime hands out — tags automatically, with no per-call code
in the caller. It also enforces the program deadline on each send, routes to the fallback
endpoint while the primary one is unreachable, and tracks response streams so that a program
that ends (or passes its deadline) closes them and the server aborts the request.
"""

from __future__ import annotations

import contextlib
import json
import math
import uuid
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import anyio
import httpx
from opentelemetry import trace
from opentelemetry.trace import Span

from agentrt.errors import DeadlineExceeded
from agentrt.program.context import CURRENT_CALL, CURRENT_FRAME, Chain, Frame
from agentrt.program.model import Node, ProgramGraph
from agentrt.protocol import HEADER_QUEUE_MS, HEADER_SESSION_ID, CallTags
from agentrt.runtime.calls import LLMCall
from agentrt.runtime.telemetry import traceparent_of

if TYPE_CHECKING:
    from agentrt.runtime.runtime import Runtime

__all__ = ["TaggingTransport"]

#: Paths (suffixes) whose POSTs are LLM calls and become DAG nodes.
_LLM_SUFFIXES = ("/chat/completions", "/completions", "/responses", "/embeddings")
#: Slack (seconds) added to the HTTP timeout so the program's cancel scope fires first.
_TIMEOUT_SLACK_S = 0.05
#: Largest JSON response body (bytes) kept to read its usage.
_MAX_SNIFF_BYTES = 1 << 20

#: The last raw call sent from this context: an openai retry (x-stainless-retry-count > 0)
#: of it is the same node, with the next attempt number.
_LAST_RAW: ContextVar[tuple[Node, ProgramGraph] | None] = ContextVar(
    "agentrt_last_raw", default=None
)


class TaggingTransport(httpx.AsyncBaseTransport):
    """Tags, times out, routes and tracks requests; wraps the runtime's connection pool.

    ``aclose`` is a no-op: clients handed out may close themselves, the pools belong to the
    runtime, which closes them itself.
    """

    def __init__(
        self, runtime: Runtime, shards: list[httpx.AsyncBaseTransport], shard_limit: int
    ) -> None:
        """``shards``: connection pools; a program's calls all go through the same one (by a
        hash of its id). ``shard_limit``: requests admitted into one pool at once."""
        self._rt = runtime
        self.shards = shards
        self._primary = runtime.config.base_url.rstrip("/")
        fallback = runtime.config.fallback_base_url
        self._fallback = fallback.rstrip("/") if fallback else None
        key = runtime.config.fallback_api_key or runtime.config.api_key
        self._fallback_auth = f"Bearer {key}"
        #: Calls go to the fallback until this time (anyio clock, seconds).
        self.primary_down_until_s = -math.inf
        # Admission in front of small pools: httpcore's pool scans its queued requests against
        # its connections on every change (quadratic), which stalls for minutes with thousands
        # of queued calls on one big pool. Waiting here, per shard, keeps each pool's queue
        # and connection list small.
        self._slots = [anyio.Semaphore(shard_limit) for _ in shards]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        rt = self._rt
        raw: LLMCall | None = None
        sdk_call: LLMCall | None = CURRENT_CALL.get()
        node: Node | None = None
        shard = 0
        path = request.url.path
        if request.method == "POST" and path.endswith(_LLM_SUFFIXES):
            if sdk_call is None:
                node, graph, raw = self._raw_node(request, CURRENT_FRAME.get())
                span = raw.span if raw is not None else trace.get_current_span()
            else:
                node, graph, span = sdk_call.node, sdk_call.frame.graph, sdk_call.span
            node.attempts += 1
            try:
                self._tag(request, node, graph, span)
            except DeadlineExceeded as exc:  # never sent: the raw call's node and span end here
                if raw is not None:
                    raw.finish("cancelled", error=exc)
                raise
            shard = hash(graph.id) % len(self.shards)
        else:
            request.headers[HEADER_SESSION_ID] = rt.session_id
        slots = self._slots[shard]
        try:
            # The fast path skips anyio's scheduling round trip (a whole event loop iteration,
            # ~10 µs a call) when a slot is free; the send below is the cancellation point.
            slots.acquire_nowait()
        except anyio.WouldBlock:
            await slots.acquire()
        try:
            response = await self._send(request, self.shards[shard])
        except BaseException as exc:
            slots.release()
            if raw is not None:
                raw.finish(_status_of(exc), error=exc)
            raise
        queue_ms = response.headers.get(HEADER_QUEUE_MS)
        if node is not None and queue_ms:
            with contextlib.suppress(ValueError):
                node.queue_s = float(queue_ms) / 1000.0
        if response.is_closed:  # already read (e.g. a MockTransport reply): nothing to track
            slots.release()
            if raw is not None:
                raw.finish(
                    "ok" if response.status_code < 400 else "error", response=_json(response)
                )
        else:
            response.stream = _TrackedStream(response, raw, slots)
        return response

    def _raw_node(
        self, request: httpx.Request, frame: Frame | None
    ) -> tuple[Node, ProgramGraph, LLMCall | None]:
        """Node for a call made through a raw client (no SDK helper around it)."""
        retry = request.headers.get("x-stainless-retry-count", "0")
        last = _LAST_RAW.get()
        model = _model_of(request)
        if retry not in ("", "0") and last is not None and last[1] is getattr(frame, "graph", None):
            node, graph = last
            if node.status == "running":  # still open: same node, next attempt
                return node, graph, None
            if node.status == "error" and frame is not None:
                # openai retries after a failed attempt: the same node again, next attempt.
                return node, graph, LLMCall(self._rt, frame, model, reuse=node)
        if frame is None:
            # A call outside any program: an ad-hoc one-call program (tags only, no events).
            graph = ProgramGraph(
                f"adhoc-{uuid.uuid4().hex[:20]}", "adhoc", self._rt.session_id, math.inf, 0.0
            )
            frame = Frame(_AdhocRun(graph), graph, graph.threads["main"], Chain())
        call = LLMCall(self._rt, frame, model)
        _LAST_RAW.set((call.node, frame.graph))
        return call.node, frame.graph, call

    def _tag(self, request: httpx.Request, node: Node, graph: ProgramGraph, span: Span) -> None:
        rt = self._rt
        timeout_ms: int | None = None
        if not math.isinf(graph.deadline_s):
            remaining = graph.deadline_s - anyio.current_time()
            if remaining <= 0:
                raise DeadlineExceeded(f"program {graph.id} has no time left for {node.id}")
            timeout_ms = int(remaining * 1000)
            _cap_timeout(request, remaining + _TIMEOUT_SLACK_S)
        tags = CallTags(
            session_id=rt.session_id,
            program_id=graph.id,
            thread_id=node.thread_id,
            node_id=node.id,
            parent_ids=node.parent_ids,
            attempt=max(1, node.attempts),
            timeout_ms=timeout_ms,
            objective="throughput" if node.objective == "throughput" else "latency",
            traceparent=traceparent_of(span) or traceparent_of(trace.get_current_span()),
        )
        headers = request.headers
        for name, value in tags.to_headers().items():  # faster than Headers.update
            headers[name] = value

    async def _send(self, request: httpx.Request, pool: httpx.AsyncBaseTransport) -> httpx.Response:
        if self._fallback is None or not str(request.url).startswith(self._primary):
            return await pool.handle_async_request(request)
        if anyio.current_time() < self.primary_down_until_s:
            return await pool.handle_async_request(self._to_fallback(request))
        try:
            return await pool.handle_async_request(request)
        except (httpx.ConnectError, httpx.ConnectTimeout):
            self.primary_down_until_s = anyio.current_time() + self._rt.config.fallback_hold_s
            return await pool.handle_async_request(self._to_fallback(request))

    def _to_fallback(self, request: httpx.Request) -> httpx.Request:
        assert self._fallback is not None
        url = httpx.URL(self._fallback + str(request.url)[len(self._primary) :])
        headers = httpx.Headers(request.headers)
        del headers["host"]
        headers["authorization"] = self._fallback_auth
        return httpx.Request(
            request.method,
            url,
            headers=headers,
            content=request.content,
            extensions=request.extensions,
        )

    def use_fallback_now(self) -> None:
        """Send calls to the fallback endpoint for the next ``fallback_hold_s`` seconds."""
        self.primary_down_until_s = anyio.current_time() + self._rt.config.fallback_hold_s

    async def aclose(self) -> None:
        """No-op: the runtime owns and closes the pools (``shards``)."""


class _AdhocRun:
    """Stands in for a ``Program`` for a call made outside any program."""

    def __init__(self, graph: ProgramGraph) -> None:
        self.graph = graph

    def begin_node(self, frame: Frame, kind: Any, name: str, **kw: Any) -> Node:
        node = self.graph.add_node(frame.thread.id, kind, name, ())
        node.start(anyio.current_time())
        return node

    def end_node(self, chain: Chain, node: Node, status: Any, error: Any = None) -> None:
        node.finish(status, anyio.current_time(), error)


class _TrackedStream(httpx.AsyncByteStream):
    """A response body: frees its admission slot when closed; for a raw call (``call``) it
    also finishes the node when read to the end or closed, and is closed by the program's end.
    """

    def __init__(
        self, response: httpx.Response, call: LLMCall | None, slots: anyio.Semaphore
    ) -> None:
        self._inner = response.stream
        self._call = call
        #: The admission slot held until the body is closed; None once closed.
        self._slots: anyio.Semaphore | None = slots
        self._status = response.status_code
        content_type = response.headers.get("content-type", "")
        is_json = content_type.startswith("application/json")
        self._sniff: bytearray | None = bytearray() if call is not None and is_json else None
        self._done = call is None
        self._streams: set[httpx.AsyncByteStream] | None = None
        if call is not None:
            self._streams = getattr(call.frame.run, "open_streams", None)
            if self._streams is not None:
                self._streams.add(self)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._inner, httpx.AsyncByteStream)
        try:
            async for chunk in self._inner:
                if self._sniff is not None:
                    if len(self._sniff) + len(chunk) <= _MAX_SNIFF_BYTES:
                        self._sniff.extend(chunk)
                    else:
                        self._sniff = None
                yield chunk
        except BaseException as exc:
            self._finish(exc)
            await self.aclose()  # close now, whatever the stream under us does on errors
            raise
        self._finish(None)

    async def aclose(self) -> None:
        """Close the body; a call closed before its end was aborted (node ``cancelled``).

        Shielded: the usual reason to close early is a cancellation (the program's deadline),
        and a close interrupted by it would leave the connection open until the garbage
        collector finds its socket (the server would keep decoding for nobody). Idempotent.
        """
        slots, self._slots = self._slots, None
        if slots is None:
            return  # closed already
        try:
            assert isinstance(self._inner, httpx.AsyncByteStream)
            with anyio.CancelScope(shield=True):
                await self._inner.aclose()
        finally:
            slots.release()
            self._finish(_Aborted("response closed before its end"))

    def _finish(self, exc: BaseException | None) -> None:
        if self._done or self._call is None:
            return
        self._done = True
        if self._streams is not None:
            self._streams.discard(self)
        response: dict[str, Any] | None = None
        if self._sniff:
            try:
                loaded = json.loads(self._sniff)
                response = loaded if isinstance(loaded, dict) else None
            except ValueError:
                response = None
        if exc is not None:
            self._call.finish(_status_of(exc), error=exc)
        elif self._status >= 400:
            self._call.finish("error", error=_HTTPStatus(self._status))
        else:
            self._call.finish("ok", response=response)


class _Aborted(Exception):
    """The caller (or the program's end) closed the response before it was complete."""


class _HTTPStatus(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")


def _status_of(exc: BaseException) -> Any:
    cancelled = isinstance(exc, (anyio.get_cancelled_exc_class(), _Aborted, DeadlineExceeded))
    return "cancelled" if cancelled else "error"


def _json(response: httpx.Response) -> dict[str, Any] | None:
    try:
        loaded = json.loads(response.content)
    except ValueError:
        return None
    return loaded if isinstance(loaded, dict) else None


def _model_of(request: httpx.Request) -> str:
    try:
        body = json.loads(request.content)
    except (ValueError, httpx.RequestNotRead):
        return "unknown"
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) and model else "unknown"


def _cap_timeout(request: httpx.Request, limit_s: float) -> None:
    current = request.extensions.get("timeout") or {}
    capped = {}
    for key in ("connect", "read", "write", "pool"):
        value = current.get(key)
        capped[key] = limit_s if value is None else min(value, limit_s)
    request.extensions["timeout"] = capped
