"""The stream relay over real HTTP: on the fast path, a read from the backend made only of plain
token events goes from the backend connection's callback straight to the client
(``FastResponse.relay``, ``SseScanner.feed_plain``, ``DirectExchange.send_chunk_now``); all else
— mixed reads, usage, the end, errors, a paused client — goes through the call's task as
before. The client gets the same bytes as on the ASGI path (which never relays), the call is
charged the same, and a client leaving, a deadline, the silence limit and back-pressure work
during the relay."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest

from agentrt_controller.service.http.sse import SseScanner
from agentrt_serving.direct import DirectExchange

from .conftest import chat_body, controller

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

CHAT = "/v1/chat/completions"


def event(text: str, *, usage: object = None, spaced: bool = True) -> bytes:
    """One chat chunk as an SSE event (OpenAI's framing: ``usage`` null but in the last)."""
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
        "usage": usage,
    }
    separators = (", ", ": ") if spaced else (",", ":")
    return b"data: " + json.dumps(chunk, separators=separators).encode() + b"\n\n"


USAGE = (
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[],'
    b'"usage":{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}}\n\n'
)
DONE = b"data: [DONE]\n\n"

#: A script step: seconds to wait, then bytes to write as one HTTP chunk (``None``: stay silent
#: until the connection closes).
Step = tuple[float, bytes | None]


@dataclass
class Backend:
    """A raw streaming backend: answers each streamed chat call with ``script``."""

    script: list[Step]
    #: The controller closed a connection (after a stream's end, an abort).
    closed: anyio.Event = field(default_factory=anyio.Event)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                match = re.search(rb"(?i)content-length:\s*(\d+)", head)
                body = await reader.readexactly(int(match.group(1)) if match else 0)
                if head.startswith(b"POST") and re.search(rb'"stream":\s*true', body):
                    await self._stream(reader, writer)
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed.set()
            writer.close()

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        for delay_s, data in self.script:
            if delay_s:
                await asyncio.sleep(delay_s)
            if data is None:
                await reader.read()  # silent until the controller gives up
                raise ConnectionError("the controller gave up")
            writer.write(b"%x\r\n%b\r\n" % (len(data), data))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()


@contextlib.asynccontextmanager
async def serving(backend: Backend) -> AsyncIterator[str]:
    server = await asyncio.start_server(backend.serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


@dataclass
class Relayed:
    """What the relay did: reads it sent on, reads it left to the call's task, parts the
    client could not take without waiting."""

    sent: int = 0
    left: int = 0
    paused: int = 0
    #: The most bytes that waited in the client's transport after a relayed write.
    most_buffered: int = 0


@pytest.fixture
def relayed(monkeypatch: pytest.MonkeyPatch) -> Relayed:
    seen = Relayed()
    feed_plain = SseScanner.feed_plain

    def counted_feed(self: SseScanner, data: bytes, send: Callable[[bytes], bool]) -> int:
        # The relay's sends only (the call's task sends through send_chunk_now too).
        exchange = getattr(send, "__self__", None)
        assert isinstance(exchange, DirectExchange)  # the relay sends with send_chunk_now

        def counted_send(data: bytes) -> bool:
            if exchange.flow.write_paused:
                seen.paused += 1
            sent = send(data)
            buffered = exchange.transport.get_write_buffer_size()
            seen.most_buffered = max(seen.most_buffered, buffered)
            return sent

        tokens = feed_plain(self, data, counted_send)
        if tokens:
            seen.sent += 1
        else:
            seen.left += 1
        return tokens

    monkeypatch.setattr(SseScanner, "feed_plain", counted_feed)
    return seen


def request(body: dict[str, Any], headers: bytes = b"") -> bytes:
    data = json.dumps(body).encode()
    return (
        b"POST " + CHAT.encode() + b" HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"connection: close\r\n" + headers + b"content-length: %d\r\n\r\n" % len(data) + data
    )


def dechunk(raw: bytes) -> tuple[bytes, bytes]:
    """The head and the body of one chunked answer."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    body = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        body, rest = body + rest[:size], rest[size + 2 :]
    return head, body


async def call(url: str, data: bytes, *, wait_s: float = 0.0, rcvbuf: int = 0) -> bytes:
    """Send ``data`` on a new connection (``rcvbuf``: a small receive buffer), wait
    ``wait_s`` before reading, then read until the server closes."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 16)
    try:
        writer.write(data)
        await writer.drain()
        await asyncio.sleep(wait_s)
        return await reader.read(-1)
    finally:
        writer.close()


async def metric(url: str, name: str) -> float:
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(url + "/metrics")).text
    match = re.search(rf"(?m)^{name}(?:\{{[^}}]*\}})? (\S+)$", text)
    return float(match.group(1)) if match else 0.0


