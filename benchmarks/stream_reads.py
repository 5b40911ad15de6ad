"""The controller's work per streamed read when every token event is a read of its own — an
engine at decode pace, not the batched reads of ``controller_overhead.py``'s instant backend
(docs/benchmarks.md, "Controller overhead: the stream relay").

The backend (a process of its own) answers a streamed chat call with ``--events`` one-line token
events, ``--gap-ms`` apart, each its own HTTP chunk, then the usage chunk and ``[DONE]``; the
client (another process) streams calls on keep-alive connections. Two measures:

* ``--count-calls``: Python calls per streamed call and per read of an in-process controller
  (the fast path, ``serve_controller``), counted by cProfile over ``--calls`` and twice as many
  sequential calls, their difference — deterministic up to the share of background loops. The
  in-process controller runs on asyncio's own loop, whose Python (~12 calls per read) uvloop
  does in C.
* ``--relay``: the relay's own Python per read, without the loop or a system call: an
  in-process controller on uvloop (the fast path) whose stream's backend connection is handed
  ``--reads`` reads of one token event (an HTTP chunk each, as vLLM writes them) by hand
  (``data_received``), the client's socket swapped for one that drops writes once the stream
  started — each read relayed (scanned, counted by the scheduler, framed and written) as in
  a live stream. Its time per read (the least and the median of 15 batches) and its Python
  calls per read (cProfile over one batch: deterministic), for both shapes of token event:
  vLLM's (no ``usage`` key) and OpenAI's (``"usage":null``).
* default: the CPU of the CLI's controller (``agentrt controller serve``, uvloop, started as
  ``controller_overhead.py`` starts it) per chunk over ``--seconds`` of ``--concurrency``
  connections streaming back to back (``/proc``).

    .venv/bin/python benchmarks/stream_reads.py --count-calls
    .venv/bin/python benchmarks/stream_reads.py --relay
    .venv/bin/python benchmarks/stream_reads.py --seconds 3
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import controller_overhead as overhead  # noqa: E402

_EVENT = (
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"content":"tok "},"finish_reason":null}],"usage":null}\n\n'
)
_END = (
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[],'
    b'"usage":{"prompt_tokens":5,"completion_tokens":%d}}\n\ndata: [DONE]\n\n'
)
#: A token event as vLLM frames it (no ``usage`` key but in the last chunk) — ``--relay``.
_VLLM_EVENT = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}\n\n'
)
_BODY = json.dumps(
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
).encode()


async def _answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, events: int, gap_s: float
) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            match = re.search(rb"(?i)content-length:\s*(\d+)", head)
            body = await reader.readexactly(int(match.group(1)) if match else 0)
            if not re.search(rb'"stream":\s*true', body):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                continue
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            for _ in range(events):
                writer.write(b"%x\r\n%b\r\n" % (len(_EVENT), _EVENT))
                await asyncio.sleep(gap_s)
            end = _END % events
            writer.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(end), end))
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def _serve_backend(events: int, gap_s: float) -> None:
    server = await asyncio.start_server(
        lambda r, w: _answer(r, w, events, gap_s), "127.0.0.1", 0, backlog=1024
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


async def _client(port: int, calls: int) -> None:
    """``calls`` sequential streamed calls on one keep-alive connection, each read whole."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(_BODY)
    ) + _BODY
    for _ in range(calls):
        writer.write(request)
        await reader.readuntil(b"\r\n\r\n")
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    writer.close()


