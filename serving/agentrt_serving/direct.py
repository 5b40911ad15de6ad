"""Direct routes: a request answered by a handler that reads and writes the connection itself,
without ASGI (docs/security.md, "Hardened HTTP surface"; docs/controller.md, "Performance
notes": the fast path).

A server's hot routes (the controller's two OpenAI generation paths) cost a request far less
when they skip the ASGI machinery: the scope and message dicts, the middleware chain, the
per-message checks of uvicorn's ``send``. :class:`~agentrt_serving.uvicorn_server.
HardenedHttpToolsProtocol` recognises a direct route when a request head is complete (the
method and the exact raw path, no query string; or, among the routes under a path prefix,
the method and a raw path under the prefix without a query string or an escape, whose rest
the prefix's route takes or leaves) and hands the request to its
:data:`DirectHandler` as a :class:`DirectExchange` — in place of uvicorn's request-response
cycle, so everything of the protocol around it stays as it is: the request-head timeout and
the 431 head limit (the protocol's), the connection limit (a request over it is not taken
directly: uvicorn answers it 503), keep-alive and pipelining (the exchange is queued like a
cycle), graceful shutdown (the exchange's ``keep_alive`` is cleared, its task awaited, then
cancelled). What the ASGI guard does per request (limits, input checks, the catch-all) the
handler does with the guard's own methods (:class:`~agentrt_serving.hardening.HardenedApp`).

What an exchange offers a handler::

    exchange.method, .path, .headers        the request head (header names lower-case)
    await exchange.read_body(limit, timeout_s)   the whole body (413, 408: BadInput),
                                             None when the client left; 100-continue
    exchange.on_disconnect = callback        called once if the client leaves before the end
    await exchange.respond(status, headers, body)    a whole answer, one write
    await exchange.start_stream(status, headers)     a chunked answer: head,
    await exchange.send_chunk(data)                  parts (flow-controlled),
    exchange.send_chunk_now(data)                    a part unless it would wait,
    await exchange.end_stream(data)                  the last part
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HEADER_VALUE_RE, STATUS_LINE

from agentrt_serving.hardening import BadInput

__all__ = [
    "BodyParts",
    "DirectExchange",
    "DirectHandler",
    "DirectPrefixRoute",
    "DirectPrefixRoutes",
    "DirectRoutes",
    "prefixed_handler",
]

_log = logging.getLogger("uvicorn.error")

#: The handler of a direct route: answers the request of one exchange.
DirectHandler = Callable[["DirectExchange"], Coroutine[Any, Any, None]]
#: Direct routes by (method, raw path), e.g. ``(b"POST", b"/v1/chat/completions")``.
DirectRoutes = Mapping[tuple[bytes, bytes], DirectHandler]
#: The direct routes under a raw path prefix: given the rest of a raw path after the prefix
#: (ASCII, no query string, no escape), its handler, or None for the ASGI way.
DirectPrefixRoute = Callable[[bytes], DirectHandler | None]
#: Direct routes under a path prefix by (method, raw path prefix), e.g.
#: ``(b"POST", b"/agentrt/v1/programs/")``; looked up after :data:`DirectRoutes`' exact paths.
DirectPrefixRoutes = Mapping[tuple[bytes, bytes], DirectPrefixRoute]

#: Reads shorter than this are gathered in one buffer when they follow a short one
#: (:class:`BodyParts`).
_RUN = 4096
_CHUNK_END = b"\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_CLOSE = b"connection: close\r\n"
_INTERNAL_ERROR = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 21\r\nconnection: close\r\n\r\nInternal Server Error"
)


class BodyParts:
    """A request body as its reads arrive, in the place of a cycle's ``bytearray``: uvicorn's
    protocol does ``body += data`` and compares ``len(body)`` with its high-water mark. The
    reads' ``bytes`` are kept as they are, in a list (no copy per read, no growing buffer),
    so the whole body is one join — none when one read holds it. Reads shorter than
    :data:`_RUN` bytes that follow a short one are gathered in one ``bytearray`` (a client
    sending its body a few bytes per read holds one buffer, not an object per read: the
    list stays under two entries per ``_RUN`` bytes). Its length is the bytes
    :meth:`DirectExchange.read_body` has not yet taken."""

    __slots__ = ("held", "parts")

    def __init__(self) -> None:
        #: The reads, in order.
        self.parts: list[bytes | bytearray] = []
        #: Bytes received and not yet taken by the reader.
        self.held = 0

    def __iadd__(self, data: bytes) -> BodyParts:
        self.held += len(data)
        parts = self.parts
        if parts and len(data) < _RUN:
            last = parts[-1]
            if type(last) is bytearray:
                last += data
                return self
            if len(last) < _RUN:
                parts[-1] = bytearray(last) + data
                return self
        parts.append(data)
        return self

    def __len__(self) -> int:
        return self.held


class DirectExchange:
    """One request on a direct route, in the place of uvicorn's ``RequestResponseCycle``: the
    protocol feeds it the body (``body``, ``more_body``, ``message_event.set()``), marks a
    lost connection (``disconnected``) and, on shutdown, clears
    ``keep_alive``; it runs the handler in a task of the server whose end :meth:`finished`
    sees to, and is told when the answer is complete (``on_response``: the next pipelined
    request starts, or the keep-alive timer)."""

    __slots__ = (
        "_held",
        "_late",
        "_waiter",
        "body",
        "client",
        "default_headers",
        "disconnected",
        "flow",
        "headers",
        "keep_alive",
        "method",
        "more_body",
        "on_disconnect",
        "on_response",
        "path",
        "response_complete",
        "response_started",
        "status",
        "task",
        "tasks",
        "transport",
        "waiting_for_100_continue",
    )

    def __init__(
        self,
        *,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        client: tuple[str, int] | None,
        transport: asyncio.Transport,
        flow: FlowControl,
        default_headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
        expect_100_continue: bool,
        on_response: Callable[[], None],
        tasks: set[asyncio.Task[None]] | None = None,
    ) -> None:
        self.method = method
        #: The raw path (a direct route has no query string).
        self.path = path
        #: The request's headers as received (names lower-case).
        self.headers = headers
        self.client = client
        self.transport = transport
        self.flow = flow
        self.default_headers = default_headers
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        self.on_response = on_response
        #: The server's tasks, which the handler's task leaves when it ends (None: none).
        self.tasks = tasks
        #: The handler's task while it runs (the server's protocol sets it; None: not known).
        self.task: asyncio.Task[None] | None = None
        #: Called once when the client leaves before the answer is complete (None: nobody
        #: listens).
        self.on_disconnect: Callable[[], None] | None = None
        #: The body's reads as the protocol hands them over (``body += data``; its length,
        #: what the protocol compares with its high-water mark, is what is not taken yet).
        self.body = BodyParts()
        self.more_body = True
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        #: The status sent (None: no answer yet).
        self.status: int | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._late = False
        #: A stream's head, until its first part goes out with it.
        self._held = b""

    # --- the protocol's side -----------------------------------------------------------------

    @property
    def message_event(self) -> DirectExchange:
        """uvicorn's protocol wakes a cycle's reader with ``message_event.set()``: the
        exchange itself (a property, not an attribute: an exchange holding itself would be a
        reference cycle, freed by the garbage collector only — a collection's work per call)."""
        return self

    def set(self) -> None:
        """Body bytes arrived, the body is complete, or the connection was lost."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self.disconnected and not self.response_complete:
            callback, self.on_disconnect = self.on_disconnect, None
            if callback is not None:
                callback()

    def finished(self, task: asyncio.Task[None]) -> None:
        """The handler's task ended (its done callback; the protocol starts the task): out of
        the server's tasks, and, like uvicorn's cycle, the last resort for what the handler
        left — a 500 when nothing was sent, else the connection closed. (A callback, not a
        coroutine around the handler: no frame of its own resumed at each wake-up.)"""
        self.task = None
        tasks = self.tasks
        if tasks is not None:
            tasks.discard(task)
        exc: BaseException | None = (
            asyncio.CancelledError() if task.cancelled() else task.exception()
        )
        if exc is not None:  # uvicorn's cycle logs it too (the task ends here)
            _log.error("Exception in a direct route's handler", exc_info=exc)
            if not self.response_started:
                self.response_started = True
                self.status = 500
                self._write_last(_INTERNAL_ERROR, close=True)
            else:
                self.transport.close()
        elif not self.response_complete and not self.disconnected:
            _log.error("a direct route's handler returned without completing its answer")
            self.transport.close()
        self.on_response = _nothing  # the exchange no longer leads back to the protocol

    # --- the handler's side ------------------------------------------------------------------

    async def read_body(self, limit: int, timeout_s: float) -> bytes | None:
        """The whole request body, at most ``limit`` bytes, within ``timeout_s`` seconds;
        ``None`` when the client left first. Raises :class:`BadInput` 413 (declared or read
        length over ``limit``) or 408. Sends ``100 Continue`` when the client waits for it."""
        if self.more_body:
            for name, value in self.headers:
                if name == b"content-length" and value.isdigit() and int(value) > limit:
                    raise BadInput(413, f"request body over {limit} bytes")
            if self.waiting_for_100_continue and not self.transport.is_closing():
                self.transport.write(_CONTINUE)
            self.waiting_for_100_continue = False
        # What arrived is taken (counted) out of ``body`` at each wake, so that the protocol's
        # count stays under its high-water mark (past it, each read pauses the socket's
        # reading); the reads themselves stay in ``body.parts``, joined once at the end.
        body = self.body
        size = 0
        timer: asyncio.TimerHandle | None = None
        try:
            while True:
                if body.held:
                    size += body.held
                    body.held = 0
                    if size > limit:
                        raise BadInput(413, f"request body over {limit} bytes")
                if not self.more_body or self.disconnected:
                    break
                loop = asyncio.get_running_loop()
                if timer is None:
                    timer = loop.call_later(timeout_s, self._body_late)
                self.flow.resume_reading()
                waiter = self._waiter = loop.create_future()
                await waiter
                if self._late:
                    raise BadInput(408, f"request body not received within {timeout_s} s")
        finally:
            if timer is not None:
                timer.cancel()
            self._waiter = None
            parts, body.parts = body.parts, []
        if self.disconnected:
            return None
        if len(parts) == 1:  # one read held the whole body: as it is (no copy)
            first = parts[0]
            return first if isinstance(first, bytes) else bytes(first)
        return b"".join(parts)

    def _body_late(self) -> None:
        self._late = True
        self.set()

    async def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """A whole answer (``content-length`` is added): head and body in one write."""
        if self.disconnected or self.response_started:
            return
        head = self._head(status, headers)
        head.append(b"content-length: %d\r\n\r\n" % len(body))
        head.append(body)
        self._write_last(b"".join(head), close=not self.keep_alive)

    async def start_stream(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """The head of a chunked answer (its parts follow: :meth:`send_chunk`,
        :meth:`end_stream`)."""
        if self.disconnected or self.response_started:
            return
        head = self._head(status, headers)
        head.append(b"transfer-encoding: chunked\r\n\r\n")
        # Held for the first part (a stream's first chunk is usually at hand: one write for
        # both), or until the end of this turn of the event loop.
        self._held = b"".join(head)
        asyncio.get_running_loop().call_soon(self._flush_head)

    def _flush_head(self) -> None:
        held, self._held = self._held, b""
        if held and not self.transport.is_closing():
            self.transport.write(held)

    async def send_chunk(self, data: bytes) -> None:
        """One part of a chunked answer; waits while the client's socket buffer is full."""
        while data and not self.send_chunk_now(data):
            if self.disconnected or self.response_complete:
                return
            await self.flow.drain()

    def send_chunk_now(self, data: bytes) -> bool:
        """:meth:`send_chunk` without waiting, for a caller that cannot wait (a protocol
        callback): writes ``data`` (not empty) as one part, after the held head if it has not
        gone yet, and returns ``True``, or writes nothing and returns ``False`` when
        :meth:`send_chunk` would wait (the client's socket buffer is full) or the answer
        takes no more parts (the client left, the answer is complete)."""
        if self.flow.write_paused or self.disconnected or self.response_complete:
            return False
        self.transport.write(b"%b%x\r\n%b\r\n" % (self._held, len(data), data))
        self._held = b""
        return True

    async def end_stream(self, data: bytes = b"") -> None:
        """The last part of a chunked answer (``data`` may be empty)."""
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected or self.response_complete:
            return
        last = b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data) if data else _LAST_CHUNK
        held, self._held = self._held, b""
        self._write_last(held + last if held else last, close=not self.keep_alive)

    def _head(self, status: int, headers: list[tuple[bytes, bytes]]) -> list[bytes]:
        """The status line and headers (without the blank line); raises :class:`RuntimeError`
        for a header value with a control character (as uvicorn does)."""
        self.response_started = True
        self.status = status
        defaults = self.default_headers
        if defaults is not _defaults.headers:
            _defaults.encode(defaults)
        lines, close = _encoded(headers)
        if close or _defaults.close:
            self.keep_alive = False
        head = [STATUS_LINE[status], _defaults.lines, *lines]
        # One connection header: a handler's own "connection: close" is not repeated.
        if not self.keep_alive and not any(name == b"connection" for name, _ in headers):
            head.append(_CLOSE)
        return head

    def _write_last(self, data: bytes, *, close: bool) -> None:
        """Write the answer's last bytes; the answer is complete."""
        self.response_complete = True
        self.transport.write(data)
        if close:
            self.keep_alive = False
            self.transport.close()
        self.on_response()