async def both_paths(
    script: list[Step], body: dict[str, Any], **options: Any
) -> dict[str, tuple[bytes, float]]:
    """The client's body and the output tokens charged, on the fast path and the ASGI one."""
    out = {}
    for path in ("direct", "asgi"):
        async with serving(Backend(script)) as url, controller([url], http_path=path,
                                                                **options) as (ctl, _):  # fmt: skip
            head, streamed = dechunk(await call(ctl, request(body)))
            assert head.startswith(b"HTTP/1.1 200"), head
            out[path] = (streamed, await metric(ctl, "agentrt_controller_output_tokens_total"))
    return out


SPACED = 0.03  # seconds between writes: each one a read of its own


async def test_plain_reads_are_relayed_and_the_client_gets_what_the_asgi_path_gives(
    relayed: Relayed,
) -> None:
    tokens = [event(f"t{i} ", spaced=i % 2 == 0) for i in range(12)]
    script: list[Step] = [(SPACED, e) for e in tokens[:8]]
    script += [(SPACED, tokens[8] + tokens[9]), (SPACED, USAGE % (12, 19)), (SPACED, DONE)]
    body = chat_body(True, stream_options={"include_usage": True})
    got = await both_paths(script, body)
    expected = b"".join(tokens[:10]) + USAGE % (12, 19) + DONE
    assert got["direct"] == got["asgi"] == (expected, 12.0)  # usage charged from the end
    # The first read goes with the answer's head; the eight plain reads after it are relayed
    # (a slow turn of the loop may join two into one).
    assert relayed.sent >= 4


@pytest.mark.parametrize("first", [b"", b": ok\n\n"], ids=["token-first", "comment-first"])
async def test_relayed_reads_feed_the_quanta_and_the_first_token_time_once(
    relayed: Relayed, first: bytes
) -> None:
    # 40 plain events, each a read of its own, after a first read that is a token or a
    # comment (no token: the relay then starts before the first token): MLFQ's 16-token
    # quantum used up once, the first token's time observed once, either way.
    tokens = [event(f"q{i} ") for i in range(40)]
    script: list[Step] = ([(0.0, first)] if first else []) + [(0.01, e) for e in tokens]
    async with (
        serving(Backend([*script, (0.01, DONE)])) as url,
        controller([url], policy="mlfq") as (ctl, _),
    ):
        head, streamed = dechunk(await call(ctl, request(chat_body(True))))
        async with httpx.AsyncClient(timeout=10) as http:
            queues = (await http.get(ctl + "/agentrt/v1/queues")).json()
        ttft = await metric(ctl, "agentrt_controller_time_to_first_token_seconds_count")
    assert head.startswith(b"HTTP/1.1 200")
    assert streamed == first + b"".join(tokens) + DONE
    assert relayed.sent >= 10
    assert queues["demotions_total"] == 1
    assert ttft == 1.0


async def test_a_mixed_read_falls_back_to_the_task_and_the_relay_goes_on_after_it(
    relayed: Relayed,
) -> None:
    plain = [event(f"p{i} ") for i in range(10)]
    comment = b": keep-alive\n\n"
    script: list[Step] = [(SPACED, e) for e in plain[:3]]
    script += [
        (SPACED, plain[3] + comment),  # a comment: not a token event, the task decides
        (SPACED, plain[4][:20]),  # half an event: it waits in the scanner
        (SPACED, plain[4][20:] + plain[5]),  # ... and its rest is the task's too
        (SPACED, event("u", usage={"prompt_tokens": 1, "completion_tokens": 9})),  # numbers
        *[(SPACED, e) for e in plain[6:8]],  # plain again: relayed
        (SPACED, plain[8].replace(b"\n\n", b"\r\n\r\n")),  # CR framing: the task's from now
        (SPACED, plain[9]),
        (SPACED, USAGE % (11, 12)),
        (SPACED, DONE),
    ]
    body = chat_body(True)  # the controller asks for usage: the usage-only chunk is dropped
    got = await both_paths(script, body)
    expected = b"".join(data for _, data in script[:-2] if data is not None) + DONE
    assert got["direct"] == got["asgi"] == (expected, 11.0)
    assert relayed.sent >= 2  # of plain[1], plain[2], plain[6], plain[7] (two may come as one)
    assert relayed.left >= 3  # the comment, the halves, the usage event, CR framing ...


