"""Journal overhead: intent + commit per side-effect call, against the same tool called bare.

For each store (SQLite with synchronous=FULL, SQLite with NORMAL, PostgreSQL when a URL is
given or ``--start-postgres`` can start a scratch server) and each repetition:

* latency: ``--calls`` calls of a trivial async tool, alternating bare ``tool(key)`` and
  ``journal.run_step(StepSpec(..., side_effect=True), tool)`` (first run of each step: one
  durable intent write + one durable commit write). Added latency p50 / p99 = journaled
  percentile minus bare percentile, both measured in the same repetition;
* throughput: 100 concurrent programs × 10 side-effect steps on one journal, intents per
  second (= completed steps / wall time).

Each program holds its lease while its steps run, as under the SDK (every step write is then
fenced by the lease's epoch; the throughput figure includes each program's acquisition and
release); ``--no-leases`` runs the steps without leases.

Reported figures are medians over ``--repeats`` repetitions. Usage::

    .venv/bin/python benchmarks/journal_overhead.py [--calls 400] [--repeats 3]
        [--postgres-url URL | --start-postgres] [--no-leases] [--write-docs]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentrt.journal import Journal, StepSpec  # noqa: E402
from benchmarks import _report  # noqa: E402

SECTION = "## Journal overhead"


async def tool(key: str) -> dict[str, Any]:
    """The benchmarked tool: no I/O, so that only the journal's cost is measured."""
    await anyio.lowlevel.checkpoint()
    return {"ok": True, "key": key[-8:]}


def fsync_p50_ms(directory: str, samples: int = 50) -> float:
    """p50 of one 4 KiB write + fsync in ``directory``: the disk's floor for a durable commit
    (a side-effect step under synchronous=FULL needs two of them, intent and result)."""
    path = Path(directory) / "fsync-probe.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        times = []
        for _ in range(samples):
            os.write(fd, b"x" * 4096)
            start = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()
    return percentile(times, 0.5) * 1e3


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def latency(journal: Journal, calls: int, tag: str, leases: bool) -> dict[str, float]:
    if leases:
        await journal.acquire_lease(f"lat-{tag}")
    bare: list[float] = []
    journaled: list[float] = []
    cpu_bare = cpu_journaled = 0.0
    for seq in range(calls):
        cpu, start = time.process_time(), time.perf_counter()
        await tool(f"bare-{seq}")
        bare.append(time.perf_counter() - start)
        cpu_bare += time.process_time() - cpu
        step = StepSpec(f"lat-{tag}", "main", seq, "tool", "send", {"n": seq}, side_effect=True)
        cpu, start = time.process_time(), time.perf_counter()
        await journal.run_step(step, tool)
        journaled.append(time.perf_counter() - start)
        cpu_journaled += time.process_time() - cpu
    if leases:
        await journal.release_lease(f"lat-{tag}")
    return {
        # CPU of the whole process (event loop and database threads): what the journal costs
        # regardless of how loaded the machine is.
        "added_cpu_ms": (cpu_journaled - cpu_bare) / calls * 1e3,
        "bare_p50_ms": percentile(bare, 0.5) * 1e3,
        "bare_p99_ms": percentile(bare, 0.99) * 1e3,
        "added_p50_ms": (percentile(journaled, 0.5) - percentile(bare, 0.5)) * 1e3,
        "added_p99_ms": (percentile(journaled, 0.99) - percentile(bare, 0.99)) * 1e3,
    }


async def throughput(
    journal: Journal, tag: str, leases: bool, programs: int = 100, steps: int = 10
) -> float:
    async def program(index: int) -> None:
        program_id = f"tp-{tag}-{index}"
        if leases:
            await journal.acquire_lease(program_id)
        for seq in range(steps):
            spec = StepSpec(program_id, "main", seq, "tool", "send", {"n": seq}, side_effect=True)
            await journal.run_step(spec, tool)
        if leases:
            await journal.release_lease(program_id)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index in range(programs):
            tg.start_soon(program, index)
    return programs * steps / (time.perf_counter() - start)


