"""The hardened protocols' head timeout as a deadline with one pending check per connection
(``uvicorn_server._HeadDeadline``): back-to-back requests on a kept-alive connection, on the
ASGI and on a direct route, make no head timer handle; a connection's pending check goes with
it; a connection kept busy past the timeout stays open (its deadline moves later, the check
reschedules itself); no timeout acts before its deadline — the idle keep-alive wait and,
after it, a head's own time from its first byte; and a kept-alive connection still closes
when the server stops."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.abc
import pytest

from agentrt_serving.hardening import HttpLimits
from agentrt_serving.uvicorn_server import (
    HttpProtocol,
    _HeadDeadline,
)
from tests.serving.echo_server import request, serve

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

#: The timeout under test: long enough that a stall of the test process (up to ~1 s on a shared
#: CI machine: tests/serving/stalls.py), which holds up the server's timers with the client's,
#: cannot make a client that waits well under it late for the server (scripts/stall_tests.py).
TIMEOUT_S = 1.5
#: Lateness allowed on a closing time measured by the client (the server's clock started a
#: little before the client's: at the answer's write, at the byte's read).
EARLY_S = 0.05


def _serve(
    protocol: HttpProtocol = "httptools", timeout_s: float = TIMEOUT_S
) -> contextlib.AbstractAsyncContextManager[int]:
    limits = HttpLimits(max_header_bytes=4096, header_timeout_s=timeout_s)
    return serve(protocol, limits, direct=True)


@contextlib.contextmanager
def _head_checks() -> Iterator[list[asyncio.TimerHandle]]:
    """The head-deadline checks the server's protocols schedule on this loop while the block
    runs."""
    loop = asyncio.get_running_loop()
    made: list[asyncio.TimerHandle] = []
    call_at = loop.call_at

    def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        handle = call_at(when, callback, *args, **kwargs)
        if getattr(callback, "__func__", None) is _HeadDeadline._check_deadline:
            made.append(handle)
        return handle

    loop.call_at = counting  # type: ignore[method-assign]
    try:
        yield made
    finally:
        del loop.call_at


async def _answer(stream: anyio.abc.SocketStream, path: str, body: bytes) -> None:
    await stream.send(request(path, body))
    expected = path.encode() + b" " + body
    raw = b""
    while not raw.endswith(expected):
        raw += await stream.receive()
    assert raw.startswith(b"HTTP/1.1 200 "), raw


async def _closed_after(stream: anyio.abc.SocketStream, limit_s: float) -> float:
    """Seconds until the server closes the connection (``math.inf``: not within ``limit_s``)."""
    start = time.monotonic()
    with anyio.move_on_after(limit_s):
        while True:
            try:
                await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                return time.monotonic() - start
    return math.inf


@pytest.mark.parametrize("path", ["/asgi", "/direct"])
async def test_back_to_back_requests_make_no_head_timer_handle(path: str) -> None:
    with _head_checks() as made:
        async with _serve(timeout_s=30) as port:
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await _answer(stream, path, b"first")
                before = len(made)
                for n in range(50):
                    await _answer(stream, path, b"%d" % n)
                assert len(made) == before  # was one per request
            for _ in range(100):  # the server sees the connection go
                if all(handle.cancelled() for handle in made):
                    break
                await anyio.sleep(0.01)
            assert made and all(handle.cancelled() for handle in made)  # none left pending


@pytest.mark.parametrize("path", ["/asgi", "/direct"])
async def test_a_connection_kept_busy_past_the_timeout_stays_open(path: str) -> None:
    async with _serve() as port, await anyio.connect_tcp("127.0.0.1", port) as stream:
        start = time.monotonic()
        n = 0
        while time.monotonic() - start < 2 * TIMEOUT_S:  # past the first deadlines
            await _answer(stream, path, b"%d" % n)
            n += 1
            await anyio.sleep(0.1)
        await _answer(stream, path, b"last")  # still open
        took = await _closed_after(stream, 5)
        assert TIMEOUT_S - EARLY_S <= took < TIMEOUT_S + 2


@pytest.mark.parametrize("protocol", ["httptools", "h11"])
async def test_a_head_after_a_kept_alive_wait_gets_its_own_time(protocol: HttpProtocol) -> None:
    async with _serve(protocol) as port, await anyio.connect_tcp("127.0.0.1", port) as stream:
        await _answer(stream, "/asgi", b"1")
        await anyio.sleep(TIMEOUT_S * 0.4)  # idle, but within the keep-alive wait
        await stream.send(b"GET /slow HTTP/1.1\r\n")  # a head begun, never finished
        took = await _closed_after(stream, 5)
        assert TIMEOUT_S - EARLY_S <= took < TIMEOUT_S + 2


@pytest.mark.parametrize("protocol", ["httptools", "h11"])
async def test_a_new_connections_head_times_out_from_connecting(protocol: HttpProtocol) -> None:
    async with _serve(protocol) as port, await anyio.connect_tcp("127.0.0.1", port) as stream:
        start = time.monotonic()
        await anyio.sleep(TIMEOUT_S * 0.4)
        await stream.send(b"GET /slow HTTP/1.1\r\n")  # the clock started at connecting
        assert await _closed_after(stream, 5) < math.inf
        assert TIMEOUT_S - EARLY_S <= time.monotonic() - start < TIMEOUT_S + 2


@pytest.mark.parametrize("path", ["/asgi", "/direct"])
async def test_a_kept_alive_connection_closes_when_the_server_stops(path: str) -> None:
    with _head_checks() as made:
        async with _serve(timeout_s=30) as port:  # no timeout can close it in this test
            stream = await anyio.connect_tcp("127.0.0.1", port)
            await _answer(stream, path, b"1")
        async with stream:
            assert await _closed_after(stream, 5) < 5
        assert made and all(handle.cancelled() for handle in made)
