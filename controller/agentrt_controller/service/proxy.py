"""The OpenAI-compatible call path: ``/v1/chat/completions`` and ``/v1/completions``.

Written as a raw ASGI endpoint so that it can (a) refuse an oversized body while reading it,
(b) notice a client that goes away at any point — queued, waiting for the backend, or
streaming — and abort the upstream request, and (c) do little per-call work (the overhead goal
is ≤ 1 ms added at p50). Per call::

    read body (413) → parse JSON, model, tags (400/404) → Call → core.submit → wait for the
    dispatch loop (504 at the deadline, 503 without backends) → forward with the backend's
    ``priority`` → pass the answer through (stream: count chunks for quanta, pick up usage)
    → charge service from usage via the cost model → core.finish.

A backend that cannot be reached before answering is left for another one (the call keeps
its place in the queues); a failure after the answer started is reported to the client.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
from opentelemetry.trace import Span, Status, StatusCode

from agentrt_controller.backends.api import (
    BackendDisconnected,
    BackendError,
    BackendRequest,
    BackendResponse,
    BackendUnavailable,
)
from agentrt_controller.routing import request_block_hashes, uses_block_hashes
from agentrt_controller.scheduling.api import Call
from agentrt_controller.service.charging import Charger, Usage
from agentrt_controller.service.core import ControllerCore
from agentrt_controller.service.errors import (
    DeadlinePassed,
    ServiceError,
    UpstreamFailed,
    error_body,
)
from agentrt_controller.service.incoming import (
    ClientGone,
    IncomingCall,
    Receive,
    Scope,
    Send,
    parse_call,
    read_body,
)
from agentrt_controller.service.sse import SseScanner
from agentrt_controller.service.tracing import CallTracing

__all__ = ["CompletionsEndpoint"]


_log = logging.getLogger("agentrt.controller")

_PASSED_BACK = frozenset({"x-request-id", "openai-processing-ms", "openai-version"})
_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


@dataclass(slots=True)
class _Exchange:
    """Progress of the answer to the client."""

    #: The response status line was sent.
    started: bool = False
    #: The last body part was sent.
    completed: bool = False


async def _send_json(
    send: Send, status: int, body: bytes, headers: dict[str, str] | None = None
) -> None:
    raw_headers = _JSON + [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    raw_headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, error: ServiceError) -> None:
    await _send_json(send, error.status_code, error.body(), error.headers())


class CompletionsEndpoint:
    """ASGI app for one OpenAI generation path (``/v1/chat/completions`` or
    ``/v1/completions``)."""

    def __init__(
        self,
        path: str,
        core: ControllerCore,
        charger: Charger,
        tracing: CallTracing,
    ) -> None:
        self.path = path
        self.operation = "chat" if path.endswith("chat/completions") else "text_completion"
        self.core = core
        self.charger = charger
        self.tracing = tracing
        self._ids = itertools.count(1)
        self._status = core.metrics.requests
        #: Fill ``Call.block_hashes`` (message-boundary chains) for a prefix-aware router.
        self._hashes = uses_block_hashes(core.dispatcher.router)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await _send_json(send, 405, error_body("use POST", "invalid_request_error"))
            return
        try:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            raw = await read_body(receive, headers, self.core.config.max_body_bytes)
            parsed = parse_call(
                raw,
                headers,
                f"c{next(self._ids)}",
                self.core.clock(),
                self.core.pool.known_model_ids(),
            )
            if self._hashes:
                parsed.call.block_hashes = request_block_hashes(parsed.body)
            if self.core.retention is not None and not parsed.untagged:
                self.core.retention.on_call(parsed.call)  # a thread back from its tool
        except ServiceError as error:
            self._status.inc(1.0, self.operation, str(error.status_code))
            await send_error(send, error)
            return
        except ClientGone:
            return
        exchange = _Exchange()
        async with anyio.create_task_group() as group:
            group.start_soon(self._watch_disconnect, receive, group.cancel_scope, exchange)
            try:
                await self._handle(parsed, send, exchange)
            finally:
                # Once the answer is complete, the server wakes the watcher's pending receive
                # with http.disconnect (ASGI; uvicorn does), so it ends by itself; cancelling
                # a scope costs more than the rest of the call's bookkeeping (anyio formats
                # the task's repr into the reason).
                if not exchange.completed:
                    group.cancel_scope.cancel()

    async def _watch_disconnect(
        self, receive: Receive, scope: anyio.CancelScope, exchange: _Exchange
    ) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not exchange.completed:
                    self.core.metrics.client_disconnects.inc()
                    scope.cancel()
                return

    # --- the call --------------------------------------------------------------------------

    async def _handle(self, parsed: IncomingCall, send: Send, exchange: _Exchange) -> None:
        call = parsed.call
        span = self.tracing.start(self.operation, parsed.model, parsed.traceparent)
        try:
            await self._admit_and_forward(parsed, send, span, exchange)
        except ServiceError as error:
            self._status.inc(1.0, self.operation, str(error.status_code))
            span.set_status(Status(StatusCode.ERROR, error.message))
            if not exchange.started:
                await send_error(send, error)
            elif not exchange.completed:
                exchange.completed = True
                await _stream_error(send, error)
        finally:
            span.end()
            if parsed.untagged:
                self.core.end_program(call.session_id, call.program_id)

    async def _admit_and_forward(
        self, parsed: IncomingCall, send: Send, span: Span, exchange: _Exchange
    ) -> None:
        core = self.core
        call = parsed.call
        pending = core.submit(call)
        retries = 0
        with anyio.CancelScope(deadline=_anyio_deadline(core, call)) as deadline:
            while True:
                admission = await core.admitted(pending)
                backend_id = admission.backend_id
                backend = core.pool.states[backend_id].backend
                request = BackendRequest(
                    path=self.path,
                    raw_body=parsed.raw_body,
                    body=parsed.body,
                    stream=parsed.stream,
                    headers={
                        **parsed.forward_headers,
                        **self.tracing.outgoing_headers(span, parsed.traceparent),
                    },
                    priority=admission.backend_priority,
                    add_stream_usage=parsed.stream
                    and not parsed.client_wants_usage
                    and backend.capabilities.stream_usage,
                )
                try:
                    answer = await _Answer.start(parsed.stream, await backend.send(request))
                except BackendUnavailable as exc:  # nothing received: another backend may answer
                    failure: BackendError = exc
                    backend_down = exc.connect_failed
                except BackendDisconnected as exc:  # it broke before the client saw anything
                    failure, backend_down = exc, False
                except BackendError as exc:
                    core.finish(call, backend_id, 0.0, ok=False, reason=str(exc))
                    raise UpstreamFailed(str(exc)) from exc
                except BaseException:
                    core.finish(call, backend_id, 0.0)
                    raise
                else:
                    break
                _log.info("call %s: %s", call.call_id, failure)
                if retries >= core.config.max_retries:
                    core.finish(call, backend_id, 0.0, ok=False, reason=str(failure))
                    raise UpstreamFailed(f"no backend could answer: {failure}") from failure
                retries += 1
                if not backend_down:  # dead, or did this call break it? A probe tells.
                    backend_down = not await core.pool.check(backend_id)
                core.retry(pending, backend_id, backend_down, str(failure))
            span.set_attributes(
                {
                    "agentrt.backend": backend_id,
                    "agentrt.priority": -1
                    if admission.backend_priority is None
                    else admission.backend_priority,
                    "agentrt.queue_level": call.level,
                    "agentrt.queue_wait_s": max(0.0, call.wait_s),
                    "agentrt.retries": retries,
                    "agentrt.program_id": call.program_id,
                    "gen_ai.conversation.id": call.session_id,
                }
            )
            await self._pass_through(parsed, backend_id, answer, send, span, exchange)
        if deadline.cancelled_caught:
            core.metrics.deadline_drops.inc()
            raise DeadlinePassed("the call's deadline passed before its answer was complete")

    async def _pass_through(
        self,
        parsed: IncomingCall,
        backend_id: str,
        answer: _Answer,
        send: Send,
        span: Span,
        exchange: _Exchange,
    ) -> None:
        core = self.core
        call = parsed.call
        response = answer.response
        usage = Usage()
        #: Verdict for the backend's circuit breaker; None = none (client gone, deadline).
        ok: bool | None = None
        failure = ""
        try:
            if answer.body is None:
                await self._stream(parsed, answer, send, usage, exchange)
            else:
                body = answer.body
                usage.read_body(body)
                headers = [
                    (
                        b"content-type",
                        response.headers.get("content-type", "application/json").encode(),
                    )
                ]
                headers.append(_queue_ms(call))
                headers += [
                    (k.encode(), v.encode()) for k, v in response.headers.items()
                    if k in _PASSED_BACK
                ]  # fmt: skip
                headers.append((b"content-length", str(len(body)).encode()))
                exchange.started = True
                await send({"type": "http.response.start", "status": response.status_code,
                            "headers": headers})  # fmt: skip
                exchange.completed = True
                await send({"type": "http.response.body", "body": body})
                self._status.inc(1.0, self.operation, str(response.status_code))
            ok = response.status_code < 500
            failure = "" if ok else f"HTTP {response.status_code}"
        except BackendError as exc:
            ok, failure = False, str(exc)
            raise UpstreamFailed(f"backend {backend_id} failed mid-answer: {exc}") from exc
        finally:
            with anyio.CancelScope(shield=True):  # cleanup must run even when cancelled
                await answer.aclose()
            charge = self.charger.charge(usage, call)
            core.metrics.output_tokens.inc(charge.output_tokens)
            core.metrics.uncached_prompt_tokens.inc(charge.uncached_prompt_tokens)
            span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": charge.prompt_tokens,
                    "gen_ai.usage.output_tokens": charge.output_tokens,
                    "agentrt.service_charged_s": charge.service_s,
                }
            )
            core.finish(call, backend_id, charge.service_s, ok=ok, reason=failure)
            if ok and core.retention is not None and not parsed.untagged:
                core.retention.on_finish(call, backend_id, parsed.body, charge.prompt_tokens)

    async def _stream(
        self,
        parsed: IncomingCall,
        answer: _Answer,
        send: Send,
        usage: Usage,
        exchange: _Exchange,
    ) -> None:
        scanner = SseScanner(strip_usage_chunk=not parsed.client_wants_usage)
        headers = [*_SSE, _queue_ms(parsed.call)] + [
            (k.encode(), v.encode())
            for k, v in answer.response.headers.items()
            if k in _PASSED_BACK
        ]
        exchange.started = True
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        try:
            async for data in answer.chunks():
                out, new_chunks = scanner.feed(data)
                self.core.tokens(parsed.call, new_chunks)
                usage.streamed_chunks = scanner.chunks
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
        finally:
            usage.streamed_chunks = scanner.chunks
            usage.read_usage(scanner.usage)
        rest = scanner.flush()
        exchange.completed = True
        await send({"type": "http.response.body", "body": rest, "more_body": False})
        self._status.inc(1.0, self.operation, "200")


class _Answer:
    """A backend's answer, started: the whole body of a non-streamed (or failed) answer, or
    the first chunk of a stream. Nothing goes to the client before this is complete, so a
    backend that dies before it (:class:`BackendDisconnected`) leaves the call retryable."""

    __slots__ = ("_first", "_rest", "body", "response")

    def __init__(self, response: BackendResponse) -> None:
        self.response = response
        #: The whole answer; ``None`` for a stream (read :meth:`chunks`).
        self.body: bytes | None = None
        self._first = b""
        self._rest: AsyncIterator[bytes] | None = None

    @classmethod
    async def start(cls, stream: bool, response: BackendResponse) -> _Answer:
        """Read until the client can be answered. Closes ``response`` when this raises."""
        answer = cls(response)
        try:
            if stream and response.status_code == 200:
                answer._rest = aiter(response.aiter_bytes())
                answer._first = await anext(answer._rest, b"")
            else:
                answer.body = await response.aread()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await answer.aclose()
            raise
        return answer

    async def chunks(self) -> AsyncIterator[bytes]:
        """The stream: the first chunk, then the rest as it arrives."""
        if self._first:
            yield self._first
        if self._rest is not None:
            async for chunk in self._rest:
                yield chunk

    async def aclose(self) -> None:
        rest, self._rest = self._rest, None
        aclose = getattr(rest, "aclose", None)
        if aclose is not None:
            await aclose()
        await self.response.aclose()


def _queue_ms(call: Call) -> tuple[bytes, bytes]:
    """``X-Agentrt-Queue-Ms``: how long the call waited in the controller's queues."""
    return (b"x-agentrt-queue-ms", f"{max(0.0, call.wait_s) * 1000:.3f}".encode())


def _anyio_deadline(core: ControllerCore, call: Call) -> float:
    if math.isinf(call.deadline_s):
        return math.inf
    return anyio.current_time() + (call.deadline_s - core.clock())


async def _stream_error(send: Send, error: ServiceError) -> None:
    """Report a failure inside an SSE stream already started, then end it."""
    event = b"data: " + error.body() + b"\n\n"
    try:
        await send({"type": "http.response.body", "body": event, "more_body": False})
    except OSError:  # the client may be gone already
        return
