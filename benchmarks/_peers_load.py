"""The load side of ``benchmarks/peers.py``: a fixed-reply backend, a minimal HTTP/1.1 client,
and the CPU time of a process tree.

* :func:`serve_backend`: answers ``POST .../chat/completions`` at once with a fixed completion,
  or, when the body asks for a stream, a fixed stream of :data:`STREAM_CHUNKS` content chunks,
  a usage chunk and ``[DONE]``; ``GET /v1/models`` lists :data:`MODEL`; any other path answers
  ``{}`` (the routers' health and info probes).
* :class:`Connection`: one keep-alive connection on raw asyncio streams that reads bodies with
  a Content-Length or chunked (the routers re-chunk a stream), reconnecting when the server
  closes; its own cost is small and the same for every proxy.
* :func:`tree_cpu_s`: user + system CPU seconds of a process and all its descendants, from
  ``/proc`` (LiteLLM and the launchers of the Rust routers run children).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import time
from pathlib import Path

from benchmarks import controller_overhead as overhead

#: The model the fixed-reply backend serves.
MODEL = "instant"
#: The bearer token every call carries: LiteLLM's master key (it refuses to start without
#: one); the other proxies accept any.
API_KEY = "sk-agentrt-peers-benchmark"
#: Content chunks in each streamed answer.
STREAM_CHUNKS = 64


#: In a streamed request's last message: the backend paces its answer (:data:`PACE_S`). In
#: the content because every proxy passes that on as it is (sglang-router, for one, drops
#: the OpenAI ``user`` field and renames ``max_tokens``).
PACED_MARK = "[paced-stream]"
#: Seconds between two events of a paced answer: each event a read of its own, as an engine
#: at decode pace sends them.
PACE_S = 0.001


def request_body(stream: bool, *, paced: bool = False) -> bytes:
    """The chat request every call sends (a streamed one asks for usage too; a ``paced`` one
    ends its last message with :data:`PACED_MARK`)."""
    body: dict[str, object] = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Say hello."},
        ],
        "max_tokens": STREAM_CHUNKS,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if paced:
        body["messages"] = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"Say hello. {PACED_MARK}"},
        ]
    return json.dumps(body).encode()


def _answer() -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-instant", "object": "chat.completion", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22},
        }
    ).encode()  # fmt: skip


def _stream() -> bytes:
    return b"".join(_stream_events())


def _stream_events() -> list[bytes]:
    def event(choices: list[object], usage: object = None) -> bytes:
        # As vLLM frames them: no ``usage`` key but in the last chunk.
        chunk: dict[str, object] = {
            "id": "chatcmpl-instant", "object": "chat.completion.chunk", "created": 0,
            "model": MODEL, "choices": choices,
        }  # fmt: skip
        if usage is not None:
            chunk["usage"] = usage
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    parts = [
        event([{"index": 0, "delta": {"content": "tok "}, "finish_reason": None}])
        for _ in range(STREAM_CHUNKS - 1)
    ]
    parts.append(event([{"index": 0, "delta": {"content": "end"}, "finish_reason": "stop"}]))
    usage = {"prompt_tokens": 20, "completion_tokens": STREAM_CHUNKS, "total_tokens": 84}
    parts.append(event([], usage))
    parts.append(b"data: [DONE]\n\n")
    return parts


def _response(body: bytes, content_type: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: " + content_type
        + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )  # fmt: skip


class _FixedBackend(asyncio.Protocol):
    completion = _response(_answer(), b"application/json")
    stream = _response(_stream(), b"text/event-stream")
    #: A paced answer: the same head and events, each event written :data:`PACE_S` after
    #: the one before (the last carries usage, then ``[DONE]``).
    paced_head = _response(_stream(), b"text/event-stream").split(b"\r\n\r\n", 1)[0] + (b"\r\n\r\n")
    paced_events = _stream_events()
    _PACED = re.compile(re.escape(PACED_MARK.encode()))
    models = _response(
        json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode(),
        b"application/json",
    )
    metrics = _response(
        b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n", b"text/plain"
    )
    other = _response(b"{}", b"application/json")

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1")
            if head.startswith("PRI * HTTP/2"):  # a client trying HTTP/2 first: refuse it
                self.transport.close()
                return
            if re.search(r"(?im)^transfer-encoding:\s*chunked", head):
                parsed = _dechunk(self.buffer, end + 4)
                if parsed is None:
                    return
                body, rest = parsed
            else:
                match = re.search(r"(?im)^content-length:\s*(\d+)", head)
                length = int(match.group(1)) if match else 0
                if len(self.buffer) < end + 4 + length:
                    return
                body, rest = self.buffer[end + 4 : end + 4 + length], end + 4 + length
            self.buffer = self.buffer[rest:]
            path = head.split(" ", 2)[1].split("?")[0]
            if path.endswith("/completions"):
                streamed = re.search(rb'"stream"\s*:\s*true', body) is not None
                if streamed and self._PACED.search(body):
                    self._pace()
                else:
                    self.transport.write(self.stream if streamed else self.completion)
            elif path == "/v1/models":
                self.transport.write(self.models)
            elif path == "/metrics":
                self.transport.write(self.metrics)
            else:
                self.transport.write(self.other)

    def _pace(self) -> None:
        self.transport.write(self.paced_head + self.paced_events[0])
        loop = asyncio.get_running_loop()
        for index, event in enumerate(self.paced_events[1:], start=1):
            loop.call_later(index * PACE_S, self._write, event)

    def _write(self, data: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(data)


def _dechunk(buffer: bytes, start: int) -> tuple[bytes, int] | None:
    """A chunked body starting at ``start``: (body, offset after it), None while incomplete."""
    parts, at = [], start
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        size = int(buffer[at:line_end].split(b";")[0], 16)
        if len(buffer) < line_end + 2 + size + 2:
            return None
        parts.append(buffer[line_end + 2 : line_end + 2 + size])
        at = line_end + 2 + size + 2
        if size == 0:
            return b"".join(parts), at


def serve_backend(port: int) -> None:
    """Run the fixed-reply backend on loopback ``port`` until interrupted."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_FixedBackend, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    # A process started from a shell's background job inherits SIGINT ignored, and Python then
    # leaves it so: the interrupt this backend stops on must always reach it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


