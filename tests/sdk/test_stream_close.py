"""Responses cancelled by a program's deadline are closed at once, not by the garbage
collector: the server sees every disconnect while the runtime is still open, with the
collector off (so only deterministic closes count), and no socket is left behind to warn."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Iterator

import anyio
import anyio.lowlevel
import httpx
import openai
import pytest

import agentrt
from agentrt import DeadlineExceeded, Runtime, RuntimeConfig
from agentrt.fasthttp import FastHTTPTransport

from .fakeserver import FakeServer, FakeState, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

USER = [{"role": "user", "content": "hi"}]
ROUNDS = 8


@pytest.fixture
def no_gc() -> Iterator[None]:
    """Collector off during the test; on again and run at the end, so that a socket only
    the collector would close warns (an error under filterwarnings) inside this test."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


class _StuckBody(httpx.AsyncByteStream):
    """A body that never arrives and whose close awaits before closing the real one, as a
    transport that does not shield its cleanup would: a close cancelled at that await never
    reaches the connection. Counts the closes that did."""

    def __init__(self, inner: httpx.AsyncByteStream, transport: _StuckTransport) -> None:
        self._inner = inner
        self._transport = transport

    async def __aiter__(self) -> AsyncIterator[bytes]:
        await anyio.sleep_forever()
        yield b""  # pragma: no cover - never reached

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
        await self._inner.aclose()
        self._transport.closed += 1


class _StuckTransport(httpx.AsyncBaseTransport):
    """The runtime's real pool (the lean transport) under :class:`_StuckBody` bodies; counts
    responses opened and closed."""

    def __init__(self) -> None:
        self._pool = FastHTTPTransport()
        self.opened = 0
        self.closed = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._pool.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _StuckBody(response.stream, self)
        self.opened += 1
        return response

    async def aclose(self) -> None:
        await self._pool.aclose()


async def _cancelled_calls(rt: Runtime) -> None:
    """One program whose deadline cuts three calls: an SDK chat, a raw stream being read and
    a raw stream abandoned half-read (closed by the program's end)."""
    client = rt.openai_client()
    with pytest.raises(DeadlineExceeded):
        async with rt.program("cut", timeout_s=0.25), anyio.create_task_group() as tg:

            async def read_stream(abandon: bool) -> None:
                stream = await client.chat.completions.create(
                    model="m1",
                    messages=USER,  # type: ignore[arg-type]
                    stream=True,
                )
                assert isinstance(stream, openai.AsyncStream)
                async for _ in stream:
                    if abandon:
                        return

            tg.start_soon(agentrt.chat, USER)
            tg.start_soon(read_stream, False)
            tg.start_soon(read_stream, True)


@pytest.mark.usefixtures("no_gc")
async def test_cancelled_responses_are_closed_before_the_runtime_exits(
    server: FakeServer, state: FakeState
) -> None:
    state.delay_s = 5.0
    state.reply = lambda body: {"role": "assistant", "content": " ".join(["w"] * 50)}
    config = RuntimeConfig(base_url=server.base_url, model="m1", controller="off")
    async with Runtime(config) as rt:
        for _ in range(ROUNDS):
            await _cancelled_calls(rt)
        # Every cancelled call that reached the server ended there as a disconnect, with the
        # runtime (and its pool) still open and no garbage collection: the SDK closed them
        # itself (one left open would stream on for 5 s: running, then completed). How many
        # of a round's three calls are sent before its deadline is the machine's speed (on a
        # stalled machine a call can find its deadline gone first: never sent, also
        # cancelled), so the count is at least one, not always 3 x ROUNDS.
        await wait_until(lambda: state.disconnects >= 1 and state.running == 0, 10.0)
    assert len(state.requests) >= state.disconnects
    assert state.completed == 0


@pytest.mark.usefixtures("no_gc")
async def test_a_cancelled_close_still_reaches_the_transport(server: FakeServer) -> None:
    """The SDK shields its close of a response: a transport whose close awaits (and so
    could be cancelled there) still gets every response closed, at the deadline."""
    transport = _StuckTransport()
    config = RuntimeConfig(
        base_url=server.base_url, model="m1", controller="off", http_transport=transport
    )
    try:
        async with Runtime(config) as rt:
            for _ in range(ROUNDS):
                await _cancelled_calls(rt)
            # Every response opened was closed. How many open before a round's deadline is
            # the machine's speed (a stalled machine may send a call too late to open).
            assert transport.opened >= 1
            assert transport.closed == transport.opened
    finally:
        await transport.aclose()
