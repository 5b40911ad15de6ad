"""The lean HTTP/1.1 transport against raw loopback servers that misbehave on purpose."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import anyio.lowlevel
import httpx
import pytest

from agentrt.fasthttp import FastHTTPTransport

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]


class Server:
    """A raw HTTP server: ``handler`` serves each connection; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests = 0
        self.heads: list[bytes] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def read_request(reader: asyncio.StreamReader, server: Server) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    server.heads.append(head)
    match = re.search(rb"(?i)content-length:\s*(\d+)", head)
    body = await reader.readexactly(int(match.group(1))) if match else b""
    server.requests += 1
    return body


def response(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def keep_alive_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          server: Server) -> None:  # fmt: skip
    while True:
        body = await read_request(reader, server)
        writer.write(response(b"echo:" + body))
        await writer.drain()


def endless_stream(chunk: bytes, closed: anyio.Event) -> Handler:
    """A handler that answers one request with a chunked body of ``chunk`` every 10 ms until
    the client goes away, then sets ``closed``."""

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        try:
            while True:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
                await asyncio.sleep(0.01)
        finally:
            closed.set()

    return endless


@contextlib.asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[tuple[str, Server]]:
    server = Server(handler)
    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        listener.close()


@contextlib.asynccontextmanager
async def client(**kwargs: object) -> AsyncIterator[httpx.AsyncClient]:
    transport = FastHTTPTransport(**kwargs)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, timeout=2.0) as http:
        yield http


async def test_keep_alive_reuses_one_connection() -> None:
    async with serving(keep_alive_echo) as (url, server), client() as http:
        answers = [(await http.post(url + "/x", content=b"%d" % i)).text for i in range(5)]
    assert answers == [f"echo:{i}" for i in range(5)]
    assert server.connections == 1


async def test_chunked_body_is_streamed_as_it_arrives() -> None:
    release = anyio.Event()

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
        await writer.drain()
        await reader.read()

    async with (
        serving(chunked) as (url, _),
        client() as http,
        http.stream("POST", url, content=b"{}") as streamed,
    ):
        parts = streamed.aiter_bytes()
        assert await anext(parts) == b"first"  # before the server sent the rest
        release.set()
        assert [chunk async for chunk in parts] == [b"second"]


async def test_closing_an_unfinished_response_closes_the_connection() -> None:
    closed = anyio.Event()
    async with serving(endless_stream(b"x", closed)) as (url, _), client() as http:
        async with http.stream("POST", url, content=b"{}") as streamed:
            async for _ in streamed.aiter_bytes():
                break
        with anyio.fail_after(5):
            await closed.wait()  # the server saw the abort