class Connection:
    """One keep-alive HTTP/1.1 connection sending the same chat POST again and again."""

    def __init__(self, port: int, *, stream: bool, paced: bool = False) -> None:
        self.port = port
        self.request = self.encode(request_body(stream, paced=paced))
        self.writer: asyncio.StreamWriter | None = None

    def encode(self, body: bytes) -> bytes:
        """The chat POST carrying ``body``."""
        return (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{self.port}\r\n"
            f"content-type: application/json\r\nauthorization: Bearer {API_KEY}\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def _open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
            self.writer = None

    async def call(self, request: bytes | None = None) -> None:
        """Send the request (``request``: another one, from :meth:`encode`), read the whole
        answer; RuntimeError for any status but 200."""
        if self.writer is None:
            await self._open()
        assert self.writer is not None
        self.writer.write(self.request if request is None else request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lowered = head.lower()
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"port {self.port} answered {head[:80]!r}")
        # Anchored at a line start: LiteLLM adds ``llm_provider-content-length``.
        match = re.search(rb"(?m)^content-length:\s*(\d+)", lowered)
        if match is not None:
            await self.reader.readexactly(int(match.group(1)))
        elif re.search(rb"(?m)^transfer-encoding:\s*chunked", lowered):
            while True:
                size = int((await self.reader.readline()).split(b";")[0], 16)
                await self.reader.readexactly(size + 2)
                if size == 0:
                    break
        else:  # the body ends with the connection
            await self.reader.read()
            await self.close()
            return
        if re.search(rb"(?m)^connection:\s*close", lowered):
            await self.close()


async def latencies(port: int, calls: int, warmup: int = 20) -> list[float]:
    """Seconds per non-streamed call, sequential on one connection."""
    conn = Connection(port, stream=False)
    try:
        for _ in range(warmup):
            await conn.call()
        out = []
        for _ in range(calls):
            start = time.perf_counter()
            await conn.call()
            out.append(time.perf_counter() - start)
        return out
    finally:
        await conn.close()


async def rate(
    port: int, concurrency: int, seconds: float, *, stream: bool, paced: bool = False
) -> int:
    """Calls completed by ``concurrency`` connections sending back to back for ``seconds``
    (``paced``: streams whose events come :data:`PACE_S` apart)."""
    done = 0
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        conn = Connection(port, stream=stream, paced=paced)
        try:
            while time.perf_counter() < stop_at:
                await conn.call()
                done += 1
        finally:
            await conn.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


async def prompt_cpu_s(
    port: int, pid: int, words: int, seconds: float, warmup: int = 3, at_least: int = 5
) -> float:
    """The proxy's CPU seconds per call with a ``words``-word prompt (``controller_overhead``'s
    :func:`prompt_body`: an agent's history that every call repeats, model :data:`MODEL`):
    sequential calls on one connection for ``seconds``, at least ``at_least`` (``/proc``
    counts in 10 ms ticks: a run must hold many)."""
    conn = Connection(port, stream=False)
    try:
        for variant in range(warmup):
            await conn.call(conn.encode(overhead.prompt_body(words, variant)))
        before = tree_cpu_s(pid)
        stop_at = time.perf_counter() + seconds
        calls = 0
        while calls < at_least or time.perf_counter() < stop_at:
            await conn.call(conn.encode(overhead.prompt_body(words, warmup + calls)))
            calls += 1
        return (tree_cpu_s(pid) - before) / calls
    finally:
        await conn.close()


def _stat(pid: int) -> tuple[int, float]:
    """(parent pid, user + system + waited-for children's CPU seconds) of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])
    return int(fields[1]), ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and every live descendant (``/proc``)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stats[int(entry.name)] = _stat(int(entry.name))
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo += children.get(pid, [])
    return total
