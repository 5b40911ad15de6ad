"""uvicorn for a hardened server: uvicorn's httptools (or h11) protocol with a request-head
timeout and a head size limit, the settings that apply
:class:`~agentrt_serving.hardening.HttpLimits`, a listening socket, and an embedded server run
in the caller's event loop (docs/security.md, "Hardened HTTP surface").

* :class:`HardenedHttpToolsProtocol` (the default) — uvicorn's httptools protocol (llhttp, in
  C: about a tenth of h11's CPU per request) with a **request-head timeout**: a connection
  must deliver a whole request line + headers within ``timeout_keep_alive`` seconds of
  connecting (or of its first byte after a finished request), else it is closed — uvicorn
  itself only times out *idle* keep-alive connections, so a client trickling one header byte
  at a time held its connection forever (slow loris); and a **head size limit**, which llhttp
  does not have: a head still incomplete after ``max_header_bytes`` is answered 431. The head
  timeout is a deadline a connection's one pending check acts on: no head timer handle per
  request.
* :class:`HeadTimeoutH11Protocol` — the same on uvicorn's pure-Python h11 protocol (h11's own
  incomplete-event limit is the head size limit); ``protocol="h11"``.
* :func:`uvicorn_config` — the protocol, the head timeout, the head size limit, the
  connection limit, no uvicorn access log (the controller writes its own,
  :mod:`agentrt_serving.logs`), the app's lifespan on; a server process runs on uvloop
  where it is installed (uvicorn's ``loop="auto"``).
* :func:`listening_socket` and :func:`running` — bind before anything is printed, then serve
  on that socket until the ``async with`` block exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
import h11
import uvicorn
from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from agentrt_serving.asgi import Receive, Scope, Send
from agentrt_serving.direct import (
    DirectExchange,
    DirectHandler,
    DirectPrefixRoutes,
    DirectRoutes,
    prefixed_handler,
)
from agentrt_serving.hardening import HttpLimits

__all__ = [
    "EmbeddedServer",
    "GuardedApp",
    "HardenedHttpToolsProtocol",
    "HeadTimeoutH11Protocol",
    "HttpProtocol",
    "WithDirectRoutes",
    "listening_socket",
    "running",
    "uvicorn_config",
]

#: Pending connections the listening socket queues (uvicorn's default backlog).
_BACKLOG = 2048
#: The HTTP/1.1 implementation a server runs on: ``httptools`` (llhttp, in C) or ``h11``
#: (pure Python); both hardened alike.
HttpProtocol = Literal["httptools", "h11"]
#: A deadline not set (:class:`_HeadDeadline`).
_NEVER = math.inf
_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8"
    b"\r\ncontent-length: 32\r\nconnection: close\r\n\r\nRequest header fields too large."
)


class _HeadDeadline:
    """The request-head timeout both hardened protocols share, as a deadline with at most one
    pending check per connection. A head's wait starts by setting its deadline
    ``timeout_keep_alive`` seconds from now (:meth:`_time_head`: a float written; a timer
    handle made only when no check is pending) and ends by setting it to never. The check,
    when it runs, closes the connection if the deadline has passed while the protocol still
    awaits a head (:meth:`_awaiting_head`), else reschedules itself for the deadline set
    since. Every wait lasts the same time, so a pending check is never later than a deadline
    set after it: the timeout acts at its deadline (or as late as the loop runs the check),
    never before, and back-to-back requests on a kept-alive connection make no head timer
    handle."""

    #: When the request head under way must be complete (never: no head is timed).
    _head_due: float = _NEVER
    #: The connection's one pending check of the deadline (None: none pending).
    _check: asyncio.TimerHandle | None = None
    if TYPE_CHECKING:  # the protocol's (uvicorn sets them)
        loop: asyncio.AbstractEventLoop
        timeout_keep_alive: int
        transport: asyncio.Transport

    def _awaiting_head(self) -> bool:
        """No request is being answered and its head is not complete."""
        raise NotImplementedError

    def _time_head(self) -> None:
        """A head's wait starts: its deadline ``timeout_keep_alive`` seconds from now, with a
        check pending no later than it."""
        due = self._head_due = self.loop.time() + self.timeout_keep_alive
        if self._check is None:
            self._check = self.loop.call_at(due, self._check_deadline)

    def _check_deadline(self) -> None:
        self._check = None
        due = self._head_due
        if due == _NEVER:
            return
        if due > self.loop.time():  # set again since this check was scheduled
            self._check = self.loop.call_at(due, self._check_deadline)
        elif self._awaiting_head():
            if not self.transport.is_closing():
                self.transport.close()
        else:  # passed, but the head is no longer awaited
            self._head_due = _NEVER

    def _stop_check(self) -> None:
        """The connection is gone: its pending check (if any) with it."""
        if self._check is not None:
            self._check.cancel()
            self._check = None


class HeadTimeoutH11Protocol(_HeadDeadline, H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is not complete within
    ``timeout_keep_alive`` seconds (of connecting, or of the first byte of the next request
    on a kept-alive connection)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._time_head()

    def data_received(self, data: bytes) -> None:
        if self._head_due == _NEVER and self._awaiting_head():
            self._time_head()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is complete
            self._head_due = _NEVER

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_check()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        self._head_due = _NEVER  # uvicorn's keep-alive timer takes over
        super().on_response_complete()

    def _awaiting_head(self) -> bool:
        return self.conn.their_state is h11.IDLE


class HardenedHttpToolsProtocol(_HeadDeadline, HttpToolsProtocol):
    """uvicorn's httptools (llhttp) protocol with the hardening :class:`HeadTimeoutH11Protocol`
    gives h11: the **request-head timeout** (as there), and the **head size limit**, which
    llhttp lacks — while a request head is incomplete, the bytes received for it are counted,
    and past ``max_header_bytes`` the connection is answered 431 and closed (a head that
    arrived whole in one read is measured by :class:`~agentrt_serving.hardening.HardenedApp`).
    Malformed requests are answered 400 and closed by uvicorn, as with h11."""

    #: A request head is expected or under way (from connecting, or from the end of a
    #: request's body, to the end of the next head).
    _in_head: bool = True
    #: Bytes received for the head under way (counted while it is incomplete).
    _head_bytes: int = 0
    #: Heads completed on this connection (tells a read that ended a head from one that did
    #: not).
    _heads: int = 0
    #: Requests on this connection answered by a direct route (agentrt_serving.direct).
    direct_requests: int = 0

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._max_head_bytes = config.h11_max_incomplete_event_size or HttpLimits().max_header_bytes
        #: The served app's direct routes (agentrt_serving.direct; empty: every request
        #: goes through the ASGI app).
        self._direct: DirectRoutes = getattr(config.app, "direct_routes", None) or {}
        #: Its direct routes under a path prefix, looked up after the exact paths (empty: none).
        self._prefixed: DirectPrefixRoutes = getattr(config.app, "direct_prefix_routes", None) or {}
        #: uvicorn's ``reset_contextvars``: each request's task in a fresh context.
        self._fresh_context = bool(getattr(config, "reset_contextvars", False))
        #: The socket's own transport (set on connecting).
        self._raw: asyncio.Transport = None  # type: ignore[assignment]  # uvicorn's way

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw = transport  # a direct answer is one write already: the socket's own
        super().connection_made(_CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
        self._time_head()

    def data_received(self, data: bytes) -> None:
        if not self._in_head:
            super().data_received(data)
            return
        heads = self._heads
        super().data_received(data)
        if heads == self._heads and not self.transport.is_closing():  # still incomplete
            # The head's time starts at this read (a head that came whole needs none).
            if self._head_due == _NEVER and self._idle():
                self._time_head()
            self._head_bytes += len(data)
            if self._head_bytes > self._max_head_bytes:
                self._send_431()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._heads += 1
        self._head_due = _NEVER
        # A direct route's request (agentrt_serving.direct) — the method and the exact raw
        # path, or else a raw path under a prefix route's prefix that the route takes (a
        # query string or an escape takes the ASGI way), no upgrade, within the connection
        # limit (over it uvicorn answers 503) — goes to its handler, queued behind the
        # request being answered like uvicorn's cycles; any other, the ASGI way.
        handler = self._direct.get((self.parser.get_method(), self.url)) if self._direct else None
        if handler is None and self._prefixed:
            handler = prefixed_handler(self._prefixed, self.parser.get_method(), self.url)
        if handler is not None and not self.parser.should_upgrade():
            limit = self.limit_concurrency
            if limit is None or (len(self.connections) < limit and len(self.tasks) < limit):
                parser = self.parser
                exchange = DirectExchange(
                    method=parser.get_method().decode("ascii"),
                    path=self.url.decode("ascii"),
                    headers=self.headers,
                    client=self.client,
                    transport=self._raw,
                    flow=self.flow,
                    default_headers=self.server_state.default_headers,
                    keep_alive=parser.should_keep_alive() and parser.get_http_version() != "1.0",
                    expect_100_continue=self.expect_100_continue,
                    on_response=self.on_response_complete,
                    tasks=self.tasks,
                )
                self.direct_requests += 1
                existing = self.cycle
                self.cycle = exchange  # type: ignore[assignment]  # the protocol's use of a cycle
                if existing is None or existing.response_complete:
                    self._start_direct(exchange, handler)
                else:
                    self.flow.pause_reading()
                    self.pipeline.appendleft((exchange, handler))  # type: ignore[arg-type]
                return
        super().on_headers_complete()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        """uvicorn's, and for a queued exchange (its turn came: on_response_complete)
        :meth:`_start_direct`."""
        if type(cycle) is DirectExchange:
            self._start_direct(cycle, app)
        else:
            super()._start_asgi_task(cycle, app)

    def _start_direct(self, exchange: DirectExchange, handler: DirectHandler) -> None:
        """The handler's task for an exchange, counted in the server's tasks until it ends,
        which the exchange's done callback sees to (:meth:`DirectExchange.finished`: no
        coroutine around the handler resumed at each wake-up)."""
        context = contextvars.Context() if self._fresh_context else None
        task = self.loop.create_task(handler(exchange), context=context)
        task.add_done_callback(exchange.finished)
        exchange.task = task
        self.tasks.add(task)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True  # what comes next is the next request's head

    def on_response_complete(self) -> None:
        self._head_due = _NEVER  # uvicorn's keep-alive timer takes over
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_check()
        super().connection_lost(exc)

    def _idle(self) -> bool:
        """No request is being answered (the h11 protocol's client state IDLE)."""
        return self.cycle is None or self.cycle.response_complete

    def _awaiting_head(self) -> bool:
        return self._in_head and self._idle()

    def _send_431(self) -> None:
        """Answer 431 and close (only close while an answer is being sent: a status line in
        the middle of it would corrupt it)."""
        self.logger.warning("request head over %d bytes", self._max_head_bytes)
        if self._idle():
            self.transport.write(_TOO_LARGE)
        self.transport.close()


class _CoalescingTransport:
    """A transport that sends a response's head with what follows it in the same turn of the
    event loop: uvicorn writes a head and its body separately, each a system call (on
    loopback, the costliest single step of a proxied call). A head (a write starting with the
    status line) is held until the next write, which goes out joined with it, or until the end
    of the turn (a callback the loop runs right after the current ones, before it polls
    again). Other writes, a stream's chunks, go out at once. ``close`` writes what is held
    first. Everything else is the transport's."""

    __slots__ = ("_held", "_loop", "_transport", "is_closing")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held = b""
        #: The transport's own, asked once a request: neither a method of ours nor
        #: __getattr__ in between.
        self.is_closing: Callable[[], bool] = transport.is_closing

    def write(self, data: bytes) -> None:
        if self._held:
            data, self._held = self._held + data, b""
        elif data.startswith(b"HTTP/1.1 "):
            self._held = data
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def _flush(self) -> None:
        if self._held:
            data, self._held = self._held, b""
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedApp(Protocol):
    """An ASGI app that carries the limits it is served under
    (:class:`~agentrt_serving.hardening.HardenedApp`, or a wrapper around one)."""

    @property
    def limits(self) -> HttpLimits: ...

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None: ...


class WithDirectRoutes:
    """A served ASGI app (every route but the direct ones goes to it, unchanged) with the
    direct routes the hardened httptools protocol takes itself."""

    def __init__(
        self, app: GuardedApp, routes: DirectRoutes, prefix_routes: DirectPrefixRoutes | None = None
    ) -> None:
        self.app = app
        self.direct_routes = routes
        self.direct_prefix_routes: DirectPrefixRoutes = prefix_routes or {}

    @property
    def limits(self) -> HttpLimits:
        return self.app.limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def uvicorn_config(
    app: GuardedApp,
    *,
    host: str,
    port: int,
    log_level: str,
    graceful_shutdown_s: float,
    log_config: dict[str, Any] | None = None,
    protocol: HttpProtocol = "httptools",
) -> uvicorn.Config:
    """uvicorn's settings for ``app`` under its limits: ``protocol`` with the request-head
    timeout (``header_timeout_s``, also the idle keep-alive timeout), the head size limit
    (``max_header_bytes``; 431, or 400 from h11), the connection limit (``max_concurrency``;
    503 beyond), no access log (it would name every path), lifespan on. ``host`` / ``port``
    are what uvicorn reports (the server serves on the socket it is given); in-flight requests
    get ``graceful_shutdown_s`` seconds when the server stops. ``log_config`` (a
    ``dictConfig``, :func:`agentrt_serving.logs.server_log_config` for a server process) is
    applied when the config is made; ``None`` = uvicorn's own, for embedded servers."""
    limits = app.limits
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        # None given: uvicorn's own default (uvicorn.config.LOGGING_CONFIG).
        log_config=LOGGING_CONFIG if log_config is None else log_config,
        lifespan="on",
        http=HardenedHttpToolsProtocol if protocol == "httptools" else HeadTimeoutH11Protocol,
        # h11's incomplete-event limit; HardenedHttpToolsProtocol reads it as its own.
        h11_max_incomplete_event_size=limits.max_header_bytes,
        # Annotated int by uvicorn; used as loop.call_later's delay and asyncio.timeout's
        # (float seconds both).
        timeout_keep_alive=limits.header_timeout_s,  # type: ignore[arg-type]
        timeout_graceful_shutdown=graceful_shutdown_s,  # type: ignore[arg-type]
        limit_concurrency=limits.max_concurrency,
    )