async def test_a_connection_the_server_closed_is_not_reused() -> None:
    async def one_shot(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        writer.write(response(b"ok"))  # keep-alive by default, but closes anyway
        await writer.drain()

    async with serving(one_shot) as (url, server), client() as http:
        first = await http.post(url, content=b"1")
        await anyio.sleep(0.05)
        second = await http.post(url, content=b"2")
    assert (first.text, second.text) == ("ok", "ok")
    assert server.connections == 2


async def test_a_stale_keep_alive_connection_is_retried_once_on_a_fresh_one() -> None:
    async def close_on_second(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                              server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        writer.write(response(b"ok"))
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")  # the next request arrives... and is dropped

    async with serving(close_on_second) as (url, server), client() as http:
        assert (await http.post(url, content=b"1")).text == "ok"
        assert (await http.post(url, content=b"2")).text == "ok"
    assert server.connections == 2


async def test_errors_are_httpx_errors() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        await anyio.sleep(10)

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        await reader.read()

    async with serving(silent) as (url, _), client() as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post(url, content=b"{}", timeout=0.2)
    async with serving(garbage) as (url, _), client() as http:
        host_port = url.removeprefix("http://")
        with pytest.raises(httpx.RemoteProtocolError, match=f"response from server {host_port}"):
            await http.post(url, content=b"{}")
    async with serving(keep_alive_echo) as (url, _):
        pass  # the port is free again
    async with client() as http:
        with pytest.raises(httpx.ConnectError):
            await http.post(url, content=b"{}")


async def test_exchange_sends_a_whole_request_and_reads_the_whole_answer() -> None:
    """``exchange``: the head as httpx would write it, ``content-length`` added, the body in
    the same write; over the pool for ``http``, through httpx's transport for ``https``."""
    to_httpx: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        to_httpx.append(request)
        return httpx.Response(404, content=b"nope")

    transport = FastHTTPTransport()
    transport._fallback = httpx.MockTransport(answer)  # type: ignore[assignment]
    headers = [(b"authorization", b"Bearer k")]
    async with serving(keep_alive_echo) as (url, server):
        for n in range(2):
            got = await transport.exchange(
                b"POST", httpx.URL(f"{url}/a%2Fb/{n}"), headers, b"{}", timeout_s=2.0
            )
            assert got == (200, b"echo:{}")
        https = await transport.exchange(
            b"PUT", httpx.URL("https://models.example:8443/x"), headers, b"[]", timeout_s=None
        )
    await transport.aclose()
    host = url.removeprefix("http://")
    assert server.heads == [
        f"POST /a%2Fb/{n} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer k\r\n"
        "content-length: 2\r\n\r\n".encode()
        for n in range(2)
    ]
    assert server.connections == 1  # kept alive
    assert https == (404, b"nope")
    (sent,) = to_httpx
    assert (sent.method, str(sent.url), sent.headers["authorization"], sent.content) == (
        "PUT",
        "https://models.example:8443/x",
        "Bearer k",
        b"[]",
    )


@pytest.mark.parametrize(
    ("reset", "error"), [(False, httpx.RemoteProtocolError), (True, httpx.ReadError)]
)
async def test_a_body_cut_short_is_the_error_httpx_would_raise(
    reset: bool, error: type[httpx.HTTPError]
) -> None:
    """Closed mid-body: ``RemoteProtocolError`` (the body incomplete); reset: ``ReadError``."""

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b")
        await writer.drain()
        await asyncio.sleep(0.05)
        if reset:  # an RST, not a FIN
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

    async with (
        serving(cut) as (url, _),
        client() as http,
        http.stream("POST", url, content=b"{}") as answer,
    ):
        assert answer.status_code == 200
        with pytest.raises(error, match="mid-response"):
            await answer.aread()


async def test_what_it_does_not_speak_goes_to_httpx_transport() -> None:
    """``https`` and a request whose body is a stream go to httpx's own transport inside (here
    a mock in its place); plain ``http`` with a whole body never does."""
    to_httpx: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        to_httpx.append(str(request.url))
        return httpx.Response(200, text="httpx")

    async def streamed() -> AsyncIterator[bytes]:
        yield b"streamed"

    transport = FastHTTPTransport()
    transport._fallback = httpx.MockTransport(answer)  # type: ignore[assignment]
    async with serving(keep_alive_echo) as (url, _), httpx.AsyncClient(transport=transport) as http:
        assert (await http.post("https://models.example/v1", content=b"{}")).text == "httpx"
        assert (await http.post(url + "/s", content=streamed())).text == "httpx"
        assert (await http.post(url + "/w", content=b"whole")).text == "echo:whole"
    assert to_httpx == ["https://models.example/v1", url + "/s"]


async def test_large_bodies_survive_flow_control() -> None:
    big = bytes(range(256)) * 20_000  # ~5 MB: reading pauses and resumes

    async def large(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    server: Server) -> None:  # fmt: skip
        await read_request(reader, server)
        writer.write(response(big))
        await writer.drain()
        await reader.read()

    received = b""
    async with serving(large) as (url, _), client() as http, http.stream("GET", url) as streamed:
        async for chunk in streamed.aiter_bytes():
            received += chunk
            await anyio.lowlevel.checkpoint()  # let more data arrive: reading pauses
    assert received == big


async def test_max_connections_bounds_requests_in_flight() -> None:
    in_flight = 0
    most = 0

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   server: Server) -> None:  # fmt: skip
        nonlocal in_flight, most
        while True:
            await read_request(reader, server)
            in_flight += 1
            most = max(most, in_flight)
            await asyncio.sleep(0.05)
            in_flight -= 1
            writer.write(response(b"ok"))
            await writer.drain()

    async with (
        serving(slow) as (url, server),
        client(max_connections=2) as http,
        anyio.create_task_group() as group,
    ):
        for _ in range(6):
            group.start_soon(functools.partial(http.post, url, content=b"x"))
    assert most == 2 and server.requests == 6


async def test_a_request_cancelled_while_waiting_for_a_slot_leaves_no_slot_taken() -> None:
    """With every slot taken, requests wait in order; one cancelled while waiting (or just
    as a slot reached it) takes no slot away from the others or later requests."""
    release, holding = asyncio.Event(), asyncio.Event()

    async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   server: Server) -> None:  # fmt: skip
        while True:
            body = await read_request(reader, server)
            if body == b"hold":
                holding.set()
                await release.wait()
            writer.write(response(b"echo:" + body))
            await writer.drain()

    async with serving(held) as (url, _server), client(max_connections=1) as http:
        first = asyncio.create_task(http.post(url, content=b"hold"))
        await holding.wait()
        waiting = asyncio.create_task(http.post(url, content=b"cancelled"))
        after = asyncio.create_task(http.post(url, content=b"after"))
        await asyncio.sleep(0.05)
        waiting.cancel()
        release.set()
        assert (await first).text == "echo:hold" and (await after).text == "echo:after"
        assert waiting.cancelled()
        # A wait cancelled after the slot was handed to it, before it woke, hands it on: the
        # slot is released in this task (the "hold" answer read here), and the waiter is
        # cancelled before this task gives the loop a turn.
        release.clear()
        holding.clear()
        handed = asyncio.create_task(http.post(url, content=b"handed"))
        last = asyncio.create_task(http.post(url, content=b"last"))
        asyncio.get_running_loop().call_later(0.05, release.set)
        assert (await http.post(url, content=b"hold")).text == "echo:hold"
        handed.cancel()
        assert (await last).text == "echo:last" and handed.cancelled()
        answers = await asyncio.gather(*(http.post(url, content=b"%d" % i) for i in range(3)))
        assert [answer.text for answer in answers] == ["echo:0", "echo:1", "echo:2"]