def _backend(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], int]:
    backend = subprocess.Popen(
        [sys.executable, __file__, "--serve-backend", "--events", str(args.events),
         "--gap-ms", str(args.gap_ms)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert backend.stdout is not None
    return backend, int(backend.stdout.readline())


async def count_calls(args: argparse.Namespace) -> dict[str, float]:
    from agentrt_controller.backends.spec import BackendSpec
    from agentrt_controller.service import ControllerConfig, serve_controller

    backend, port = _backend(args)
    config = ControllerConfig(
        port=0, backends=(BackendSpec(f"http://127.0.0.1:{port}"),), scrape_interval_s=60
    )
    try:
        async with serve_controller(config) as url:
            controller_port = int(url.rsplit(":", 1)[1])

            async def run(calls: int) -> None:
                client = await asyncio.create_subprocess_exec(
                    sys.executable, __file__, "--client", str(controller_port), str(calls)
                )
                await client.wait()

            await run(5)  # warm-up
            totals = []
            for calls in (args.calls, 2 * args.calls):
                profile = cProfile.Profile()
                profile.enable()
                await run(calls)
                profile.disable()
                totals.append(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]
    finally:
        backend.kill()
    per_call = (totals[1] - totals[0]) / args.calls
    return {"python_calls_per_streamed_call": per_call,
            "python_calls_per_read": per_call / (args.events + 1)}  # fmt: skip


async def cpu(args: argparse.Namespace) -> dict[str, float]:
    backend, port = _backend(args)
    controller_port = overhead.free_port()
    command = overhead.controller_command(controller_port, port)
    try:
        with overhead._process(command) as controller:
            await overhead._wait_ready(controller_port, b"/health")
            body = overhead.STREAM_BODY
            await overhead.throughput(controller_port, args.concurrency, 1.0, body)
            before = overhead.cpu_s(controller.pid)
            rate = await overhead.throughput(controller_port, args.concurrency, args.seconds, body)
            used_s = overhead.cpu_s(controller.pid) - before
    finally:
        backend.kill()
    chunks = rate * args.seconds * args.events
    return {"streamed_calls_per_s": rate, "controller_cpu_us_per_chunk": used_s / chunks * 1e6}


class _DroppedWrites:
    """The client's transport once ``--relay`` has started its stream: takes every write,
    sends nothing, never pauses."""

    def write(self, data: bytes) -> None:
        return None

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        return None


async def _held_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """``--relay``'s backend: answers a streamed call with its head (chunked) and one token
    event, then holds the stream open; anything else with ``{}``."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            match = re.search(rb"(?i)content-length:\s*(\d+)", head)
            body = await reader.readexactly(int(match.group(1)) if match else 0)
            if re.search(rb'"stream":\s*true', body):
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n%x\r\n%b\r\n" % (len(_EVENT), _EVENT)
                )
                await asyncio.Event().wait()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def relay_time(args: argparse.Namespace) -> dict[str, Any]:
    """``--relay``: the relay's time and Python calls per read (the module's docstring). The
    stream's connection and the client's exchange are found by wrapping the two seams the
    proxy calls once per stream (``FastResponse.relay``, ``DirectExchange.start_stream``),
    put back when this returns."""
    from agentrt import fasthttp
    from agentrt_serving.direct import DirectExchange

    relayed: list[Any] = []  # the stream's backend connection, once the proxy relays it
    exchanges: list[DirectExchange] = []
    relay, start_stream = fasthttp.FastResponse.relay, DirectExchange.start_stream

    def capture_relay(self: fasthttp.FastResponse, take: Any) -> None:
        relayed.append(self._conn)
        relay(self, take)

    async def capture_exchange(self: DirectExchange, *a: Any) -> None:
        exchanges.append(self)
        await start_stream(self, *a)

    fasthttp.FastResponse.relay = capture_relay  # type: ignore[method-assign]
    DirectExchange.start_stream = capture_exchange  # type: ignore[method-assign]
    try:
        return await _time_relayed_reads(args, relayed, exchanges)
    finally:
        fasthttp.FastResponse.relay = relay  # type: ignore[method-assign]
        DirectExchange.start_stream = start_stream  # type: ignore[method-assign]


async def _time_relayed_reads(
    args: argparse.Namespace, relayed: list[Any], exchanges: list[Any]
) -> dict[str, Any]:
    from agentrt_controller.backends.spec import BackendSpec
    from agentrt_controller.service import ControllerConfig, serve_controller

    backend = await asyncio.start_server(_held_stream, "127.0.0.1", 0)
    port = backend.sockets[0].getsockname()[1]
    config = ControllerConfig(
        port=0, backends=(BackendSpec(f"http://127.0.0.1:{port}"),), scrape_interval_s=60
    )
    result: dict[str, Any] = {"reads": args.reads}
    async with backend, serve_controller(config) as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        try:
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
                b"\r\ncontent-length: %d\r\n\r\n" % len(_BODY) + _BODY
            )
            await reader.readuntil(b"\r\n\r\n")
            # The first event: the proxy wrote it and, in the same step, set the relay on and
            # waits for the next read.
            await reader.readuntil(b"\n\n")
            if not relayed or not exchanges:
                raise RuntimeError("the stream is not relayed (not the fast path?)")
            conn, exchange = relayed[-1], exchanges[-1]
            exchange.transport = _DroppedWrites()  # type: ignore[assignment]
            feed = conn.data_received
            for name, event in (("vllm", _VLLM_EVENT), ("openai", _EVENT)):
                read = b"%x\r\n%b\r\n" % (len(event), event)
                for _ in range(args.reads):  # warm-up
                    feed(read)
                times = []
                for _ in range(15):
                    started = time.perf_counter()
                    for _ in range(args.reads):
                        feed(read)
                    times.append((time.perf_counter() - started) / args.reads * 1e6)
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(args.reads):
                    feed(read)
                profile.disable()
                calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
                result[f"{name}_us_per_read_least"] = min(times)
                result[f"{name}_us_per_read_median"] = statistics.median(times)
                result[f"{name}_python_calls_per_read"] = (calls - 1) / args.reads  # not disable
            # Every read was relayed: the body's reader still waits, nothing was queued for it (a
            # read the relay declined would wake it, and every read after it would queue).
            if conn._relay is None or conn._chunks or conn._waiter.done():
                raise RuntimeError("a read was not relayed: the figures are not the relay's")
        finally:  # the client leaves: the call is aborted, the server stops at once
            writer.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--count-calls",
        action="store_true",
        help="Python calls per read of an in-process controller (cProfile)",
    )
    parser.add_argument(
        "--relay",
        action="store_true",
        help="the relay's Python per read, reads handed to the connection by hand",
    )
    parser.add_argument("--reads", type=int, default=2000, help="--relay: reads per batch")
    parser.add_argument("--events", type=int, default=64, help="token events per answer")
    parser.add_argument(
        "--gap-ms", type=float, default=1.0, help="between two events (each a read of its own)"
    )
    parser.add_argument(
        "--calls", type=int, default=20, help="--count-calls: sequential calls of the smaller run"
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="CPU run's length")
    parser.add_argument("--concurrency", type=int, default=16, help="CPU run's connections")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--serve-backend", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if (
        args.events < 1
        or args.calls < 1
        or args.seconds <= 0
        or args.concurrency < 1
        or args.reads < 1
    ):
        parser.error("--events, --calls, --concurrency, --reads must be ≥ 1 and --seconds > 0")
    if args.serve_backend:
        asyncio.run(_serve_backend(args.events, args.gap_ms / 1000))
        return
    if args.client:
        asyncio.run(_client(*args.client))
        return
    started = time.monotonic()
    if args.relay:
        import uvloop  # the CLI's loop: its Python per read is the relay's alone

        result = uvloop.run(relay_time(args))
    else:
        result = asyncio.run(count_calls(args) if args.count_calls else cpu(args))
    if args.json:
        print(json.dumps(result))
        return
    for name, value in result.items():
        print(f"{name}: {value:.2f}")
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
