"""A lean HTTP/1.1 keep-alive transport for ``http://`` servers, behind httpx's transport seam
and, for callers that build their own requests, without it (:meth:`FastHTTPTransport.open`).

Why: a call through httpx's own transport costs the caller more CPU in httpcore's pure-Python
HTTP/1.1 machinery (h11 state machine, pool bookkeeping, anyio stream wrappers) than in
everything else it does. This transport speaks only what a client of model servers needs — one
request at a time per connection, ``Content-Length`` or chunked bodies, keep-alive — with
uvicorn's C parser (``httptools``) on an asyncio protocol, and hands httpx a normal
``httpx.Response``. Everything else (``https``, requests whose body is a stream) goes to an
``httpx.AsyncHTTPTransport`` fallback. Errors are httpx's own (``ConnectError``,
``ConnectTimeout``, ``ReadTimeout``, ``RemoteProtocolError``, ``ReadError``), so callers map them
exactly as for httpx's transport.

Both halves of the project send through it: the SDK's connection pools and its program-event
link (:mod:`agentrt.runtime`), and the controller's backend leg
(:mod:`agentrt_controller.backends`). A kept-alive connection that the server closed before
answering is tried once more on a fresh connection (a server's keep-alive timeout racing the
request); every other failure is raised.

asyncio only (the SDK and the controller run on asyncio / uvloop): the protocol callbacks are
the cheapest way to read a socket. Closing an unfinished response closes its connection, which
is how a request is aborted (vLLM stops generating when the connection drops).

Callers that build the request themselves skip httpx altogether: :meth:`FastHTTPTransport.open`
takes the serialised request and gives a :class:`FastResponse`, so a call builds no
``httpx.Request``, ``httpx.Response``, ``Headers`` or body-stream wrappers (the controller's
proxied calls: about a tenth of its CPU per call, and two generator levels per streamed chunk).
Its body errors are httpx's, or what the transport's ``body_error`` makes of them (the
controller's backend seam maps them to its own).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

import httptools
import httpx

from agentrt.errors import ConfigError

__all__ = ["BodyError", "FastHTTPTransport", "FastResponse", "Origin", "head_lines", "request_head"]

#: Idle keep-alive connections older than this are not reused (seconds). Below uvicorn's
#: default server-side keep-alive timeout (5 s), so we rarely race a server closing one.
_IDLE_EXPIRY_S = 4.0
#: Pause reading a streamed body when this many bytes wait unread; resume below a quarter.
_HIGH_WATER = 1 << 20
#: ``(host, port)`` of a server.
Origin = tuple[str, int]
#: What an error while reading a :class:`FastResponse`'s body (the ``answer`` or the
#: ``stream``) is raised as: ``body_error(exc, what)``.
BodyError = Callable[[httpx.HTTPError, str], Exception]


def request_head(method: bytes, url: httpx.URL) -> tuple[Origin, bytes]:
    """``url``'s origin, and the request line and ``host`` header httpx would write for
    ``method`` to it: the path as given, ``host`` without the default port."""
    head = method + b" " + url.raw_path + b" HTTP/1.1\r\nhost: " + url.netloc + b"\r\n"
    return (url.host, url.port or 80), head


def head_lines(
    head: bytes, headers: Iterable[tuple[bytes, bytes]], content_length: int
) -> list[bytes]:
    """A request head's pieces, to join: ``head`` (:func:`request_head`'s), each of
    ``headers``, then ``content-length`` and the blank line that ends the head."""
    lines = [head]
    for name, value in headers:  # a loop, not a comprehension: no frame of its own
        lines += (name, b": ", value, b"\r\n")
    lines.append(b"content-length: %d\r\n\r\n" % content_length)
    return lines


class _Connection(asyncio.Protocol):
    """One TCP connection; one request/response at a time."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.reused = False
        self._loop = asyncio.get_running_loop()
        self._reset()

    def _reset(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._headers: list[tuple[bytes, bytes]] = []
        self._head: asyncio.Future[tuple[int, list[tuple[bytes, bytes]]]] = (
            self._loop.create_future()
        )
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        #: The body's silence limit: the moment the current wait times out (the loop's
        #: clock), and the timer that checks it (:meth:`_check_silence`).
        self._silent_until = 0.0
        self._expiry: asyncio.TimerHandle | None = None
        #: The body's silence limit while :meth:`body` runs (seconds; ``None``: none).
        self._silence_s: float | None = None
        #: Takes a read's body bytes in :meth:`data_received` (:meth:`FastResponse.relay`).
        self._relay: Callable[[bytes], bool] | None = None
        self.complete = False
        self.keep_alive = True
        self._error: Exception | None = None

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed response from {self._where()}: {exc}"))
            self.close()
            return
        chunks = self._chunks
        if not chunks:
            return
        # What this read brought of the body goes to the relay (FastResponse.relay) only while
        # the body's reader waits with nothing queued (so all that is queued came with this
        # read, and nothing the reader took is still on its way to the client) and the body
        # goes on after it (its end, an error and all that follows them are the reader's).
        # Here, not in a method of its own: this runs for every read of a relayed stream.
        relay = self._relay
        waiter = self._waiter
        if (
            relay is not None
            and waiter is not None
            and not waiter.done()
            and not self.complete
            and self._error is None
        ):
            data = self._take()
            try:
                took = relay(data)
            except Exception as exc:  # the reader raises it, as if the relay had run in its task
                self._fail(exc)
                return
            if took:
                if self._silence_s is not None:  # a read arrived: the silence limit restarts
                    self._silent_until = self._loop.time() + self._silence_s
                return
            # Declined: queued again for the reader, as on_body queued it (taken first, so a
            # read the relay takes costs one frame less; the few it leaves, one more).
            self.on_body(data)
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        """Before the head: ``RemoteProtocolError`` (a kept-alive connection is tried once more,
        :meth:`FastHTTPTransport.open`). Mid-body, as httpx's own transport says it: a reset is
        a ``ReadError``, a close a ``RemoteProtocolError`` (the body left incomplete)."""
        self.closed = True
        if not self.complete:
            where = self._where()
            if not self._head.done():
                self._fail(httpx.RemoteProtocolError(f"{where} closed before answering"))
            elif exc is not None:
                self._fail(httpx.ReadError(f"{where} broke the connection mid-response: {exc!r}"))
            else:
                self._fail(httpx.RemoteProtocolError(f"{where} closed the connection mid-response"))

    # --- httptools callbacks ---------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.keep_alive = self._parser.should_keep_alive()
        if not self._head.done():
            self._head.set_result((self._parser.get_status_code(), self._headers))

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # --- used by the transport -------------------------------------------------------------

    def _fail(self, error: Exception) -> None:
        self._error = error
        if not self._head.done():
            self._head.set_exception(error)
            self._head.exception()  # retrieved: no "never retrieved" warning if unawaited
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def body(
        self,
        read_timeout_s: float | None,
        *,
        on_end: Callable[[], None] | None = None,
        body_error: BodyError | None = None,
    ) -> AsyncIterator[bytes]:
        """The body as it arrives; ``httpx.ReadTimeout`` after ``read_timeout_s`` seconds of
        waiting without a byte (``None``: no limit). ``on_end`` is called when the body was
        read to its end; with ``body_error`` httpx's errors are raised as
        ``body_error(exc, "stream")`` (a stream read by the controller's proxy needs no
        generator of its own around this one for that: one more frame per chunk).

        The limit is one timer per body, not one per wait: each wait moves the deadline
        (:attr:`_silent_until`), and the timer, when it fires early, sets itself again for
        the deadline (:meth:`_check_silence`) — a stream of many chunks would otherwise make
        and cancel a timer for each."""
        loop = self._loop
        self._silence_s = read_timeout_s
        try:
            while True:
                if self._chunks:
                    # Whatever arrived since the last turn goes on as one piece: a read holding
                    # many HTTP chunks (SSE events) becomes one write to the client, not one each.
                    yield self._take()
                elif self.complete:
                    if on_end is not None:
                        on_end()
                    return
                elif self._error is not None:
                    raise self._error
                else:
                    waiter = self._waiter = loop.create_future()
                    if read_timeout_s is not None:
                        self._silent_until = loop.time() + read_timeout_s
                        if self._expiry is None:
                            self._expiry = loop.call_at(self._silent_until, self._check_silence)
                    try:
                        await waiter
                    finally:
                        self._waiter = None
        except httpx.HTTPError as exc:
            if body_error is None:
                raise
            raise body_error(exc, "stream") from exc
        finally:
            self._relay = None
            if self._expiry is not None:
                self._expiry.cancel()
                self._expiry = None

    def _take(self) -> bytes:
        """The body's bytes queued since they were last taken, as one piece, forgotten here:
        the server is read again if a full queue had paused it."""
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def _check_silence(self) -> None:
        """The body's timer: fail the wait whose deadline passed; set the timer again for a
        later deadline; nothing when no wait is on (the next wait sets it again)."""
        self._expiry = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        left_s = self._silent_until - self._loop.time()
        if left_s <= 0:
            waiter.set_exception(httpx.ReadTimeout("timed out reading the response body"))
        else:
            self._expiry = self._loop.call_later(left_s, self._check_silence)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _where(self) -> str:
        """The server, for error messages."""
        host, port = self.origin
        return f"server {host}:{port}"


def _expire(future: asyncio.Future[Any], what: str) -> None:
    if not future.done():
        future.set_exception(httpx.ReadTimeout(f"timed out {what}"))


class _Pooled:
    """A body read off a pooled connection: hands the connection back once (to the pool when
    the body was read to its end, else closed: an abort)."""

    __slots__ = ("_conn", "_released", "_timeout", "_transport")

    def __init__(
        self, transport: FastHTTPTransport, conn: _Connection, timeout: float | None
    ) -> None:
        self._transport = transport
        self._conn = conn
        self._timeout = timeout
        self._released = False

    async def aclose(self) -> None:
        self._release()

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self._transport._release(self._conn)


class _Body(_Pooled, httpx.AsyncByteStream):
    """The response body; closing it early closes (aborts) the connection."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._conn.body(self._timeout):
            yield chunk
        self._release()


class FastResponse(_Pooled):
    """An answer read straight off a pooled connection: status, headers (lower-case names;
    repeated ones joined with ``", "``) and the body. Closing it before the body's end closes
    (aborts) the connection; otherwise the connection goes back to the pool."""

    __slots__ = ("headers", "status_code")

    def __init__(
        self,
        transport: FastHTTPTransport,
        conn: _Connection,
        status: int,
        raw_headers: list[tuple[bytes, bytes]],
        timeout: float | None,
    ) -> None:
        super().__init__(transport, conn, timeout)
        self.status_code = status
        headers: dict[str, str] = {}
        for raw_name, raw_value in raw_headers:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self.headers: Mapping[str, str] = headers

    async def aread(self) -> bytes:
        """The whole body. Raises httpx's error (or the transport's ``body_error`` of it) when
        the connection breaks or stalls past the read timeout."""
        conn = self._conn
        if conn.complete:
            # The whole body arrived with the head (the usual case): what the body's
            # iterator would hand on (what is queued, as one piece) and its end, without
            # the iterator.
            data = conn._take()
            conn._relay = None
            self._release()
            return data
        parts = []
        try:
            async for chunk in self._conn.body(self._timeout):
                parts.append(chunk)
        except httpx.HTTPError as exc:
            body_error = self._transport.body_error
            if body_error is None:
                raise
            raise body_error(exc, "answer") from exc
        finally:
            self._release()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives (what arrived since the last turn as one piece). Raises
        httpx's error (or the transport's ``body_error`` of it) when the connection breaks
        or stalls."""
        return self._conn.body(
            self._timeout, on_end=self._release, body_error=self._transport.body_error
        )

    def relay(self, take: Callable[[bytes], bool] | None) -> None:
        """Let ``take`` handle the body's reads in the connection's own callback, without
        waking the task that iterates :meth:`aiter_bytes` (``None``: stop). ``take`` gets
        what one read from the server brought of the body, whole, and returns whether it
        took it (then the iterator never sees those bytes); it is offered a read only while
        the iterator waits with nothing queued and the body goes on after the read — the
        body's end, an error and every read ``take`` declines go to the iterator as before,
        in order. A read ``take`` took starts the body's silence limit again; an exception
        from ``take`` is raised by the iterator. The relay stops when the iterator ends or
        is closed."""
        self._conn._relay = take

    def body_arrived(self) -> bool:
        """The whole body arrived and :meth:`aiter_bytes` handed all of it on: the iterator
        ends at its next step, without waiting."""
        conn = self._conn
        return conn.complete and not conn._chunks


