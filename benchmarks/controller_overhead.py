"""Controller overhead: added latency per non-streaming call and maximum calls per second.

Setup (all on loopback, each in its own process so they do not share one event loop):

* an *instant backend*: a minimal asyncio HTTP/1.1 server that answers every
  ``POST /v1/chat/completions`` at once with a fixed chat completion (with usage);
* the controller, started with the real command ``agentrt controller serve`` in front of it
  (each policy of ``--policies`` in turn, default fcfs and atlas; admission window 32);
* the load generator (this process): a minimal keep-alive HTTP/1.1 client on raw asyncio
  streams, so that the client's own cost is small and identical for both paths.

Measured in the same run, interleaved per repetition, *direct* (client → backend) against
*via controller* (client → controller → backend):

* latency: sequential calls on one connection; p50 / p99 per repetition; the added latency
  is ``via - direct`` of each repetition's percentile; reported: the median over repetitions;
* throughput: ``--concurrency`` connections sending back to back for ``--seconds``; calls/s;
  reported: the median over repetitions;
* the controller's CPU (``/proc``) per call in that throughput run; per streamed chunk in a
  run of streamed calls (``--stream-seconds``; the backend writes each of its
  :data:`STREAM_CHUNKS` SSE chunks on its own, one per event-loop turn, as an engine writes
  one per decode step; the figure includes the call's own share, a 64th of it); and per call
  with prompts of ``--prompt-words`` words (sequential calls, ``max_tokens`` 1; a history of
  1,000-word turns that each call repeats, then a short message of its own).

Goal: ≤ 1 ms added at p50 and ≥ 1,000 calls/s.

``--count-calls`` measures something else, which hardly depends on the machine's load: the
Python function calls one request makes, by layer (the controller under ``python -m
cProfile``, twice; :mod:`benchmarks._call_counts`).

Run::

    .venv/bin/python benchmarks/controller_overhead.py               # a table and JSON
    .venv/bin/python benchmarks/controller_overhead.py --write-docs  # + docs/benchmarks.md
    .venv/bin/python benchmarks/controller_overhead.py --reps 3 --calls 300 --seconds 2 \
        --policies fcfs --prompt-words ''                              # short, no prompt sizes
    .venv/bin/python benchmarks/controller_overhead.py --count-calls --policies plas
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import _call_counts, _report  # noqa: E402
from benchmarks._processes import cpu_s, free_port  # noqa: E402

BODY = json.dumps(
    {
        "model": "instant",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Say hello."},
        ],
        "max_tokens": 8,
    }
).encode()
ANSWER = json.dumps(
    {
        "id": "chatcmpl-instant",
        "object": "chat.completion",
        "created": 0,
        "model": "instant",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hello!"},
             "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22,
                  "prompt_tokens_details": {"cached_tokens": 16}},
    }
).encode()  # fmt: skip
MODELS = json.dumps({"object": "list", "data": [{"id": "instant", "object": "model"}]}).encode()
#: Content chunks in each streamed answer (a usage chunk and ``[DONE]`` follow them).
STREAM_CHUNKS = 64
STREAM_BODY = json.dumps(
    {**json.loads(BODY), "max_tokens": STREAM_CHUNKS, "stream": True,
     "stream_options": {"include_usage": True}}
).encode()  # fmt: skip


def _sse(choices: list[object], usage: object = None) -> bytes:
    chunk: dict[str, object] = {"id": "chatcmpl-instant", "object": "chat.completion.chunk",
                                "created": 0, "model": "instant", "choices": choices,
                                "usage": usage}  # fmt: skip
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


#: The streamed answer as OpenAI frames it (``usage`` null but in the last chunk), one SSE
#: event per HTTP chunk.
STREAM_EVENTS = [
    *(_sse([{"index": 0, "delta": {"content": "tok "}, "finish_reason": None}])
      for _ in range(STREAM_CHUNKS)),
    _sse([], {"prompt_tokens": 20, "completion_tokens": STREAM_CHUNKS,
              "total_tokens": 20 + STREAM_CHUNKS}),
    b"data: [DONE]\n\n",
]  # fmt: skip


_STREAMED = re.compile(rb'"stream":\s*true')
#: Words per turn of the history in :func:`prompt_body`.
TURN_WORDS = 1000


def prompt_body(words: int, variant: int) -> bytes:
    """A chat call whose prompt holds ``words`` words (≈ as many tokens) as an agent's does: a
    history of turns of up to :data:`TURN_WORDS` words, then a short new message naming
    ``variant`` — consecutive calls repeat the history and differ in the last message, as an
    agent's next prompt repeats its last one; one output token."""
    turns = []
    for index, start in enumerate(range(0, words, TURN_WORDS)):
        size = min(TURN_WORDS, words - start)
        role = "user" if index % 2 == 0 else "assistant"
        turns.append({"role": role, "content": f"turn {index} " + "word " * (size - 2)})
    turns.append({"role": "user", "content": f"next step {variant}"})
    return json.dumps({"model": "instant", "messages": turns, "max_tokens": 1}).encode()