async def test_a_client_leaving_mid_relay_aborts_the_backend_call(relayed: Relayed) -> None:
    backend = Backend([(0.01, event(f"e{i} ")) for i in range(3000)])
    async with (
        serving(backend) as url,
        controller([url]) as (ctl, app),
        httpx.AsyncClient(timeout=10) as http,
        http.stream("POST", ctl + CHAT, json=chat_body(True)) as answer,
    ):
        seen = 0
        async for line in answer.aiter_lines():
            seen += line.startswith("data: ")
            if seen >= 10:
                break
        await answer.aclose()
        with anyio.fail_after(5):
            await backend.closed.wait()
        for _ in range(250):
            if all(s.in_flight == 0 for s in app.core.pool.states.values()):
                break
            await anyio.sleep(0.02)
        assert all(s.in_flight == 0 for s in app.core.pool.states.values())
        assert await metric(ctl, "agentrt_controller_client_disconnects_total") == 1.0
        assert relayed.sent >= 3
        assert (await http.post(ctl + CHAT, json=chat_body())).status_code == 200


async def test_a_slow_reader_holds_the_relay_back_and_gets_every_byte(relayed: Relayed) -> None:
    # ~8 MB of plain events, written fast; the client reads nothing for a second through a
    # small receive buffer, so the controller's writes to it pause: the relay leaves those
    # reads to the task, which waits for the client, and the backend's reading stops.
    pad = "x" * 1000
    events = [event(f"{i} {pad}") for i in range(8000)]
    script: list[Step] = [(0.002, b"".join(events[i : i + 40])) for i in range(0, 8000, 40)]
    script.append((0.0, DONE))
    backend = Backend(script)
    async with serving(backend) as url, controller([url]) as (ctl, _):
        raw = await call(ctl, request(chat_body(True)), wait_s=1.0, rcvbuf=4096)
        tokens = await metric(ctl, "agentrt_controller_output_tokens_total")
    head, streamed = dechunk(raw)
    assert head.startswith(b"HTTP/1.1 200")
    assert streamed == b"".join(events) + DONE
    assert tokens == 8000.0  # no usage from the backend: the streamed events are counted
    assert relayed.sent >= 1
    assert relayed.paused >= 1  # the client's buffer was full: left to the task
    assert relayed.most_buffered < 1 << 20  # ... not piled up in the controller


async def _relayed_until_error(
    relayed: Relayed, script: list[Step], headers: bytes = b"", **options: Any
) -> tuple[bytes, float, Backend]:
    backend = Backend(script)
    async with serving(backend) as url, controller([url], **options) as (ctl, _):
        started = time.monotonic()
        head, streamed = dechunk(await call(ctl, request(chat_body(True), headers)))
        elapsed_s = time.monotonic() - started
        with anyio.fail_after(5):
            await backend.closed.wait()
    assert head.startswith(b"HTTP/1.1 200")
    assert relayed.sent >= 3
    return streamed, elapsed_s, backend


async def test_the_deadline_ends_a_relayed_stream(relayed: Relayed) -> None:
    # Reads 20 ms apart under a deadline of 2 s: long enough for a few reads after a stall of
    # the test process (the deadline's timer, overdue, fires as the process resumes).
    script: list[Step] = [(0.02, event(f"d{i} ")) for i in range(1000)]
    streamed, elapsed_s, _ = await _relayed_until_error(
        relayed, script, b"x-agentrt-timeout-ms: 2000\r\n"
    )
    events = streamed.split(b"\n\n")[:-1]
    error = json.loads(events[-1].removeprefix(b"data: "))["error"]
    assert "deadline" in error["message"]
    assert all(e.startswith(b'data: {"id"') for e in events[:-1]) and len(events) > 5
    assert 2.0 <= elapsed_s < 5  # not before the deadline (a stall only lengthens it)


async def test_the_silence_limit_restarts_at_each_relayed_read_and_ends_a_silent_stream(
    relayed: Relayed,
) -> None:
    # Reads 0.1 s apart for 2 s: longer than the 1.5 s silence limit in all, never silent
    # that long at once (a stall of the test process, which silences the backend too, would
    # have to last 1.4 s) — then silence.
    tokens = [event(f"s{i} ") for i in range(20)]
    script: list[Step] = [(0.1, e) for e in tokens] + [(0.0, None)]
    streamed, _, _ = await _relayed_until_error(relayed, script, backend_stall_s=1.5)
    body_events, error_event = streamed.rsplit(b"data: ", 1)
    assert body_events == b"".join(tokens)
    error = json.loads(error_event)["error"]
    assert error["type"] == "upstream_error" and "timed out reading" in error["message"]