async def measure(name: str, make: Any, calls: int, repeats: int, leases: bool) -> dict[str, Any]:
    reps: list[dict[str, float]] = []
    for rep in range(repeats):
        async with make(rep) as journal:
            figures = await latency(journal, calls, f"{rep}", leases)
            figures["intents_per_s"] = await throughput(journal, f"{rep}", leases)
        reps.append(figures)
        print(
            f"  {name} rep {rep}: " + ", ".join(f"{k}={v:.3f}" for k, v in figures.items()),
            flush=True,
        )
    return {"store": name, **{k: statistics.median(r[k] for r in reps) for k in reps[0]}}


def start_postgres() -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/pg-scratch.sh"), "start"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        SECTION,
        "",
        f"`{' '.join(['.venv/bin/python', 'benchmarks/journal_overhead.py', *sys.argv[1:]])}` — "
        f"{args.calls} alternating bare / journaled calls per repetition, median of "
        f"{args.repeats} repetitions; throughput = 100 concurrent programs × 10 side-effect "
        f"steps on one journal; {'with' if args.leases else 'without'} program leases (each "
        "program holds its lease while its steps run, as under the SDK). Machine: "
        f"{os.cpu_count()} cores, load average {load} at the "
        "end of the run (other work was running: absolute figures are noisy, the bare baseline "
        "is measured in the same run).",
        "",
        "| store | bare tool p50 (ms) | added p50 (ms) | added p99 (ms) | added CPU (ms/call) "
        "| intents/s (100 programs) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['store']} | {r['bare_p50_ms']:.4f} | {r['added_p50_ms']:.2f} | "
            f"{r['added_p99_ms']:.2f} | {r['added_cpu_ms']:.2f} | {r['intents_per_s']:.0f} |"
        )
    lines += [
        "",
        f"Disk floor measured in the same run: one 4 KiB write + fsync p50 = "
        f"{args.fsync_before_ms:.2f} ms before, {args.fsync_after_ms:.2f} ms after "
        "(synchronous=FULL pays two per side-effect step: intent and result; group commit "
        "shares them between concurrent programs). Goal: ≤ 2 ms added p50 on SQLite "
        "(synchronous=FULL).",
        "",
    ]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="agentrt-journal-bench-") as tmp:
        args.fsync_before_ms = fsync_p50_ms(tmp)
        for sync in ("FULL", "NORMAL"):

            def make(rep: int, sync: str = sync) -> Journal:
                return Journal(str(Path(tmp) / f"{sync}-{rep}.sqlite"), synchronous=sync)  # type: ignore[arg-type]

            rows.append(
                await measure(
                    f"SQLite WAL, synchronous={sync}", make, args.calls, args.repeats, args.leases
                )
            )
    if args.postgres_url:
        stamp = int(time.time())

        def make_pg(rep: int) -> Journal:
            return Journal(args.postgres_url, schema=f"bench_{stamp}_{rep}")

        rows.append(
            await measure(
                "PostgreSQL 15, synchronous_commit=on",
                make_pg,
                args.calls,
                args.repeats,
                args.leases,
            )
        )
        await drop_bench_schemas(args.postgres_url, stamp, args.repeats)
    with tempfile.TemporaryDirectory(prefix="agentrt-journal-bench-") as tmp:
        args.fsync_after_ms = fsync_p50_ms(tmp)
    return rows


async def drop_bench_schemas(url: str, stamp: int, repeats: int) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1))
    async with engine.begin() as conn:
        for rep in range(repeats):
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "bench_{stamp}_{rep}" CASCADE'))
    await engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--postgres-url", default=os.environ.get("AGENTRT_TEST_POSTGRES_URL"))
    parser.add_argument(
        "--start-postgres",
        action="store_true",
        help="start scripts/pg-scratch.sh when no URL is given (stopped after)",
    )
    parser.add_argument(
        "--no-leases",
        dest="leases",
        action="store_false",
        help="run the steps without program leases (default: each program holds its lease)",
    )
    parser.add_argument(
        "--write-docs", action="store_true", help="replace the section in docs/benchmarks.md"
    )
    args = parser.parse_args()
    started_pg = False
    if not args.postgres_url and args.start_postgres:
        args.postgres_url = start_postgres()
        started_pg = True
    try:
        rows = anyio.run(main_async, args)
    finally:
        if started_pg:
            subprocess.run(["bash", str(ROOT / "scripts/pg-scratch.sh"), "stop"], check=False)
    section = markdown(rows, args)
    print()
    print(section)
    if args.write_docs:
        _report.replace_section(ROOT / "docs" / "benchmarks.md", SECTION, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