# --- the instant backend --------------------------------------------------------------------


def _http_response(body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: " + content_type
        + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )  # fmt: skip


class _InstantBackend(asyncio.Protocol):
    """Answers each complete HTTP/1.1 request at once (keep-alive, Content-Length bodies)."""

    completion = _http_response(ANSWER)
    models = _http_response(MODELS)
    metrics = _http_response(
        b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n", b"text/plain"
    )

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
            match = re.search(r"(?im)^content-length:\s*(\d+)", head)
            length = int(match.group(1)) if match else 0
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            path = head.split(" ", 2)[1]
            if path.endswith("/completions") and _STREAMED.search(body):
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                self._write_events(0)
            elif path.endswith("/completions"):
                self.transport.write(self.completion)
            elif path == "/v1/models":
                self.transport.write(self.models)
            else:  # /health, /metrics
                self.transport.write(self.metrics)

    def _write_events(self, index: int) -> None:
        """Write event ``index`` as one HTTP chunk, the next one on the loop's next turn."""
        if self.transport.is_closing():
            return
        if index == len(STREAM_EVENTS):
            self.transport.write(b"0\r\n\r\n")
            return
        event = STREAM_EVENTS[index]
        self.transport.write(b"%x\r\n%s\r\n" % (len(event), event))
        asyncio.get_running_loop().call_soon(self._write_events, index + 1)