class FastHTTPTransport(httpx.AsyncBaseTransport):
    """Keep-alive HTTP/1.1 over asyncio + httptools for ``http://``; httpx for the rest.

    ``max_connections`` bounds requests in flight through this transport (further requests
    wait); idle connections are kept per origin, newest first, for :data:`_IDLE_EXPIRY_S`.
    ``body_error``: what an error reading a :class:`FastResponse`'s body is raised as
    (default: httpx's error itself); answers through httpx's seam always raise httpx's.
    """

    def __init__(self, max_connections: int = 1024, body_error: BodyError | None = None) -> None:
        if max_connections < 1:
            raise ConfigError("FastHTTPTransport needs max_connections >= 1")
        self.body_error = body_error
        self._idle: dict[Origin, list[_Connection]] = {}
        # The slots of max_connections: an asyncio.Semaphore's, without its five Python
        # calls per request (acquire, locked, its any(), release, _wake_up_next). Free ones
        # are counted; a released slot goes to the first live waiter, if any (then none is
        # free while someone waits: first come, first served).
        self._free_slots = max_connections
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._fallback = httpx.AsyncHTTPTransport(limits=limits, retries=0)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http" or not isinstance(request.stream, httpx.ByteStream):
            return await self._fallback.handle_async_request(request)
        timeouts = request.extensions.get("timeout", {})
        read_timeout = timeouts.get("read")
        answer = await self.open(
            (url.host, url.port or 80),
            _serialise(request),
            read_timeout_s=read_timeout,
            connect_timeout_s=timeouts.get("connect"),
        )
        conn = answer._conn
        return httpx.Response(
            answer.status_code,
            headers=conn._headers,  # as received (this answer's own list: _reset)
            stream=_Body(self, conn, read_timeout),
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def open(
        self,
        origin: Origin,
        data: bytes,
        body: bytes = b"",
        *,
        read_timeout_s: float | None,
        connect_timeout_s: float | None,
    ) -> FastResponse:
        """Send ``data`` (a whole HTTP/1.1 request: head and ``Content-Length`` body — or the
        head only, its ``body`` given apart: written after it without a copy, for a long one)
        to ``origin``; the answer once its head arrived. Waits for a free slot first
        (``max_connections``). ``read_timeout_s``: the longest silence of the server (for the
        head and between body parts; ``None`` = none).

        Raises httpx's errors, as :meth:`handle_async_request` does: ``ConnectError`` /
        ``ConnectTimeout`` (nothing sent), ``RemoteProtocolError`` (closed or garbled before
        the head), ``ReadTimeout``."""
        # The pool's checkout, the request's write and the wait for its head all here, not
        # in methods and coroutines of their own: every frame of the chain is resumed when
        # the head arrives. A connection that fails is closed before the error goes on.
        if self._free_slots > 0:
            self._free_slots -= 1
        else:
            await self._wait_for_slot()
        try:
            conn: _Connection | None = None
            idle = self._idle.get(origin)
            if idle:  # the newest idle connection not expired
                now = time.monotonic()
                while idle:
                    kept_alive = idle.pop()
                    if not kept_alive.closed and now - kept_alive.idle_since < _IDLE_EXPIRY_S:
                        kept_alive.reused = True
                        conn = kept_alive
                        break
                    kept_alive.close()
            kept = conn is not None
            while True:
                if conn is None:
                    conn = await self._connect(origin, connect_timeout_s)
                try:
                    if conn.reused:  # the request written
                        conn._reset()
                    transport = conn.transport
                    assert transport is not None
                    if body:  # one vectored write of both, the body not copied
                        transport.writelines((data, body))
                    else:
                        transport.write(data)
                    head = conn._head
                    if read_timeout_s is None:
                        status, headers = await head
                    else:  # failed with a timeout after read_timeout_s
                        expiry = conn._loop.call_later(
                            read_timeout_s, _expire, head, "waiting for the response head"
                        )
                        try:
                            status, headers = await head
                        finally:
                            expiry.cancel()
                    break
                except httpx.RemoteProtocolError:
                    conn.close()
                    if not kept:
                        raise
                    # A kept-alive connection the server had closed: once more, fresh.
                    conn, kept = None, False
                except BaseException:
                    conn.close()
                    raise
        except BaseException:
            self._give_slot()
            raise
        return FastResponse(self, conn, status, headers, read_timeout_s)

    async def exchange(
        self,
        method: bytes,
        url: httpx.URL,
        headers: Sequence[tuple[bytes, bytes]],
        body: bytes,
        *,
        timeout_s: float | None,
    ) -> tuple[int, bytes]:
        """``method`` to ``url`` with ``headers`` (``content-length`` added) and ``body``; the
        answer's status and whole body. ``http://`` goes over the pool without httpx's
        objects (:meth:`open`), the rest through httpx's transport inside. ``timeout_s``
        bounds connecting and each wait for the server (``None``: no limit). Raises httpx's
        errors."""
        if url.scheme == "http":
            origin, head = request_head(method, url)
            lines = head_lines(head, headers, len(body))
            lines.append(body)
            answer = await self.open(
                origin, b"".join(lines), read_timeout_s=timeout_s, connect_timeout_s=timeout_s
            )
            return answer.status_code, await answer.aread()
        request = httpx.Request(
            method.decode(),
            url,
            headers=list(headers),
            content=body,
            extensions={"timeout": httpx.Timeout(timeout_s).as_dict()},
        )
        response = await self.handle_async_request(request)  # to httpx's transport inside
        try:
            return response.status_code, await response.aread()
        finally:
            await response.aclose()

    def _release(self, conn: _Connection) -> None:
        """The answer on ``conn`` was read or given up: keep the connection or close it."""
        if conn.complete and conn.keep_alive and not conn.closed:
            conn.idle_since = time.monotonic()  # kept in the pool
            self._idle.setdefault(conn.origin, []).append(conn)
        else:
            conn.close()
        self._give_slot()

    async def _wait_for_slot(self) -> None:
        """Wait until :meth:`_give_slot` hands this request a slot (in the order of asking).
        A wait cancelled after a slot was handed to it hands the slot on."""
        waiter = asyncio.get_running_loop().create_future()
        self._slot_waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._give_slot()
            else:
                with contextlib.suppress(ValueError):  # _give_slot may have dropped it
                    self._slot_waiters.remove(waiter)
            raise

    def _give_slot(self) -> None:
        """A request's slot is free: to the first waiter still waiting, else counted free."""
        waiters = self._slot_waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free_slots += 1

    async def _connect(self, origin: Origin, connect_timeout_s: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            connecting = loop.create_connection(lambda: _Connection(origin), *origin)
            _, conn = await asyncio.wait_for(connecting, connect_timeout_s)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connecting to {origin[0]}:{origin[1]} timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {origin[0]}:{origin[1]}: {exc}") from exc
        return conn

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        await self._fallback.aclose()


def _serialise(request: httpx.Request) -> bytes:
    """Request line, headers and body in one buffer (one write, one TCP segment)."""
    url = request.url
    target = url.raw_path
    lines = [request.method.encode() + b" " + target + b" HTTP/1.1"]
    lines += [name + b": " + value for name, value in request.headers.raw]
    body = request.content
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
