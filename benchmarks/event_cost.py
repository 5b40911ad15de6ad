"""What a program event costs: the controller's and the SDK's CPU per tool-wait event, and the
controller's Python calls per event.

The SDK posts two events per tool wait (``ControllerLink.tool_start`` / ``tool_end``,
docs/protocol.md), as many requests as the LLM calls of a tool-heavy agent. This starts
``controller_overhead.py``'s instant backend and an ``agentrt controller serve`` in front of
it (``--policy plas --admission-window 32``; ``--http-path`` as given), opens an SDK
``ControllerLink``, starts ``--programs`` programs and sends ``--waits`` tool waits in
sequence, a start and an end each, round robin over the programs. Printed: the controller's
on-CPU time per event (``/proc/PID/task/*/schedstat``), this process's CPU per event (the
SDK's side: httpx and pydantic), and the events' latency p50; for comparison, the same for
the same number of chat completions sent through httpx. With ``--count-calls``: instead, the
controller runs twice under ``cProfile`` (``--waits`` and 3 × ``--waits`` tool waits) and the
Python calls per event by layer are the difference of the runs (``benchmarks/_call_counts.py``).

Run::

    .venv/bin/python benchmarks/event_cost.py --waits 400
    .venv/bin/python benchmarks/event_cost.py --waits 100 --count-calls
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from agentrt.protocol import ProgramStart, ToolWaitEnd, ToolWaitStart  # noqa: E402
from agentrt.runtime.config import RuntimeConfig  # noqa: E402
from agentrt.runtime.controller import ControllerLink  # noqa: E402
from benchmarks import controller_overhead as overhead  # noqa: E402
from benchmarks.prompt_cpu_ab import on_cpu_s  # noqa: E402

API_KEY = "event-cost"


@contextlib.asynccontextmanager
async def _link(port: int, programs: int) -> AsyncIterator[tuple[ControllerLink, list[str]]]:
    """An open SDK link to the controller on ``port`` with ``programs`` programs started."""
    config = RuntimeConfig(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, controller="required"
    )
    link = ControllerLink(config)
    await link.open()
    ids = [f"p{i}" for i in range(programs)]
    for program_id in ids:
        await link.program_start(program_id, ProgramStart(session_id=link.session_id, name="b"))
    try:
        yield link, ids
    finally:
        await link.close()


async def _waits(link: ControllerLink, ids: list[str], waits: int, first: int = 0) -> list[float]:
    """``waits`` tool waits (a start and an end each) in sequence; each post's seconds."""
    session, latencies = link.session_id, []
    for index in range(first, first + waits):
        program_id, node = ids[index % len(ids)], f"n{index}"
        started = time.perf_counter()
        await link.tool_start(
            program_id,
            ToolWaitStart(session_id=session, thread_id="t", node_id=node, tool_name="search"),
        )
        middle = time.perf_counter()
        await link.tool_end(
            program_id,
            ToolWaitEnd(
                session_id=session, thread_id="t", node_id=node, tool_name="search", duration_s=0
            ),
        )
        latencies += [middle - started, time.perf_counter() - middle]
    return latencies


async def cost(args: argparse.Namespace) -> dict[str, float]:
    """CPU per event (controller, SDK) and per httpx chat completion, and the events' p50."""
    extra = ("--http-path", args.http_path)
    async with (
        overhead.stack("plas", "32", extra) as (_backend, port, pid),
        _link(port, args.programs) as (link, ids),
    ):
        await _waits(link, ids, 20)  # warm-up
        controller, sdk = on_cpu_s(pid), time.process_time()
        latencies = await _waits(link, ids, args.waits, 20)
        events = 2 * args.waits
        out = {
            "controller_us_per_event": (on_cpu_s(pid) - controller) / events * 1e6,
            "sdk_us_per_event": (time.process_time() - sdk) / events * 1e6,
            "event_p50_ms": statistics.median(latencies) * 1e3,
        }
        body = {"model": "instant", "messages": [{"role": "user", "content": "hi"}]}
        headers = {"authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(20):
                await client.post("/v1/chat/completions", json=body, headers=headers)
            controller, sdk = on_cpu_s(pid), time.process_time()
            for _ in range(events):
                await client.post("/v1/chat/completions", json=body, headers=headers)
            out["controller_us_per_call"] = (on_cpu_s(pid) - controller) / events * 1e6
            out["client_us_per_call"] = (time.process_time() - sdk) / events * 1e6
        return out


async def count_calls(args: argparse.Namespace) -> dict[str, float]:
    """Python calls per event by layer: two profiled runs of ``--waits`` and 3 × ``--waits``
    tool waits, two events each (``controller_overhead.calls_per_unit``)."""

    async def tool_waits(port: int, waits: int) -> None:
        async with _link(port, args.programs) as (link, ids):
            await _waits(link, ids, waits)

    return await overhead.calls_per_unit(
        "plas",
        "32",
        tool_waits,
        runs=(args.waits, 3 * args.waits),
        per_unit=2,
        extra=("--http-path", args.http_path),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waits", type=int, default=400, help="tool waits (two events each)")
    parser.add_argument("--programs", type=int, default=50, help="programs the waits go to")
    parser.add_argument("--http-path", choices=("direct", "asgi"), default="direct")
    parser.add_argument("--count-calls", action="store_true", help="Python calls per event")
    args = parser.parse_args()
    if args.waits < 1 or args.programs < 1:
        parser.error("--waits and --programs must be >= 1")
    if args.count_calls:
        for layer, calls in asyncio.run(count_calls(args)).items():
            print(f"{calls:8.1f}  {layer}")
        return 0
    for name, value in asyncio.run(cost(args)).items():
        print(f"{name}: {value:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