def serve_backend(port: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_InstantBackend, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


# --- the load generator ---------------------------------------------------------------------


class _Connection:
    """One keep-alive HTTP/1.1 connection sending a POST again and again (``body``, or the
    bodies :meth:`call` is given); reads answers with a Content-Length or chunked."""

    def __init__(self, port: int, body: bytes = BODY) -> None:
        self.port = port
        self.request = self._request(body)

    def _request(self, body: bytes) -> bytes:
        return (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{self.port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def __aenter__(self) -> _Connection:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()

    async def call(self, body: bytes | None = None) -> None:
        self.writer.write(self.request if body is None else self._request(body))
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"unexpected answer: {head[:60]!r}")
        match = re.search(rb"(?i)content-length:\s*(\d+)", head)
        if match is not None:
            await self.reader.readexactly(int(match.group(1)))
        elif re.search(rb"(?i)transfer-encoding:\s*chunked", head):
            while True:
                size = int((await self.reader.readline()).split(b";")[0], 16)
                await self.reader.readexactly(size + 2)
                if size == 0:
                    break
        else:
            raise RuntimeError("answer without content-length or chunked encoding")


async def latencies(port: int, calls: int, warmup: int = 50) -> list[float]:
    """Seconds per call, sequential on one connection."""
    async with _Connection(port) as conn:
        for _ in range(warmup):
            await conn.call()
        out = []
        for _ in range(calls):
            start = time.perf_counter()
            await conn.call()
            out.append(time.perf_counter() - start)
    return out


async def throughput(port: int, concurrency: int, seconds: float, body: bytes = BODY) -> float:
    """Calls per second with ``concurrency`` connections sending ``body`` back to back."""
    done = 0
    stop_at = 0.0

    async def worker() -> None:
        nonlocal done
        async with _Connection(port, body) as conn:
            await conn.call()  # warm-up
            while time.perf_counter() < stop_at:
                await conn.call()
                done += 1

    stop_at = time.perf_counter() + seconds
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / (time.perf_counter() - start)


# --- orchestration --------------------------------------------------------------------------


@contextlib.contextmanager
def _process(args: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


async def _wait_ready(port: int, path: bytes, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET " + path + b" HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            status = await reader.readline()
            writer.close()
            if b" 200 " in status:
                return
        except OSError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"port {port} did not become ready")


def controller_command(
    port: int,
    backend_port: int,
    policy: str = "plas",
    window: str = "32",
    runner: tuple[str, ...] = (sys.executable, "-m", "agentrt.cli"),
    extra: tuple[str, ...] = (),
) -> list[str]:
    """``agentrt controller serve`` on ``port`` in front of the instant backend on
    ``backend_port``, as this benchmark runs it (``runner``: what runs the CLI; ``extra``:
    more of its flags, e.g. ``("--retention", "off")``)."""
    return [
        *runner, "controller", "serve", "--port", str(port),
        "--backend", f"http://127.0.0.1:{backend_port}", "--policy", policy,
        "--admission-window", window, "--log-level", "warning", *extra,
    ]  # fmt: skip


@contextlib.asynccontextmanager
async def stack(
    policy: str, window: str, extra: tuple[str, ...] = ()
) -> AsyncIterator[tuple[int, int, int]]:
    backend_port, controller_port = free_port(), free_port()
    python = sys.executable
    with _process([python, __file__, "--serve-backend", str(backend_port)]):
        await _wait_ready(backend_port, b"/health")
        command = controller_command(controller_port, backend_port, policy, window, extra=extra)
        with _process(command) as controller:
            try:
                await _wait_ready(controller_port, b"/health")
            except RuntimeError:
                err = controller.stderr.read().decode() if controller.stderr else ""
                raise RuntimeError(f"controller did not start:\n{err}") from None
            yield backend_port, controller_port, controller.pid


#: Requests of the two runs of ``--count-calls`` (``--count-connections`` connections each).
COUNT_RUNS = (1600, 4000)
COUNT_CONNECTIONS = 16


#: What a profiled run sends: ``load(port, units)`` sends ``units`` of its work (calls,
#: tool waits) to the controller on ``port`` and returns when they are answered.
Load = Callable[[int, int], Awaitable[None]]


async def _profiled_run(
    policy: str, window: str, units: int, out: str, load: Load, extra: tuple[str, ...] = ()
) -> None:
    """``load(port, units)`` against a controller (with ``extra`` flags) running under
    cProfile, which writes ``out`` when the controller exits (SIGINT: it drains and exits)."""
    backend_port, controller_port = free_port(), free_port()
    python = sys.executable
    with _process([python, __file__, "--serve-backend", str(backend_port)]):
        await _wait_ready(backend_port, b"/health")
        profiled = (python, "-m", "cProfile", "-o", out, "-m", "agentrt.cli")
        command = controller_command(controller_port, backend_port, policy, window, profiled, extra)
        with _process(command):
            await _wait_ready(controller_port, b"/health")
            await load(controller_port, units)


async def calls_per_unit(
    policy: str,
    window: str,
    load: Load,
    runs: tuple[int, int] = COUNT_RUNS,
    per_unit: int = 1,
    extra: tuple[str, ...] = (),
) -> dict[str, float]:
    """Python calls by layer (:mod:`benchmarks._call_counts`) per request of ``load``: the
    controller profiled through two runs of ``runs`` units, their difference over the
    requests between them (``per_unit`` requests a unit)."""
    with tempfile.TemporaryDirectory() as folder:
        outs = [str(Path(folder) / f"{n}.prof") for n in runs]
        for units, out in zip(runs, outs, strict=True):
            await _profiled_run(policy, window, units, out, load, extra)
        counts = [_call_counts.calls_by_layer(out) for out in outs]
    small, large = runs
    return _call_counts.per_request(counts[0], counts[1], small * per_unit, large * per_unit)


async def _calls_over(port: int, requests: int, connections: int) -> None:
    """``requests`` calls over ``connections`` connections, each sending its next call when
    its last one is answered."""

    async def worker(calls: int) -> None:
        async with _Connection(port) as conn:
            for _ in range(calls):
                await conn.call()

    share, rest = divmod(requests, connections)
    await asyncio.gather(*(worker(share + (i < rest)) for i in range(connections)))


async def count_calls(
    policy: str, window: str, connections: int = COUNT_CONNECTIONS
) -> dict[str, float]:
    """Python calls per request by layer (:mod:`benchmarks._call_counts`), the load sent over
    ``connections`` connections (1: sequential calls)."""
    return await calls_per_unit(
        policy, window, functools.partial(_calls_over, connections=connections)
    )


async def prompt_cpu_s(
    port: int, pid: int, words: int, seconds: float, warmup: int = 3, at_least: int = 5
) -> float:
    """The controller's CPU seconds per call with a ``words``-word prompt: sequential calls on
    one connection for ``seconds`` (at least ``at_least`` calls; ``/proc`` counts CPU in
    10 ms ticks, so a run must be long enough to hold many)."""
    async with _Connection(port) as conn:
        for variant in range(warmup):
            await conn.call(prompt_body(words, variant))
        cpu_before = cpu_s(pid)
        stop_at = time.perf_counter() + seconds
        calls = 0
        while calls < at_least or time.perf_counter() < stop_at:
            await conn.call(prompt_body(words, warmup + calls))
            calls += 1
        return (cpu_s(pid) - cpu_before) / calls


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(policy: str, args: argparse.Namespace) -> dict[str, Any]:
    """Interleaved repetitions of direct vs via the controller running ``policy``."""
    reps: list[dict[str, float]] = []
    async with stack(policy, args.window) as (backend, controller, pid):
        for _ in range(args.reps):
            direct = await latencies(backend, args.calls)
            via = await latencies(controller, args.calls)
            direct_rate = await throughput(backend, args.concurrency, args.seconds)
            cpu_before = cpu_s(pid)
            via_rate = await throughput(controller, args.concurrency, args.seconds)
            cpu_per_call = (cpu_s(pid) - cpu_before) / (via_rate * args.seconds)
            extra: dict[str, float] = {}
            if args.stream_seconds > 0:
                cpu_before = cpu_s(pid)
                rate = await throughput(
                    controller, args.concurrency, args.stream_seconds, STREAM_BODY
                )
                chunks = rate * args.stream_seconds * STREAM_CHUNKS
                extra["controller_cpu_us_per_chunk"] = (cpu_s(pid) - cpu_before) / chunks * 1e6
            for words in args.prompt_words:
                extra[f"controller_cpu_us_per_call_{words}_words"] = (
                    await prompt_cpu_s(controller, pid, words, args.prompt_seconds) * 1e6
                )
            reps.append(
                {
                    "direct_p50_ms": _pct(direct, 0.5) * 1e3,
                    "direct_p99_ms": _pct(direct, 0.99) * 1e3,
                    "via_p50_ms": _pct(via, 0.5) * 1e3,
                    "via_p99_ms": _pct(via, 0.99) * 1e3,
                    "added_p50_ms": (_pct(via, 0.5) - _pct(direct, 0.5)) * 1e3,
                    "added_p99_ms": (_pct(via, 0.99) - _pct(direct, 0.99)) * 1e3,
                    "direct_calls_per_s": direct_rate,
                    "via_calls_per_s": via_rate,
                    # CPU the controller process used per call in the throughput run, and the
                    # calls/s one fully available core would give at that cost: unlike wall
                    # figures, these hardly depend on what else runs on the machine.
                    "controller_cpu_us_per_call": cpu_per_call * 1e6,
                    "calls_per_controller_cpu_s": 1.0 / cpu_per_call,
                    **extra,
                }
            )
    median = {key: statistics.median(r[key] for r in reps) for key in reps[0]}
    return {"median": median, "repetitions": reps}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    policies = {policy: await measure(policy, args) for policy in args.policies.split(",")}
    return {
        "admission_window": args.window,
        "calls_per_rep": args.calls,
        "reps": args.reps,
        "concurrency": args.concurrency,
        "seconds_per_rate_run": args.seconds,
        "seconds_per_stream_run": args.stream_seconds,
        "stream_chunks": STREAM_CHUNKS,
        "prompt_words": args.prompt_words,
        "prompt_seconds": args.prompt_seconds,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}",
        # The machine is shared: its 1-minute load average says how much CPU others took.
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "policies": policies,
    }


def markdown(result: dict[str, Any]) -> str:
    rows = []
    latency_met: list[bool] = []
    wall_met: list[bool] = []
    cpu_met: list[bool] = []
    for policy, data in result["policies"].items():
        m = data["median"]
        rows.append(
            f"| `{policy}` | {m['direct_p50_ms']:.3f} | {m['via_p50_ms']:.3f} | "
            f"**{m['added_p50_ms']:.3f}** | {m['direct_p99_ms']:.3f} | {m['via_p99_ms']:.3f} | "
            f"{m['added_p99_ms']:.3f} | {m['direct_calls_per_s']:,.0f} | "
            f"**{m['via_calls_per_s']:,.0f}** | {m['controller_cpu_us_per_call']:.0f} | "
            f"**{m['calls_per_controller_cpu_s']:,.0f}** |"
        )
        latency_met.append(m["added_p50_ms"] <= 1.0)
        wall_met.append(m["via_calls_per_s"] >= 1000)
        cpu_met.append(m["calls_per_controller_cpu_s"] >= 1000)

    def verdict(flags: list[bool]) -> str:
        return "met" if all(flags) else "NOT met"

    return "\n".join(
        [
            "## Controller overhead",
            "",
            f"`benchmarks/controller_overhead.py` — {result['machine']}; a backend that answers "
            "at once; the controller started with `agentrt controller serve` (admission window "
            f"`{result['admission_window']}`); a minimal keep-alive HTTP/1.1 client; medians of "
            f"{result['reps']} interleaved repetitions ({result['calls_per_rep']} sequential "
            f"calls each for latency, {result['concurrency']} connections for "
            f"{result['seconds_per_rate_run']} s for throughput); direct and via the controller "
            "in the same run. 1-minute load average of the (shared) machine: "
            f"{result['load_average'][0]} before, {result['load_average'][1]} after.",
            "",
            "| policy | direct p50 ms | via p50 ms | added p50 ms | direct p99 ms | via p99 ms "
            "| added p99 ms | direct calls/s | via calls/s | controller CPU µs/call "
            "| calls per controller CPU-second |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "`via calls/s` is wall-clock throughput with client, controller and backend sharing "
            "the machine's 2 cores with whatever else runs; `calls per controller CPU-second` "
            "is what the controller sustains per core it gets (1 / its CPU per call).",
            "",
            f"Goals: ≤ 1 ms added at p50 — {verdict(latency_met)}; ≥ 1,000 calls/s — "
            f"{verdict(wall_met)} in wall-clock throughput, {verdict(cpu_met)} per controller "
            "CPU-second.",
            *_cpu_table(result),
            "Reproduce: `.venv/bin/python benchmarks/controller_overhead.py --write-docs`.",
            "",
        ]
    )


def word_counts(text: str) -> list[int]:
    """``--prompt-words``: comma-separated word counts ('' = none); ArgumentTypeError else."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated word counts: {text!r}") from None
    if any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError(f"word counts must be at least 1: {text!r}")
    return counts


def _cpu_table(result: dict[str, Any]) -> list[str]:
    """The controller's CPU per streamed chunk and per call against the prompt's size."""
    words = result.get("prompt_words", [])
    streamed = result.get("seconds_per_stream_run", 0) > 0
    if not words and not streamed:
        return []
    head = "| policy |" + (
        " CPU µs per streamed chunk | chunks per CPU-second |" if streamed else ""
    )
    head += "".join(f" CPU µs per call, {w:,}-word prompt |" for w in words)
    head += " largest ÷ smallest |" if len(words) > 1 else ""
    rows = []
    for policy, data in result["policies"].items():
        m = data["median"]
        row = f"| `{policy}` |"
        if streamed:
            per_chunk = m["controller_cpu_us_per_chunk"]
            row += f" **{per_chunk:.1f}** | {1e6 / per_chunk:,.0f} |"
        per_call = [m[f"controller_cpu_us_per_call_{w}_words"] for w in words]
        row += "".join(f" {value:,.0f} |" for value in per_call)
        row += f" **{per_call[-1] / per_call[0]:.2f}×** |" if len(words) > 1 else ""
        rows.append(row)
    return [
        "",
        f"The controller's CPU per streamed chunk ({result['stream_chunks']} chunks per call, "
        f"each written on its own by the backend; {result['concurrency']} connections for "
        f"{result['seconds_per_stream_run']} s; the call's own share included) and per call "
        f"with longer prompts (sequential calls for {result['prompt_seconds']} s per size; each "
        "prompt a history of 1,000-word turns that every call repeats, then a short message of "
        "its own, as an agent's; one output token each):",
        "",
        head,
        "|" + "---|" * (head.count("|") - 1),
        *rows,
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="sequential calls per rep")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=3.0, help="per throughput run")
    parser.add_argument("--policies", default="fcfs,atlas", help="comma-separated")
    parser.add_argument("--window", default="32", help="controller --admission-window")
    parser.add_argument(
        "--stream-seconds", type=float, default=3.0,
        help=f"per run of streamed calls ({STREAM_CHUNKS} chunks each) for the CPU per chunk; "
        "0 = none",
    )  # fmt: skip
    parser.add_argument(
        "--prompt-words", type=word_counts, default=[1000, 32000, 128000],
        help="comma-separated prompt sizes (words, ≈ tokens) for the CPU per call against the "
        "prompt; '' = none (default: 1000,32000,128000)",
    )  # fmt: skip
    parser.add_argument(
        "--prompt-seconds", type=float, default=2.0,
        help="sequential calls for this long per prompt size (at least 5)",
    )  # fmt: skip
    parser.add_argument(
        "--count-calls", action="store_true",
        help="instead of timing: Python function calls per request by layer, from the "
        f"controller run twice under cProfile ({COUNT_RUNS[0]:,} and {COUNT_RUNS[1]:,} calls, "
        "the first of --policies)",
    )  # fmt: skip
    parser.add_argument(
        "--count-connections", type=int, default=COUNT_CONNECTIONS,
        help="connections of --count-calls' load (1: sequential calls, where a call finds the "
        f"controller idle; default {COUNT_CONNECTIONS})",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--serve-backend", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_backend:
        serve_backend(args.serve_backend)
        return 0
    if args.count_calls:
        if args.count_connections < 1:
            parser.error("--count-connections must be at least 1")
        policy = args.policies.split(",")[0]
        per_request = asyncio.run(count_calls(policy, args.window, args.count_connections))
        print(json.dumps(per_request, indent=2) if args.json
              else _call_counts.markdown({policy: per_request}))  # fmt: skip
        return 0
    result = asyncio.run(run(args))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    section = markdown(result)
    print(section)
    print(json.dumps({p: d["median"] for p, d in result["policies"].items()}, indent=2))
    if args.write_docs:
        _report.replace_section(ROOT / "docs" / "benchmarks.md", "## Controller overhead", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
