"""The OpenAI-compatible call path: ``/v1/chat/completions``, ``/v1/completions`` and
``/v1/responses`` (the Responses API: same path through the core, its body read by
:mod:`~agentrt_controller.service.http.responses_api`, its stream by the scanner's ``responses``
dialect).

Written as a raw ASGI endpoint so that it can (a) refuse an oversized body while reading it,
(b) notice a client that goes away at any point — queued, waiting for the backend, or
streaming — and abort the upstream request, and (c) do little per-call work (the overhead goal
is ≤ 1 ms added at p50). Per call::

    read body (413) → parse JSON, model, tags (400/404) → CallFacts → core.accept →
    core.forward: queued, admitted (504 at the deadline, 503 without backends), sent with the
    backend's ``priority``, retried elsewhere while nothing reached the client (502 at the
    end) → pass the answer through (stream: core.tokens per chunk, pick up usage) →
    core.settle: charged by the cost model, backend slot released.

Everything but HTTP is the :class:`~agentrt_controller.service.core.facade.ControllerCore`'s; a
failure after the answer started is reported to the client here.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass
from typing import Protocol

import anyio
from opentelemetry.trace import Status, StatusCode

from agentrt_controller.backends.api import BackendError
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.service.core.answer import BackendAnswer
from agentrt_controller.service.core.charging import Usage
from agentrt_controller.service.core.facade import (
    ControllerCore,
    GenerationRequest,
    PendingCall,
)
from agentrt_controller.service.core.pool import task_on
from agentrt_controller.service.core.tenants import TENANT_STATE, Tenant
from agentrt_controller.service.errors import ServiceError, Unauthorized, UpstreamFailed, error_body
from agentrt_controller.service.http.access_log import AccessFacts, access_facts
from agentrt_controller.service.http.incoming import (
    Api,
    ClientGone,
    IncomingCall,
    Receive,
    Scope,
    Send,
    decode_body,
    parse_call,
    read_body,
)
from agentrt_controller.service.http.limits import RequestLimits
from agentrt_controller.service.http.prompt_size import PromptSizer
from agentrt_controller.service.http.responses_api import RESPONSES_PATH, chat_view
from agentrt_controller.service.http.sse import SseScanner, responses_usage
from agentrt_controller.service.telemetry.metrics import ServiceMetrics
from agentrt_controller.service.telemetry.tracing import CallTracing
from agentrt_serving.direct import DirectExchange
from agentrt_serving.hardening import NOT_JSON

__all__ = ["CompletionsEndpoint", "Reply", "answer_error", "send_error"]

_PASSED_BACK = frozenset({"x-request-id", "openai-processing-ms", "openai-version"})
_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


@dataclass(slots=True)
class _Exchange:
    """Progress of the answer to the client."""

    #: The response status line was sent.
    started: bool = False
    #: The last body part is on its way (set before sending it: see ``_watch_disconnect``).
    completed: bool = False
    #: The request's access-log facts to fill (None: the access log is off).
    access: AccessFacts | None = None


class DirectCall(_Exchange):
    """A fast-path call the core accepted (:meth:`CompletionsEndpoint.accept_direct`): what
    its route awaits (:meth:`CompletionsEndpoint.handle`, with the call as the answer's
    progress) and what a client that leaves early does to it (:meth:`client_left`)."""

    __slots__ = ("_metrics", "endpoint", "left", "parsed", "pending", "task")

    def __init__(
        self,
        endpoint: CompletionsEndpoint,
        parsed: IncomingCall,
        pending: PendingCall,
        access: AccessFacts | None,
        task: asyncio.Task[object],
        metrics: ServiceMetrics,
    ) -> None:
        super().__init__(access=access)
        #: The endpoint that accepted it (whose ``handle`` the route awaits).
        self.endpoint = endpoint
        self.parsed = parsed
        self.pending = pending
        #: The route's task, which a client that leaves cancels.
        self.task = task
        self._metrics = metrics
        #: The client left before its whole answer (the cancellation is this, not another).
        self.left = False

    def client_left(self) -> None:
        """The client left (the connection's ``on_disconnect``): before its whole answer, the
        call is cancelled (counted)."""
        if not self.completed:
            self.left = True
            self._metrics.client_disconnects.inc()
            self.task.cancel()


class Reply(Protocol):
    """How the endpoint answers: over ASGI (:class:`_AsgiReply`) or straight to the connection
    (a direct route's :class:`~agentrt_serving.direct.DirectExchange`)."""

    async def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """A whole answer (``content-length`` added)."""

    async def start_stream(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """The head of a streamed answer."""

    async def send_chunk(self, data: bytes) -> None:
        """A part of it."""

    async def end_stream(self, data: bytes = b"") -> None:
        """Its last part."""


class _AsgiReply:
    """:class:`Reply` over an ASGI ``send``."""

    __slots__ = ("send",)

    def __init__(self, send: Send) -> None:
        self.send = send

    async def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        headers.append((b"content-length", b"%d" % len(body)))
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})

    async def start_stream(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def send_chunk(self, data: bytes) -> None:
        await self.send({"type": "http.response.body", "body": data, "more_body": True})

    async def end_stream(self, data: bytes = b"") -> None:
        await self.send({"type": "http.response.body", "body": data, "more_body": False})


async def answer_error(reply: Reply, error: ServiceError) -> None:
    """``error`` answered in the OpenAI envelope with its own headers, on either path."""
    headers = _JSON + [(k.encode(), v.encode()) for k, v in error.headers().items()]
    await reply.respond(error.status_code, headers, error.body())


async def _send_json(
    send: Send, status: int, body: bytes, headers: dict[str, str] | None = None
) -> None:
    raw_headers = _JSON + [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    raw_headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, error: ServiceError) -> None:
    await _send_json(send, error.status_code, error.body(), error.headers())


def _api_of(path: str) -> Api:
    if path.endswith("chat/completions"):
        return "chat"
    return "responses" if path == RESPONSES_PATH else "completion"


#: The GenAI semantic conventions' operation name of each API (span names, metric labels).
_OPERATIONS: dict[Api, str] = {
    "chat": "chat",
    "completion": "text_completion",
    "responses": "responses",
}


class CompletionsEndpoint:
    """ASGI app for one OpenAI generation path (``/v1/chat/completions``,
    ``/v1/completions`` or ``/v1/responses``): talks to ``core`` through its methods only,
    counts on ``metrics`` (the app's, which the core shares)."""

    #: The status logged when the client leaves before its whole body: none (it is not
    #: answered; service/http/direct.py).
    gone_status: int | None = None

    def __init__(
        self,
        path: str,
        core: ControllerCore,
        tracing: CallTracing,
        *,
        metrics: ServiceMetrics,
        limits: RequestLimits,
    ) -> None:
        self.path = path
        self.api = _api_of(path)
        self.operation = _OPERATIONS[self.api]
        self.core = core
        self.tracing = tracing
        self.metrics = metrics
        self.limits = limits
        self._ids = itertools.count(1)
        self._status = metrics.requests
        #: Corrects the prompt size estimate per model from the backends' usage.
        self.prompt_size = PromptSizer()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            body = error_body(
                f"{scope['method']} is not allowed on {self.path}: use POST",
                "invalid_request_error",
                None,
                "method_not_allowed",
            )
            await _send_json(send, 405, body, {"allow": "POST"})
            return
        tenant = scope.get("state", {}).get(TENANT_STATE)  # set by the app's authentication
        if not isinstance(tenant, Tenant):  # the admin token is no tenant's key
            await send_error(send, Unauthorized("calls need a tenant's API key"))
            return
        access = access_facts(scope)
        reply = _AsgiReply(send)
        try:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            raw = await read_body(receive, headers, self.limits.max_body_bytes)
            decoded = await decode_body(raw, scope)
        except ServiceError as error:
            self._status.inc(1.0, self.operation, str(error.status_code))
            await answer_error(reply, error)
            return
        except ClientGone:
            return
        accepted = await self._accept(reply, headers, raw, decoded, tenant, access)
        if accepted is None:
            return
        parsed, pending = accepted
        exchange = _Exchange(access=access)
        with anyio.CancelScope() as call_scope:
            # The disconnect watcher is a bare asyncio task, not one of an anyio task group:
            # a task group costs ~25 µs per call, a twentieth of the whole call. It never
            # outlives the call: once the answer is complete the server wakes its pending
            # receive with http.disconnect (ASGI; uvicorn does), so it ends in the next loop
            # iteration (already scheduled, so the loop holds it); otherwise it is cancelled.
            watcher = asyncio.get_running_loop().create_task(
                self._watch_disconnect(receive, call_scope, exchange)
            )
            try:
                await self.handle(parsed, pending, reply, exchange)
            finally:
                if not exchange.completed:
                    watcher.cancel()

    async def accept_direct(
        self,
        connection: DirectExchange,
        headers: dict[str, str],
        raw: bytes,
        decoded: object,
        tenant: Tenant | None,
        access: AccessFacts | None,
    ) -> DirectCall | None:
        """Take a call the server's direct route read (service/http/direct.py: the body is
        checked, ``decoded`` its JSON value or ``NOT_JSON``, the caller authenticated, None:
        the admin token, refused) to the core on ``connection``: the accepted call, which the
        route then awaits (:meth:`handle`, in its own frame: one coroutine fewer resumed at
        each wake-up), or ``None`` when it was refused (answered here). From here on, a client
        that leaves before its whole answer cancels the route's task
        (:meth:`DirectCall.client_left`: the upstream request aborted, the call settled), as
        the watcher does on the ASGI path."""
        if tenant is None:  # the admin token is no tenant's key
            await answer_error(connection, Unauthorized("calls need a tenant's API key"))
            return None
        if decoded is NOT_JSON:
            try:
                decoded = await decode_body(raw)  # answers a body that is not JSON in its words
            except ServiceError as error:
                self._status.inc(1.0, self.operation, str(error.status_code))
                await answer_error(connection, error)
                return None
        accepted = await self._accept(connection, headers, raw, decoded, tenant, access)
        if accepted is None:
            return None
        task = connection.task  # the route's (the server set it)
        if task is None:
            task = task_on(self.core.pool.loop)  # the core's loop: no lookup of the running one
            assert task is not None
        call = DirectCall(self, *accepted, access, task, self.metrics)
        connection.on_disconnect = call.client_left
        if connection.disconnected:
            call.client_left()
        return call

    async def _accept(
        self,
        reply: Reply,
        headers: dict[str, str],
        raw: bytes,
        decoded: object,
        tenant: Tenant,
        access: AccessFacts | None,
    ) -> tuple[IncomingCall, PendingCall] | None:
        """Parse the call and hand it to the core (``core.accept``); ``None`` when it was
        refused (answered here)."""
        core = self.core
        try:
            parsed = parse_call(
                raw,
                headers,
                f"c{next(self._ids)}",
                core.now(),
                core.known_models(),
                tenant=tenant.name,
                salt_for=core.salt_for(tenant),
                forward_authorization=self.limits.forward_client_authorization,
                decoded=decoded,
                api=self.api,
                resolve_model=core.resolve_model,
                time_scale=core.config.time_scale,
                prompt_size=self.prompt_size,
            )
            if access is not None:
                program = parsed.call.program
                access.session, access.program = program.session_id, program.program_id
                access.model = parsed.model
            # The core reads prompts as chat messages (prefix hashes, retention's pins).
            seen = chat_view(parsed.body) if self.api == "responses" else parsed.body
            pending = core.accept(parsed.call, seen, tagged=not parsed.untagged, tenant=tenant)
        except ServiceError as error:
            self._status.inc(1.0, self.operation, str(error.status_code))
            await answer_error(reply, error)
            return None
        return parsed, pending

    async def _watch_disconnect(
        self, receive: Receive, scope: anyio.CancelScope, exchange: _Exchange
    ) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not exchange.completed:  # the client left before its whole answer
                    self.metrics.client_disconnects.inc()
                    scope.cancel()
                return

    # --- the call --------------------------------------------------------------------------

    async def handle(
        self, parsed: IncomingCall, pending: PendingCall, reply: Reply, exchange: _Exchange
    ) -> None:
        """Forward an accepted call and pass its answer through to ``reply``: admission,
        forwarding, the answer and the settling in this one coroutine (not more nested):
        every frame of the chain is resumed at each wake-up of the call."""
        trace_parent = self.tracing.incoming(parsed.headers)
        span = self.tracing.start(self.operation, parsed.model, trace_parent)
        try:
            call = parsed.call
            outgoing = self.tracing.outgoing_headers(span, trace_parent)
            request = GenerationRequest(
                path=self.path,
                raw_body=parsed.raw_body,
                body=parsed.body,
                stream=parsed.stream,
                headers={**parsed.forward_headers, **outgoing},
                cache_salt=parsed.cache_salt,
                # The Responses API always reports usage (response.completed).
                want_stream_usage=parsed.stream
                and self.api != "responses"
                and not parsed.client_wants_usage,
            )
            with self.core.deadline(pending):
                forwarded = await self.core.forward(pending, request)
                if exchange.access is not None:
                    exchange.access.backend = forwarded.backend_id
                if self.tracing.enabled:  # else the span is the invalid one: nothing to set
                    priority = forwarded.admission.backend_priority
                    entry = forwarded.admission.call
                    span.set_attributes(
                        {
                            "agentrt.backend": forwarded.backend_id,
                            "agentrt.priority": -1 if priority is None else priority,
                            "agentrt.queue_level": entry.level,
                            "agentrt.queue_wait_s": max(0.0, entry.wait_s),
                            "agentrt.retries": forwarded.retries,
                            "agentrt.program_id": call.program.program_id,
                            "gen_ai.conversation.id": call.program.session_id,
                        }
                    )
                # The answer passed through.
                answer = forwarded.answer
                response = answer.response
                usage = Usage()
                #: Verdict for the backend's circuit breaker; None = none (client gone,
                #: deadline).
                ok: bool | None = None
                failure = ""
                try:
                    if answer.body is None:
                        await self._stream(
                            parsed, forwarded.admission.call, answer, reply, usage, exchange
                        )
                    else:
                        body = answer.body
                        if self.api == "responses":
                            _read_responses_usage(usage, body)
                        else:
                            usage.read_body(body)
                        headers = [
                            (
                                b"content-type",
                                response.headers.get("content-type", "application/json").encode(),
                            ),
                            _queue_ms(forwarded.admission.call, self.core.config.time_scale),
                        ]
                        for k, v in response.headers.items():
                            if k in _PASSED_BACK:
                                headers.append((k.encode(), v.encode()))
                        # Marked before sending (see below).
                        exchange.started = exchange.completed = True
                        await reply.respond(response.status_code, headers, body)
                        self._status.inc(1.0, self.operation, str(response.status_code))
                    ok = response.status_code < 500
                    failure = "" if ok else f"HTTP {response.status_code}"
                except BackendError as exc:
                    ok, failure = False, str(exc)
                    raise UpstreamFailed(
                        f"backend {forwarded.backend_id} failed mid-answer: {exc}"
                    ) from exc
                finally:
                    if not answer.closed:  # a whole answer is closed once read (no scope needed)
                        with anyio.CancelScope(shield=True):  # cleanup must run even when cancelled
                            await answer.aclose()
                    charge = self.core.settle(pending, forwarded, usage, ok=ok, reason=failure)
                    if usage.prompt_tokens is not None:
                        self.prompt_size.observe(
                            parsed.model, parsed.prompt_units, usage.prompt_tokens
                        )
                    if exchange.access is not None:
                        exchange.access.prompt_tokens = charge.prompt_tokens
                        exchange.access.completion_tokens = charge.output_tokens
                    if self.tracing.enabled:
                        span.set_attributes(
                            {
                                "gen_ai.usage.input_tokens": charge.prompt_tokens,
                                "gen_ai.usage.output_tokens": charge.output_tokens,
                                "agentrt.service_charged_s": charge.service_s,
                            }
                        )
        except ServiceError as error:
            self._status.inc(1.0, self.operation, str(error.status_code))
            span.set_status(Status(StatusCode.ERROR, error.message))
            if not exchange.started:
                # Marked before sending: the server wakes the watcher with http.disconnect as
                # soon as the last byte is out, and an answered client did not go away.
                exchange.started = exchange.completed = True
                await answer_error(reply, error)
            elif not exchange.completed:
                exchange.completed = True
                await _stream_error(reply, error)
        finally:
            span.end()
            self.core.call_ended(pending)
            elapsed_s = self.core.now() - parsed.call.arrival_s
            self.metrics.call_e2e.observe(max(0.0, elapsed_s), self.operation)

    async def _stream(
        self,
        parsed: IncomingCall,
        entry: CallEntry,
        answer: BackendAnswer,
        reply: Reply,
        usage: Usage,
        exchange: _Exchange,
    ) -> None:
        scanner = SseScanner(
            strip_usage_chunk=not parsed.client_wants_usage,
            dialect="responses" if self.api == "responses" else "chat",
        )
        headers = [*_SSE, _queue_ms(entry, self.core.config.time_scale)] + [
            (k.encode(), v.encode())
            for k, v in answer.response.headers.items()
            if k in _PASSED_BACK
        ]
        exchange.started = True
        await reply.start_stream(200, headers)
        first_token = True
        core = self.core

        tokens = core.token_counter()  # per read of the stream: without the core's frame

        def count(new_chunks: int) -> None:
            """Count a piece's tokens (quantum accounting, the first token's time). The
            streamed-chunk count that charging falls back on is the scanner's, taken once when
            the stream ends (below), not at every read."""
            nonlocal first_token
            tokens(entry, new_chunks)
            if first_token and new_chunks:
                first_token = False
                ttft_s = core.now() - parsed.call.arrival_s
                self.metrics.ttft.observe(max(0.0, ttft_s), self.operation)

        def take(data: bytes) -> bytes:
            """Scan one piece of the stream and count its tokens; what to send on."""
            out, new_chunks = scanner.feed(data)
            count(new_chunks)
            return out

        first, more = answer.parts()
        # What arrived with the stream's end goes with the last chunk in one write to the
        # client (a socket write costs more than the rest of a read's handling): held only
        # when the stream's iterator ends at its next step, without waiting.
        arrived = answer.arrived
        held = b""
        try:
            out = take(first) if first else b""
            if out:
                if arrived():
                    held = out
                else:
                    await reply.send_chunk(out)
            if more is not None:
                # On the fast path, reads of plain token events go from the backend's
                # connection straight to the client's (docs/controller.md, "Performance
                # notes": the relay); the rest of the stream comes through this loop.
                if answer.relay is not None and isinstance(reply, DirectExchange):
                    send_now = reply.send_chunk_now
                    feed_plain = scanner.feed_plain

                    def relay(data: bytes) -> bool:
                        """A read from the backend, in its connection's callback: sent on
                        at once when it is only plain token events and the client takes it
                        without waiting (and counted); else left to the loop below."""
                        new_chunks = feed_plain(data, send_now)
                        if not new_chunks:
                            return False
                        count(new_chunks)
                        return True

                    answer.relay(relay)
                async for data in more:
                    out = take(data)
                    if out:
                        if arrived():
                            held += out
                        else:
                            await reply.send_chunk(out)
        finally:
            usage.streamed_chunks = scanner.chunks
            usage.read_usage(scanner.usage)
        rest = scanner.flush()
        exchange.completed = True
        await reply.end_stream(held + rest if held else rest)
        self._status.inc(1.0, self.operation, "200")


def _read_responses_usage(usage: Usage, body: bytes) -> None:
    """Usage of a whole Responses API answer; ignores anything unparsable."""
    if b'"usage"' not in body:
        return
    try:
        parsed = json.loads(body)
    except ValueError:
        return
    if isinstance(parsed, dict):
        usage.read_usage(responses_usage(parsed.get("usage")))


def _queue_ms(call: CallEntry, time_scale: float) -> tuple[bytes, bytes]:
    """``X-Agentrt-Queue-Ms``: how long the call waited in the controller's queues, in the
    client's wall milliseconds (the core's seconds ÷ ``time_scale``: clients count wall
    seconds, service/core/facade.py)."""
    wall_ms = max(0.0, call.wait_s) / time_scale * 1000
    return (b"x-agentrt-queue-ms", f"{wall_ms:.3f}".encode())


async def _stream_error(reply: Reply, error: ServiceError) -> None:
    """Report a failure inside an SSE stream already started, then end it."""
    event = b"data: " + error.body() + b"\n\n"
    try:
        await reply.end_stream(event)
    except OSError:  # the client may be gone already
        return