def listening_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``(host, port)`` (port 0: a free one the OS picks); connections
    queue from now on, before the server serves. Raises :class:`OSError` when it cannot be
    bound (the caller words it in its own error)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio disables Nagle (TCP_NODELAY) only on accepted sockets
    # whose proto says TCP; with proto 0 every response body would wait for the client's
    # delayed ACK of the headers (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit it on Linux, too.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves the host program's signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def running(
    server: uvicorn.Server,
    sock: socket.socket,
    *,
    not_started: Callable[[], Exception],
    startup_timeout_s: float = 30.0,
) -> AsyncIterator[None]:
    """Serve ``server`` on ``sock`` in a task of this event loop for the ``async with`` block,
    then stop it (in-flight requests get its graceful-shutdown time) and close ``sock``.

    Raises ``not_started()`` when the server stopped (the app's lifespan startup failed, say),
    or had not started within ``startup_timeout_s`` seconds, before the block was entered.
    """
    stopped = anyio.Event()
    entered = False

    async def run() -> None:
        try:
            await server.serve([sock])
        except SystemExit:
            # uvicorn exits the process when the app's lifespan startup fails; embedded in
            # another program, that is the caller's not_started() instead.
            if server.started:
                raise
        finally:
            stopped.set()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            with anyio.move_on_after(startup_timeout_s):
                # uvicorn offers a flag, not an event, for "listening".
                while not server.started and not stopped.is_set():  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            if server.started:
                entered = True
                try:
                    yield
                finally:
                    server.should_exit = True
            else:
                group.cancel_scope.cancel()
        if not entered:  # raised here, not in the task group: the caller's error as is
            raise not_started()
    finally:
        sock.close()
