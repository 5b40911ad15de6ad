"""SDK overhead per LLM call: agentrt (tagging + DAG + span + metrics) vs a bare openai client.

Both talk to the same minimal keep-alive HTTP server in a separate process (a fixed chat
completion, answered at once), in the same run, one call at a time. Modes:

* ``bare``       — ``openai.AsyncOpenAI`` on an ``httpx.AsyncClient`` over the lean transport
                   (the baseline: the same HTTP stack the runtime uses, so the difference is the
                   SDK's own work);
* ``bare-default`` — ``openai.AsyncOpenAI`` with its default HTTP client (httpx's own
                   transport; for reference: what the lean transport saves);
* ``sdk-chat``   — ``agentrt.chat`` inside one program: node, tags, ``chat`` span, metrics;
* ``sdk-chat-spans`` — the same with a tracer provider only (tags, DAG and span; no metrics);
* ``sdk-chat-no-otel`` — the same with no providers (no-op telemetry; trace context still
                   injected by the propagator);
* ``sdk-raw``    — ``runtime.openai_client()`` inside one program (tagged at the transport);
* ``sdk-program`` — one program per call (program span and events included; controller off).

Spans go to a real SDK ``TracerProvider`` (a processor that drops them: the creation, attribute
and end costs are paid, export is not), metrics to a real SDK ``MeterProvider``.
Each repetition runs every mode for ``--calls`` calls in a rotating order; the figure per mode
is the median over repetitions of the mean µs per call.

    .venv/bin/python benchmarks/sdk_overhead.py [--calls 1000] [--reps 7] [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _report  # noqa: E402
from benchmarks._processes import free_port  # noqa: E402

GOAL_US = 100.0
_BODY = json.dumps(
    {
        "id": "cmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
).encode()
_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(_BODY)).encode()
    + b"\r\n\r\n"
    + _BODY
)


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            writer.write(_RESPONSE)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve(port: int) -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", port)
    for sock in server.sockets:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


async def _measure(
    args: argparse.Namespace, base_url: str, in_process: bool
) -> dict[str, list[float]]:
    """Per mode: wall µs per call per repetition (``name``) and CPU µs (``name/cpu``).

    ``in_process``: replace the network by an ``httpx.MockTransport`` answering the same reply
    (isolates the client's own work from loopback and server noise)."""
    import httpx
    import openai
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    import agentrt
    from agentrt import Runtime, RuntimeConfig
    from agentrt.fasthttp import FastHTTPTransport

    messages: Any = [{"role": "user", "content": "hello"}]
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SpanProcessor())  # on_end does nothing: no export
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    mock = (
        httpx.MockTransport(
            lambda request: httpx.Response(
                200, content=_BODY, headers={"content-type": "application/json"}
            )
        )
        if in_process
        else None
    )
    config = RuntimeConfig(
        base_url=base_url,
        model="m",
        controller="off",
        max_retries=0,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        http_transport=mock,
    )
    bare = openai.AsyncOpenAI(
        base_url=base_url,
        api_key="x",
        max_retries=0,
        # The runtime's own HTTP stack: the lean transport on loopback, the mock in process.
        http_client=httpx.AsyncClient(transport=mock or FastHTTPTransport()),
    )
    bare_default = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    results: dict[str, list[float]] = {}
    plain = RuntimeConfig(
        base_url=base_url, model="m", controller="off", max_retries=0, http_transport=mock
    )
    spans_only = RuntimeConfig(
        base_url=base_url,
        model="m",
        controller="off",
        max_retries=0,
        tracer_provider=tracer_provider,
        http_transport=mock,
    )
    async with Runtime(config) as rt, Runtime(plain) as rt_plain, Runtime(spans_only) as rt_spans:
        raw = rt.openai_client()

        async def bare_call() -> None:
            await bare.chat.completions.create(model="m", messages=messages)

        async def bare_default_call() -> None:
            await bare_default.chat.completions.create(model="m", messages=messages)

        async def sdk_chat() -> None:
            await agentrt.chat(messages)

        async def sdk_raw() -> None:
            await raw.chat.completions.create(model="m", messages=messages)

        async def sdk_chat_no_otel() -> None:
            await agentrt.chat(messages, runtime=rt_plain)

        async def sdk_chat_spans() -> None:
            await agentrt.chat(messages, runtime=rt_spans)

        async def sdk_program() -> None:
            async with rt.program("bench"):
                await agentrt.chat(messages)

        modes: dict[str, tuple[Callable[[], Awaitable[None]], bool]] = {
            "bare": (bare_call, False),
            **({} if in_process else {"bare-default": (bare_default_call, False)}),
            "sdk-chat": (sdk_chat, True),
            "sdk-chat-spans": (sdk_chat_spans, True),
            "sdk-chat-no-otel": (sdk_chat_no_otel, True),
            "sdk-raw": (sdk_raw, True),
            "sdk-program": (sdk_program, False),
        }
        names = list(modes)
        for name in names:  # warm up connections and code paths
            fn, in_program = modes[name]
            await _run(rt, fn, in_program, 50)
        for rep in range(args.reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for name in order:
                fn, in_program = modes[name]
                wall, cpu = await _run(rt, fn, in_program, args.calls)
                results.setdefault(name, []).append(wall / args.calls * 1e6)
                results.setdefault(name + "/cpu", []).append(cpu / args.calls * 1e6)
    await bare.close()
    await bare_default.close()
    tracer_provider.shutdown()
    meter_provider.shutdown()
    return results


async def _run(
    rt: Any, fn: Callable[[], Awaitable[None]], in_program: bool, calls: int
) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) for ``calls`` sequential calls."""
    if in_program:
        async with rt.program("bench"):
            return await _timed(fn, calls)
    return await _timed(fn, calls)


async def _timed(fn: Callable[[], Awaitable[None]], calls: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        await fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _table(results: dict[str, list[float]]) -> list[str]:
    med = {name: statistics.median(values) for name, values in results.items()}
    lines = [
        "| mode | wall µs/call | CPU µs/call | added CPU vs `bare` µs | CPU ratio |",
        "|---|---|---|---|---|",
    ]
    base = med["bare/cpu"]
    for name in (n for n in results if not n.endswith("/cpu")):
        cpu = med[name + "/cpu"]
        lines.append(
            f"| `{name}` | {med[name]:,.0f} | {cpu:,.0f} | {cpu - base:+,.0f} | {cpu / base:.2f}× |"
        )
    return lines


def _added(results: dict[str, list[float]], mode: str) -> float:
    return statistics.median(results[mode + "/cpu"]) - statistics.median(results["bare/cpu"])


def _markdown(
    args: argparse.Namespace, loopback: dict[str, list[float]], local: dict[str, list[float]]
) -> str:
    load = os.getloadavg()[0]
    added = _added(local, "sdk-chat")
    added_spans = _added(local, "sdk-chat-spans")
    added_noop = _added(local, "sdk-chat-no-otel")
    added_loopback = _added(loopback, "sdk-chat")
    verdict = "met" if added <= GOAL_US else "NOT met"
    lines = [
        "## SDK overhead",
        "",
        f"`benchmarks/sdk_overhead.py` — {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; one call at a time; {args.reps} interleaved repetitions "
        f"× {args.calls} calls per mode; median over repetitions of the mean per call, as wall "
        "time and as this (client) process's CPU time. Spans go to a real SDK tracer "
        "(dropped, not exported), metrics to a real SDK meter, except in `sdk-chat-spans` "
        "(tracer only: tagging + DAG + span) and `sdk-chat-no-otel` (no providers: no-op "
        f"telemetry). 1-minute load average at the end: {load:.2f} on "
        "this shared machine — wall figures swing with the other tenants' load; CPU figures "
        "are the stable ones and the goal is judged on them.",
        "",
        "**Loopback** (a minimal keep-alive HTTP server in another process, fixed reply):",
        "",
        *_table(loopback),
        "",
        "**In-process** (`httpx.MockTransport` under both clients: no sockets, no server — "
        "the client's own work only):",
        "",
        *_table(local),
        "",
        f"Goal (≤ {GOAL_US:.0f} µs added per call by `agentrt.chat` inside a program, with "
        f"span and metrics), judged on the in-process CPU figures (the loopback ones include "
        f"kernel time that swings by ±100 µs between runs here): **{verdict}** "
        f"({added:+,.0f} µs; {added_spans:+,.0f} µs with spans but no metrics — tagging + DAG "
        f"+ span; {added_noop:+,.0f} µs without OpenTelemetry providers; "
        f"{added_loopback:+,.0f} µs CPU on loopback). "
        "`bare` is the openai client on the same HTTP stack the runtime uses (httpx over "
        "our lean transport, `agentrt.fasthttp`); `bare-default` is the openai client's own "
        "default HTTP client (httpx's transport), for reference: the difference between the "
        "two is what the lean transport saves a call. "
        "`sdk-raw` tags a raw `runtime.openai_client()` call at the transport (it also parses "
        "the request and response bodies for the model name and usage); `sdk-program` opens "
        "a program (span, DAG, metrics) around every call.",
        "Where the time goes (cProfile and timers around each step, in-process path): the "
        "SDK's own work per call — node and chain bookkeeping, `CallTags` validation, "
        "deadline and timeout capping, error translation — and the tag headers are the "
        "`sdk-chat-no-otel` row. Each tag header costs httpx twice: once to set it and once "
        "more when the cookie jar copies every request header after the response (both are "
        "linear scans of the header list): roughly a third of that row by cProfile. The "
        "OpenTelemetry "
        "SDK's own recording (one `chat` span with ~16 attributes, three histogram records "
        "each cleaning, hashing and exemplar-sampling its 4-5 attributes, as the GenAI "
        "conventions ask) is the difference between `sdk-chat` and `sdk-chat-no-otel`, paid "
        "only when providers are configured; our code around it is small (attribute dicts "
        "built once per call, one `set_attributes`, metric attribute sets cached per model). "
        "Trace context goes on the wire through OpenTelemetry's global propagator "
        "(`propagate.inject`: `traceparent`, `tracestate`, `baggage`; docs/tracing.md) on every "
        "call, with or without providers: a few µs per call by `timeit` — about what the "
        "hand-formatted `traceparent` it replaced cost when the call had a span, ~2.5 µs more "
        "when it had none (the propagator still looks for the caller's span and baggage). "
        "Without a meter provider the SDK records into the OpenTelemetry API's proxy "
        "instruments (so that a global meter provider set later receives them): no dearer "
        "than the no-op ones. "
        "A free admission slot is taken without a scheduling round trip (an event loop "
        "iteration per call before). Figures move by tens of µs between runs on this "
        "shared machine.",
        f"Reproduce: `.venv/bin/python benchmarks/sdk_overhead.py --calls {args.calls} "
        f"--reps {args.reps} --write-docs`.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per mode per repetition")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve))
        return 0
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        import anyio

        url = f"http://127.0.0.1:{port}/v1"
        loopback = anyio.run(_measure, args, url, False)
        local = anyio.run(_measure, args, url, True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    section = _markdown(args, loopback, local)
    print(section)
    if args.write_docs:
        _report.replace_section(ROOT / "docs" / "benchmarks.md", "## SDK overhead", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
