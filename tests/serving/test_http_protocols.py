"""Both HTTP/1.1 protocols a hardened server can run on (httptools, the default, and h11) keep
the same hardening over real sockets: the head size limit on a head that arrives in pieces,
the request-head timeout (slow loris) on a new and on a kept-alive connection, the idle
keep-alive timeout, malformed requests refused, and pipelined requests answered in order
without their bytes counting towards the next head."""

from __future__ import annotations

import contextlib
import time

import anyio
import anyio.abc
import pytest

from agentrt_serving.hardening import HttpLimits
from agentrt_serving.uvicorn_server import HttpProtocol
from tests.serving.echo_server import request, serve
from tests.serving.stalls import LoopStalls

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

#: The head timeout under test: short, so that its tests are quick.
LIMITS = HttpLimits(max_header_bytes=4096, header_timeout_s=0.5)
#: The same head size limit for the tests of other things, with a head timeout that a stall of
#: the test process (tests/serving/stalls.py) cannot bring about in their midst.
UNHURRIED = HttpLimits(max_header_bytes=LIMITS.max_header_bytes, header_timeout_s=10.0)
PROTOCOLS = ["httptools", "h11"]


def _serve(
    protocol: HttpProtocol, limits: HttpLimits = UNHURRIED
) -> contextlib.AbstractAsyncContextManager[int]:
    return serve(protocol, limits)


async def _until_closed(stream: anyio.abc.SocketStream, limit_s: float) -> tuple[bytes, bool]:
    """What the server sends until it closes the connection (or ``limit_s`` passes), and
    whether it closed it."""
    data = b""
    with anyio.move_on_after(limit_s):
        while True:
            try:
                data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                return data, True
    return data, False


def _assert_closed_on_time(stalls: LoopStalls, wall_start: float, ran_start: float) -> None:
    """The connection closed no earlier than the head timeout after ``wall_start`` (wall
    time, which a stall only lengthens), and no later than 0.5 s past it in the time the loop
    could run since ``ran_start`` (:meth:`LoopStalls.clock`: the stalls of the test process,
    which hold up the server's timer as well, do not count)."""
    wall_s = time.monotonic() - wall_start
    ran_s = stalls.clock() - ran_start
    timeout_s = LIMITS.header_timeout_s
    assert wall_s >= timeout_s - 0.05, f"closed {wall_s:.3f} s in, before the timeout"
    assert ran_s < timeout_s + 0.5, f"closed {ran_s:.3f} s in ({stalls.stalled_s:.3f} s stalled)"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_head_growing_past_the_limit_in_pieces_is_refused(protocol: HttpProtocol) -> None:
    head = b"GET /x HTTP/1.1\r\nhost: x\r\nx-big: "
    async with (
        _serve(protocol) as port,
        await anyio.connect_tcp("127.0.0.1", port) as stream,
    ):
        await stream.send(head)
        # One header value 512 bytes at a time, up to the piece that takes the head past the
        # limit; no more (sending on after the answer would reset the connection and lose it).
        while len(head) <= LIMITS.max_header_bytes:
            await anyio.sleep(0.01)
            await stream.send(b"a" * 512)
            head += b"a" * 512
        raw, closed = await _until_closed(stream, 5)
    assert closed, "the connection stayed open"
    # httptools: the protocol's own 431; h11: uvicorn answers its limit with a 400.
    assert raw.startswith(b"HTTP/1.1 431 " if protocol == "httptools" else b"HTTP/1.1 400 ")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_head_under_the_limit_in_pieces_is_served(protocol: HttpProtocol) -> None:
    async with (
        _serve(protocol) as port,
        await anyio.connect_tcp("127.0.0.1", port) as stream,
    ):
        await stream.send(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nx-big: ")
        for _ in range(7):  # 3.5 KiB
            await anyio.sleep(0.005)
            await stream.send(b"a" * 512)
        await stream.send(b"\r\nconnection: close\r\n\r\nok")
        raw, _ = await _until_closed(stream, 5)
    assert raw.startswith(b"HTTP/1.1 200 ") and raw.endswith(b"/x ok")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_pipelined_requests_are_answered_in_order_and_their_bodies_are_no_head(
    protocol: HttpProtocol,
) -> None:
    # Ten requests with 3 KiB bodies in one write: 30 KiB, far over the head limit in total.
    requests = b"".join(request(f"/r{i}", b"b" * 3000) for i in range(10))
    async with (
        _serve(protocol) as port,
        await anyio.connect_tcp("127.0.0.1", port) as stream,
    ):
        await stream.send(requests)
        raw = b""
        with anyio.fail_after(5):
            while raw.count(b"HTTP/1.1 200 ") < 10 or not raw.endswith(b"b"):
                raw += await stream.receive()
    order = [raw.index(b"/r%d " % i) for i in range(10)]
    assert order == sorted(order)
    assert raw.count(b"HTTP/1.1 ") == 10


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_trickled_head_is_dropped_new_or_kept_alive(protocol: HttpProtocol) -> None:
    async def trickle(stream: anyio.abc.SocketStream) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, OSError):
            while True:  # one header byte every 0.05 s, never the end of the head
                await anyio.sleep(0.05)
                await stream.send(b"X")

    async with _serve(protocol, LIMITS) as port:
        for first in (b"", request("/first")):
            with LoopStalls() as stalls:
                wall_start, ran_start = time.monotonic(), stalls.clock()
                async with (
                    await anyio.connect_tcp("127.0.0.1", port) as stream,
                    anyio.create_task_group() as group,
                ):
                    await stream.send(first + b"GET /slow HTTP/1.1\r\nhost: x\r\n")
                    group.start_soon(trickle, stream)
                    # Trickling for 10 s: far past the timeout, were it reset by each byte.
                    _, closed = await _until_closed(stream, 10)
                    assert closed, f"a trickled head kept its connection ({first!r})"
                    _assert_closed_on_time(stalls, wall_start, ran_start)
                    group.cancel_scope.cancel()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_idle_connection_is_closed_after_the_timeout(protocol: HttpProtocol) -> None:
    async with _serve(protocol, LIMITS) as port:
        with LoopStalls() as stalls:
            wall_start, ran_start = time.monotonic(), stalls.clock()
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:  # says nothing
                _, closed = await _until_closed(stream, 10)
                assert closed, "a silent connection stayed open"
                _assert_closed_on_time(stalls, wall_start, ran_start)
        with LoopStalls() as stalls:
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:  # one call, idle
                wall_start, ran_start = time.monotonic(), stalls.clock()
                await stream.send(request("/once", b"1"))
                raw, closed = await _until_closed(stream, 10)
                assert closed, "an idle kept-alive connection stayed open"
                _assert_closed_on_time(stalls, wall_start, ran_start)
        assert raw.startswith(b"HTTP/1.1 200 ") and raw.endswith(b"/once 1")


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /x HTTP/1.1\r\nhost: x\r\nbad header: 1\r\n\r\n",
        b"GET /x HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
        b"POST /x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS client hello
    ],
    ids=["space-in-name", "two-lengths", "bad-chunk", "tls"],
)
async def test_a_malformed_request_is_a_400_and_closed(
    protocol: HttpProtocol, request_bytes: bytes
) -> None:
    async with (
        _serve(protocol) as port,
        await anyio.connect_tcp("127.0.0.1", port) as stream,
    ):
        await stream.send(request_bytes)
        raw, closed = await _until_closed(stream, 5)
    assert closed
    assert raw.startswith(b"HTTP/1.1 400 ")
