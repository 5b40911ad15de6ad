"""Generation requests over the lean transport's pool without httpx objects
(``HttpBackend.send`` → ``FastHTTPTransport.open``), against raw loopback servers: the wire
format, keep-alive, aborts and the error mapping the controller's retries rely on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import pytest

from agentrt.fasthttp import FastResponse
from agentrt_controller.backends.api import (
    BackendDisconnected,
    BackendError,
    BackendRequest,
    BackendUnavailable,
)
from agentrt_controller.backends.http import HttpBackend, HttpBackendConfig
from agentrt_controller.backends.transport import HttpPool
from tests.sdk.test_fasthttp import (
    Server,
    endless_stream,
    keep_alive_echo,
    read_request,
    response,
    serving,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

BODY = b'{"model":"m","messages":[]}'


def request(*, stream: bool = False, headers: dict[str, str] | None = None) -> BackendRequest:
    return BackendRequest(
        path="/v1/chat/completions",
        raw_body=BODY,
        body={"model": "m", "messages": []},
        stream=stream,
        headers=headers or {},
    )


@contextlib.asynccontextmanager
async def backend(
    url: str,
    *,
    read_timeout_s: float = 2.0,
    credential: str | None = None,
    max_connections: int = 1024,
) -> AsyncIterator[HttpBackend]:
    pool = HttpPool.create(
        read_timeout_s=read_timeout_s, connect_timeout_s=2.0, max_connections=max_connections
    )
    try:
        yield HttpBackend("b0", url, pool, HttpBackendConfig(credential=credential))
    finally:
        await pool.aclose()


async def test_requests_reuse_one_connection_and_carry_host_length_and_credential() -> None:
    heads: list[bytes] = []

    async def recording(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        server: Server) -> None:  # fmt: skip
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            heads.append(head)
            await reader.readexactly(len(BODY))
            writer.write(response(b"ok", b"X-Request-Id: r1\r\nset-cookie: a\r\nSet-Cookie: b\r\n"))
            await writer.drain()

    async with serving(recording) as (url, server), backend(url, credential="own") as b:
        for _ in range(3):
            answer = await b.send(request(headers={"authorization": "Bearer tenant"}))
            assert isinstance(answer, FastResponse)
            assert answer.status_code == 200
            assert answer.headers["x-request-id"] == "r1"  # lower-case names
            assert answer.headers["set-cookie"] == "a, b"  # repeated ones joined
            assert await answer.aread() == b"ok"
    assert server.connections == 1
    port = url.rsplit(":", 1)[1]
    lines = heads[0].decode().split("\r\n")
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    assert f"host: 127.0.0.1:{port}" in lines
    assert f"content-length: {len(BODY)}" in lines
    # The controller's own credential replaces the tenant's key.
    assert "authorization: Bearer own" in lines
    assert "authorization: Bearer tenant" not in lines


async def test_closing_an_unfinished_stream_closes_the_connection() -> None:
    closed = anyio.Event()
    async with serving(endless_stream(b"data:\n", closed)) as (url, _), backend(url) as b:
        answer = await b.send(request(stream=True))
        chunks = aiter(answer.aiter_bytes())
        assert (await anext(chunks)).startswith(b"data:")
        await chunks.aclose()  # type: ignore[attr-defined]
        await answer.aclose()
        with anyio.fail_after(5):
            await closed.wait()


async def test_a_refused_connection_is_retryable_elsewhere() -> None:
    listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    listener.close()
    await listener.wait_closed()
    async with backend(f"http://127.0.0.1:{port}") as b:
        with pytest.raises(BackendUnavailable) as caught:
            await b.send(request())
    assert caught.value.connect_failed


async def test_a_server_closing_before_its_head_leaves_the_call_retryable() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      server: Server) -> None:  # fmt: skip
        await read_request(reader, server)

    async with serving(hang_up) as (url, _), backend(url) as b:
        with pytest.raises(BackendUnavailable) as caught:
            await b.send(request())
    assert not caught.value.connect_failed


async def test_a_connection_lost_mid_body_is_a_disconnect() -> None:
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()

    async with serving(half) as (url, _), backend(url) as b:
        answer = await b.send(request())
        with pytest.raises(BackendDisconnected):
            await answer.aread()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_silent_server_times_out(stream: bool) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        await reader.read()

    async with serving(silent) as (url, _), backend(url, read_timeout_s=0.2) as b:
        with pytest.raises(BackendError) as caught:
            await b.send(request(stream=stream))
    # A stream's head comes at once: silence means stalled, and another backend may answer;
    # a whole answer's head comes last: slow, not stalled.
    assert isinstance(caught.value, BackendUnavailable) is stream


async def test_an_answer_closed_unread_gives_its_slot_back() -> None:
    async with serving(keep_alive_echo) as (url, _), backend(url, max_connections=1) as b:
        for _ in range(3):
            await (await b.send(request())).aclose()
        with anyio.fail_after(5):  # the one slot is free again
            answer = await b.send(request())
        assert await answer.aread() == b"echo:" + BODY


async def test_a_stream_silent_after_its_first_chunks_times_out_as_a_broken_stream() -> None:
    async def then_silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        # The head and three chunks at once (a stall of the test process between spaced
        # chunks would be a silence of its own), then silence, the connection open.
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b"2\r\nab\r\n" * 3)
        await writer.drain()
        await reader.read()

    async with serving(then_silent) as (url, _), backend(url, read_timeout_s=0.3) as b:
        answer = await b.send(request(stream=True))
        received = b""
        with pytest.raises(BackendError, match="timed out reading the response body"):
            async for chunk in answer.aiter_bytes():
                received += chunk
        await answer.aclose()
    assert received == b"ababab"


async def test_a_stream_whose_chunks_keep_coming_does_not_time_out() -> None:
    # Chunks 10 ms apart for 2 s under a limit of 1.5 s: the limit is on each silence (one
    # timer per body moved at every wait), not on the body as a whole. (The limit is long
    # enough that a stall of the test process, which silences the server too, cannot reach it.)
    closed = anyio.Event()
    async with serving(endless_stream(b"x", closed)) as (url, _):
        async with backend(url, read_timeout_s=1.5) as b:
            answer = await b.send(request(stream=True))
            received = 0
            started = asyncio.get_running_loop().time()
            async for chunk in answer.aiter_bytes():
                received += len(chunk)
                if asyncio.get_running_loop().time() - started > 2.0:
                    break
            await answer.aclose()
        await closed.wait()
    assert received > 10


async def test_a_stream_says_when_its_last_byte_was_handed_on() -> None:
    # The proxy writes the last piece of a stream together with its end when the body says it
    # arrived whole: never before the last byte, and then the iterator ends without waiting.
    go_on = asyncio.Event()

    async def two_reads(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await go_on.wait()
        writer.write(b"4\r\nlast\r\n0\r\n\r\n")
        await writer.drain()
        await keep_alive_echo(reader, writer, server)

    async with serving(two_reads) as (url, server), backend(url) as b:
        answer = await b.send(request(stream=True))
        assert isinstance(answer, FastResponse)
        chunks = aiter(answer.aiter_bytes())
        assert await anext(chunks) == b"first"
        assert not answer.body_arrived()
        go_on.set()
        assert await anext(chunks) == b"last"
        assert answer.body_arrived()
        assert await anext(chunks, None) is None
        # Read to its end, the connection went back to the pool.
        again = await b.send(request())
        assert await again.aread() == b"echo:" + BODY
        assert server.connections == 1


def _paced(*writes: bytes) -> Callable[..., Awaitable[None]]:
    """A stream answered in ``writes``, 50 ms apart (each a read of its own), then keep-alive."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for data in writes:
            writer.write(data)
            await writer.drain()
            await asyncio.sleep(0.05)
        await keep_alive_echo(reader, writer, server)

    return answer


