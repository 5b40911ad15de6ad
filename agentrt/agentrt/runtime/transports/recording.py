"""``RecordingTransport``: every LLM request a client of the runtime sends is a DAG node.

Requests the ``chat`` helper sends already have their call (``CURRENT_CALL``). A request made
through a raw client the runtime handed out (an ``openai.AsyncOpenAI``, an ``httpx`` client,
a framework on top of them) is recorded here: a node, a ``chat`` span and metrics (``LLMCall``)
in the current program, or in an ad-hoc one-call run outside any program. Its body is tracked,
so that the node finishes when the body is read to the end or closed, and the program's end
closes bodies still open (the server then aborts the request). The layers below get the call
as a ``CallTarget`` request extension.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Any

import anyio
import httpx
from opentelemetry import trace

from agentrt.errors import DeadlineExceeded
from agentrt.json_types import JSONObject
from agentrt.program.model import Node, NodeStatus, ProgramGraph
from agentrt.protocol import HEADER_QUEUE_MS
from agentrt.runtime.adhoc import AdhocRun
from agentrt.runtime.calls import CURRENT_CALL, LLMCall
from agentrt.runtime.frame import CURRENT_FRAME, Frame
from agentrt.runtime.services import RuntimeServices
from agentrt.runtime.transports.target import EXTENSION, CallTarget

__all__ = ["RecordingTransport"]

#: Paths (suffixes) whose POSTs are LLM calls and become DAG nodes.
_LLM_SUFFIXES = ("/chat/completions", "/completions", "/responses", "/embeddings")
#: Largest JSON response body (bytes) kept to read its usage.
_MAX_SNIFF_BYTES = 1 << 20

#: The last raw call sent from this context: an openai retry (x-stainless-retry-count > 0)
#: of it is the same node, with the next attempt number.
_LAST_RAW: ContextVar[tuple[Node, ProgramGraph] | None] = ContextVar(
    "agentrt_last_raw", default=None
)


class RecordingTransport(httpx.AsyncBaseTransport):
    """Finds or records the LLM call of each request; the top of the runtime's stack.

    ``aclose`` is a no-op: clients handed out may close themselves, the pools belong to the
    runtime, which closes them itself.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, runtime: RuntimeServices) -> None:
        self.inner = inner
        self._rt = runtime

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST" or not request.url.path.endswith(_LLM_SUFFIXES):
            return await self.inner.handle_async_request(request)
        raw: LLMCall | None = None
        sdk_call = CURRENT_CALL.get()
        if sdk_call is None:
            node, graph, raw = self._raw_node(request, CURRENT_FRAME.get())
            span = raw.span if raw is not None else trace.get_current_span()
        else:
            node, graph, span = sdk_call.node, sdk_call.frame.graph, sdk_call.span
        node.attempts += 1
        request.extensions[EXTENSION] = CallTarget(node, graph, span)
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException as exc:  # including a call the deadline left no time to send
            if raw is not None:
                raw.finish(_status_of(exc), error=exc)
            raise
        queue_ms = response.headers.get(HEADER_QUEUE_MS)
        if queue_ms:
            with contextlib.suppress(ValueError):
                node.queue_s = float(queue_ms) / 1000.0
        if raw is None:
            return response
        if response.is_closed:  # already read (e.g. a MockTransport reply): nothing to track
            raw.finish("ok" if response.status_code < 400 else "error", response=_json(response))
        else:
            response.stream = _RecordedStream(response, raw)
        return response

    def _raw_node(
        self, request: httpx.Request, frame: Frame | None
    ) -> tuple[Node, ProgramGraph, LLMCall | None]:
        """Node for a call made through a raw client (no SDK helper around it)."""
        retry = request.headers.get("x-stainless-retry-count", "0")
        last = _LAST_RAW.get()
        model = _model_of(request)
        graph_now = frame.graph if frame is not None else None
        if retry not in ("", "0") and last is not None and last[1] is graph_now:
            node, graph = last
            if node.status == "running":  # still open: same node, next attempt
                return node, graph, None
            if node.status == "error" and frame is not None:
                # openai retries after a failed attempt: the same node again, next attempt.
                return node, graph, LLMCall(self._rt, frame, model, reuse=node)
        if frame is None:
            frame = AdhocRun(self._rt).frame()  # a call outside any program: tags, no events
        call = LLMCall(self._rt, frame, model)
        _LAST_RAW.set((call.node, frame.graph))
        return call.node, frame.graph, call

    async def aclose(self) -> None:
        """No-op: the runtime owns and closes the pools."""


class _RecordedStream(httpx.AsyncByteStream):
    """The body of a raw call: finishes the call's node when read to the end or closed; the
    run's end closes it (it is in the run's ``open_streams`` while open)."""

    def __init__(self, response: httpx.Response, call: LLMCall) -> None:
        assert isinstance(response.stream, httpx.AsyncByteStream)
        self._inner = response.stream
        self._call = call
        self._status = response.status_code
        content_type = response.headers.get("content-type", "")
        is_json = content_type.startswith("application/json")
        self._sniff: bytearray | None = bytearray() if is_json else None
        self._done = False
        self._closed = False
        self._streams = call.frame.run.open_streams
        self._streams.add(self)

    async def __aiter__(self) -> AsyncIterator[bytes]:
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
        Shielded, like the close under it: it usually runs because of a cancellation.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            with anyio.CancelScope(shield=True):
                await self._inner.aclose()
        finally:
            self._finish(_Aborted("response closed before its end"))

    def _finish(self, exc: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
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


def _status_of(exc: BaseException) -> NodeStatus:
    cancelled = isinstance(exc, (anyio.get_cancelled_exc_class(), _Aborted, DeadlineExceeded))
    return "cancelled" if cancelled else "error"


def _json(response: httpx.Response) -> JSONObject | None:
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