def prefixed_handler(routes: DirectPrefixRoutes, method: bytes, url: bytes) -> DirectHandler | None:
    """The handler of the request ``method url`` (the raw request target) among ``routes``
    (None: the ASGI way): the route of the first prefix ``url`` starts with, given the rest,
    when the rest is ASCII without a query string or an escape (those take the ASGI way,
    which decodes them)."""
    for (route_method, prefix), route in routes.items():
        if route_method == method and url.startswith(prefix):
            rest = url[len(prefix) :]
            if not rest.isascii() or b"?" in rest or b"%" in rest or b"#" in rest:
                return None
            return route(rest)
    return None


def _nothing() -> None:
    return None


def _encoded(headers: list[tuple[bytes, bytes]]) -> tuple[list[bytes], bool]:
    """The lines of ``headers`` (without the blank line) and whether one says
    ``connection: close``; raises :class:`RuntimeError` for a value with a control character
    (as uvicorn does)."""
    lines: list[bytes] = []
    close = False
    for name, value in headers:
        if HEADER_VALUE_RE.search(value):
            raise RuntimeError("Invalid HTTP header value.")
        if name == b"connection" and b"close" in value.lower():
            close = True
        lines += (name, b": ", value, _CHUNK_END)
    return lines, close


class _DefaultHeaders:
    """The server's default headers last encoded (uvicorn's ``default_headers``: a new list
    when the ``date`` changes, once a second), their lines, and whether one says
    ``connection: close`` — checked once per list, not once per answer."""

    __slots__ = ("close", "headers", "lines")

    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] | None = None
        self.lines = b""
        self.close = False

    def encode(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Check and encode ``headers``; raises :class:`RuntimeError` for a value with a
        control character (as uvicorn does), leaving the last ones as they were."""
        lines, close = _encoded(headers)
        self.lines = b"".join(lines)
        self.close = close
        self.headers = headers


_defaults = _DefaultHeaders()