async def test_a_relay_takes_reads_while_the_reader_waits_and_leaves_it_the_rest() -> None:
    # Offered: each read after the first while the iterator waits, whole (two HTTP chunks in
    # one read come as one piece). Declined ("c") or bringing the end ("d"): the iterator's.
    paced = _paced(b"1\r\na\r\n", b"1\r\nb\r\n2\r\nbb\r\n", b"1\r\nc\r\n", b"1\r\nd\r\n0\r\n\r\n")
    async with serving(paced) as (url, server), backend(url) as b:
        answer = await b.send(request(stream=True))
        assert isinstance(answer, FastResponse)
        chunks = aiter(answer.aiter_bytes())
        assert await anext(chunks) == b"a"
        offered: list[bytes] = []

        def take(data: bytes) -> bool:
            offered.append(data)
            return data != b"c"

        answer.relay(take)
        assert [chunk async for chunk in chunks] == [b"c", b"d"]
        assert offered == [b"bbb", b"c"]
        # Read to its end: the relay is off and the connection back in the pool.
        again = await b.send(request())
        assert await again.aread() == b"echo:" + BODY
        assert server.connections == 1


async def test_what_a_relay_raises_the_reader_raises() -> None:
    paced = _paced(b"1\r\na\r\n", b"1\r\nb\r\n", b"1\r\nc\r\n0\r\n\r\n")
    async with serving(paced) as (url, _), backend(url) as b:
        answer = await b.send(request(stream=True))
        assert isinstance(answer, FastResponse)
        chunks = aiter(answer.aiter_bytes())
        assert await anext(chunks) == b"a"

        def take(data: bytes) -> bool:
            raise RuntimeError(f"cannot take {data!r}")

        answer.relay(take)
        with pytest.raises(RuntimeError, match="cannot take b'b'"):
            await anext(chunks)
        await answer.aclose()


@pytest.mark.parametrize("sizes", [(10, 16_383, 16_384, 600_000, 20, 300_000)])
async def test_long_bodies_written_after_their_head_arrive_whole_on_one_connection(
    sizes: tuple[int, ...],
) -> None:
    # Bodies from 16 KB on go out apart from their head (no copy); either way the server
    # reads one request after the other on the kept-alive connection.
    async with serving(keep_alive_echo) as (url, server), backend(url) as b:
        for size in sizes:
            raw = b'{"model":"m","messages":[],"x":"' + b"a" * size + b'"}'
            call = BackendRequest(
                path="/v1/chat/completions", raw_body=raw, body={}, stream=False, headers={}
            )
            answer = await b.send(call)
            assert await answer.aread() == b"echo:" + raw
    assert server.connections == 1 and server.requests == len(sizes)


async def test_a_long_body_is_sent_again_whole_on_a_fresh_connection() -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   server: Server) -> None:  # fmt: skip
        body = await read_request(reader, server)
        writer.write(response(b"echo:" + body))  # kept alive by its head, then closed
        await writer.drain()
        writer.close()

    raw = b'{"model":"m","messages":[],"x":"' + b"b" * 400_000 + b'"}'
    call = BackendRequest(path="/v1/chat/completions", raw_body=raw, body={}, stream=False,
                          headers={})  # fmt: skip
    async with serving(once) as (url, server), backend(url) as b:
        for _ in range(3):
            answer = await b.send(call)
            assert await answer.aread() == b"echo:" + raw
    assert server.requests == 3
