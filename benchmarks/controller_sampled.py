"""Where the controller's CPU goes: its load under a sampling profiler, and the samples by layer.

The stack of ``benchmarks/controller_overhead.py`` (its instant backend and the real
``agentrt controller serve`` in front of it), warmed up, then its throughput load
(``--concurrency`` keep-alive connections sending back to back for ``--seconds``). Printed
for that run, from ``/proc`` (no tracer attached): the controller's user and system CPU per
call, its ``read`` and ``write`` system calls per call (``syscr``, ``syscw``) and its context
switches per call. ``--observe`` runs a command against the controller's pid (``{pid}``) for
the load, e.g. py-spy; ``--gc-stats`` adds the cyclic garbage collector's CPU per call by
generation (the controller runs with a ``gc.callbacks`` hook). ``--classify`` reads py-spy's
``--format raw`` output and prints the self time by layer (system calls apart: take the
kernel's share from the system CPU, docs/benchmarks.md "Where the CPU goes (sampled)") and the
inclusive time of the project's frames.

Run::

    .venv/bin/python benchmarks/controller_sampled.py --seconds 20 \\
        --observe ".venv/bin/py-spy record --native --rate 250 --format raw -o ctl.raw -p {pid}"
    .venv/bin/python benchmarks/controller_sampled.py --classify ctl.raw
    .venv/bin/python benchmarks/controller_sampled.py --seconds 10 --gc-stats
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import itertools
import os
import re
import runpy
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import controller_overhead as overhead  # noqa: E402
from benchmarks._processes import free_port  # noqa: E402

#: Where the controller writes its collector figures (``--gc-stats``), on SIGUSR1.
_GC_OUT = "AGENTRT_GC_STATS_OUT"

#: Self time by layer: (layer, path prefixes of the sample's innermost Python frame).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("policies", ("agentrt_controller/routing/", "agentrt_controller/scheduling/",
                  "agentrt_controller/retention/", "agentrt_controller/process_table.py",
                  "agentrt_controller/keys.py", "agentrt_controller/policies.py")),
    ("access log", ("agentrt_controller/service/http/access_log.py", "agentrt_serving/logs.py",
                    "logging/")),
    ("metrics and tracing", ("agentrt_controller/service/telemetry/",)),
    ("endpoints and fast path", ("agentrt_controller/service/http/",)),
    ("server (agentrt_serving)", ("agentrt_serving/",)),
    ("uvicorn (Python)", ("uvicorn/",)),
    ("core", ("agentrt_controller/service/core/",)),
    ("backend transport", ("agentrt_controller/backends/",)),
    ("asyncio and anyio (Python)", ("asyncio/", "_weakrefset", "anyio/", "sniffio/",
                                    "<frozen abc>")),
    ("dataclass __init__", ("<string>",)),
)  # fmt: skip
#: Self time by layer for a native innermost frame: (layer, parts of its library or file).
NATIVE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("event loop (uvloop C)", ("loop.c", "uvloop", ".pyx")),
    ("HTTP parser (httptools C)", ("parser.c", "llhttp.c", "api.c", "http.c", "httptools")),
    ("JSON (orjson)", ("orjson",)),
    ("asyncio C (tasks, futures)", ("_asynciomodule.c",)),
)
_SYSCALLS = frozenset({"write", "read", "epoll_pwait", "epoll_wait", "getpid", "writev", "send",
                       "recv", "sendto", "recvfrom"})  # fmt: skip


def _where(frame: str) -> str:
    """The file or library of one py-spy frame, ``name (file:line)`` or ``name (lib)``."""
    match = re.search(r"\(([^()]+?)(?::\d+)?\)$", frame)
    return match.group(1) if match else frame


def _python_layer(where: str) -> str:
    for layer, prefixes in LAYERS:
        if where.startswith(prefixes):
            return layer
    return "other Python"


def layer_of(stack: str) -> str:
    """The layer a sample's self time belongs to (``stack``: py-spy's ``;``-joined frames)."""
    frames = stack.split(";")
    if any("gc_collect" in frame for frame in frames):
        return "cyclic garbage collector"
    leaf = frames[-1]
    where = _where(leaf)
    if where in ("libc.so.6", "[vdso]"):
        name = leaf.split(" ", 1)[0]
        if name in _SYSCALLS or where == "[vdso]" or name.startswith("0x"):
            return "kernel (system calls)"
        return "libc (malloc, memcpy)"
    for layer, parts in NATIVE:
        if any(part in where for part in parts):
            return layer
    if where.endswith(".py") or where.startswith(("<string>", "<frozen")):
        return _python_layer(where)
    # the interpreter's own C (reference counts, calls): the innermost Python frame's layer
    for frame in reversed(frames):
        owner = _where(frame)
        if owner.endswith(".py") or owner.startswith(("<string>", "<frozen")):
            return _python_layer(owner)
    return "interpreter"


def classify(lines: list[str]) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """Samples, self samples by layer, and inclusive samples of each project frame."""
    total = 0
    layers: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for line in lines:
        if not line.strip():
            continue
        stack, count_text = line.rstrip().rsplit(" ", 1)
        count = int(count_text)
        total += count
        layers[layer_of(stack)] += count
        seen = set()
        for frame in stack.split(";"):
            where = _where(frame)
            if where.startswith(("agentrt", "agentrt_controller", "agentrt_serving")):
                key = f"{frame.split(' (', 1)[0]} ({where})"
                if key not in seen:
                    seen.add(key)
                    inclusive[key] += count
    return total, layers, inclusive


def report(paths: list[str], top: int = 40) -> str:
    lines: list[str] = []
    for path in paths:
        lines.extend(Path(path).read_text().splitlines())
    total, layers, inclusive = classify(lines)
    kernel = layers.get("kernel (system calls)", 0)
    out = [f"{total} samples; {kernel} in system calls (their share: take it from the system "
           "CPU); the rest by layer, % of the samples outside system calls:"]  # fmt: skip
    for layer, count in layers.most_common():
        if layer != "kernel (system calls)":
            out.append(f"{100 * count / max(1, total - kernel):5.1f} %  {layer}")
    out.append("inclusive, % of all samples:")
    for frame, count in inclusive.most_common(top):
        out.append(f"{100 * count / total:5.1f} %  {frame}")
    return "\n".join(out)


# --- the load ---------------------------------------------------------------------------------


def _proc_counters(pid: int) -> dict[str, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    counters = {"user_s": int(fields[11]) / tick, "system_s": int(fields[12]) / tick}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith(("syscr", "syscw")):
            key, value = line.split(":")
            counters[key] = float(value)
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if "ctxt_switches" in line:
            key, value = line.split(":")
            counters[key] = float(value)
    return counters


def _gc_snapshot(pid: int, out: Path) -> list[list[float]]:
    out.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    for _ in range(100):
        if out.exists() and out.read_text().endswith("\n"):
            return [[float(v) for v in row.split()] for row in out.read_text().splitlines()]
        time.sleep(0.05)
    raise RuntimeError("the controller wrote no collector figures")


@contextlib.asynccontextmanager
async def _stack(policy: str, gc_out: Path | None) -> AsyncIterator[tuple[int, int]]:
    backend_port, port = free_port(), free_port()
    python = sys.executable
    with overhead._process([python, overhead.__file__, "--serve-backend", str(backend_port)]):
        await overhead._wait_ready(backend_port, b"/health")
        runner = (python, __file__, "--gc-hook") if gc_out else (python, "-m", "agentrt.cli")
        command = overhead.controller_command(port, backend_port, policy, runner=runner)
        if gc_out:
            os.environ[_GC_OUT] = str(gc_out)
        with overhead._process(command) as controller:
            await overhead._wait_ready(port, b"/health")
            yield port, controller.pid


async def run(args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory() as folder:
        gc_out = Path(folder) / "gc.txt" if args.gc_stats else None
        async with _stack(args.policy, gc_out) as (port, pid):
            load = _load(port, args)
            await load(2.0)  # warm-up
            observer = None
            if args.observe:
                observer = await asyncio.create_subprocess_exec(
                    *shlex.split(args.observe.format(pid=pid))
                )
                await asyncio.sleep(args.attach_wait)
            gc_before = _gc_snapshot(pid, gc_out) if gc_out else []
            before = _proc_counters(pid)
            rate = await load(args.seconds)
            after = _proc_counters(pid)
            gc_after = _gc_snapshot(pid, gc_out) if gc_out else []
            if observer is not None:
                observer.send_signal(signal.SIGINT)
                await asyncio.wait_for(observer.wait(), 120)
    calls = rate * args.seconds
    per = {key: (after[key] - before[key]) / calls for key in before}
    lines = [
        f"load average {os.getloadavg()[0]:.2f}; {calls:.0f} calls, {rate:.0f}/s",
        f"CPU per call: user {per['user_s'] * 1e6:.1f} µs, system "
        f"{per['system_s'] * 1e6:.1f} µs, total {(per['user_s'] + per['system_s']) * 1e6:.1f} µs",
        f"per call: {per.get('syscr', 0):.2f} reads, {per.get('syscw', 0):.2f} writes, "
        f"{per.get('voluntary_ctxt_switches', 0):.3f} voluntary and "
        f"{per.get('nonvoluntary_ctxt_switches', 0):.3f} involuntary context switches",
    ]
    for generation, (old, new) in enumerate(zip(gc_before, gc_after, strict=True)):
        lines.append(
            f"GC generation {generation}: {new[0] - old[0]:.0f} collections, "
            f"{(new[1] - old[1]) / calls * 1e6:.1f} µs per call"
        )
    return "\n".join(lines)


def _load(port: int, args: argparse.Namespace) -> Callable[[float], Awaitable[float]]:
    """The load: calls per second for a given time, the throughput one or, with
    ``--prompt-words``, sequential calls with controller_overhead.py's long prompts."""
    if not args.prompt_words:
        return functools.partial(overhead.throughput, port, args.concurrency)
    variants = itertools.count()

    async def prompts(seconds: float) -> float:
        async with overhead._Connection(port) as conn:
            calls, stop_at = 0, time.perf_counter() + seconds
            while calls < 1 or time.perf_counter() < stop_at:
                body = overhead.prompt_body(args.prompt_words, next(variants))
                await conn.call(body[:-1] + b', "stream": true}' if args.prompt_stream else body)
                calls += 1
        return calls / seconds

    return prompts


def gc_hook(argv: list[str]) -> None:
    """Run ``agentrt argv...`` with the collector's CPU by generation counted; SIGUSR1 writes
    ``collections seconds`` per generation to ``$AGENTRT_GC_STATS_OUT``."""
    import gc

    totals = [[0.0, 0.0] for _ in range(3)]
    started = [0.0]

    def hook(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.thread_time()
        else:
            row = totals[info["generation"]]
            row[0] += 1
            row[1] += time.thread_time() - started[0]

    def dump(*_: object) -> None:
        text = "".join(f"{n:.0f} {s:.9f}\n" for n, s in totals)
        Path(os.environ[_GC_OUT]).write_text(text)

    gc.callbacks.append(hook)
    signal.signal(signal.SIGUSR1, dump)
    sys.argv = ["agentrt", *argv]
    runpy.run_module("agentrt.cli", run_name="__main__", alter_sys=True)


def main() -> int:
    if sys.argv[1:2] == ["--gc-hook"]:
        gc_hook(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="fcfs")
    parser.add_argument("--seconds", type=float, default=10.0, help="of load (after warm-up)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--observe", default="", help="a command run for the load; {pid}")
    parser.add_argument("--attach-wait", type=float, default=1.0, help="seconds")
    parser.add_argument("--gc-stats", action="store_true")
    parser.add_argument(
        "--prompt-words",
        type=int,
        default=0,
        help="sequential calls with prompts of this many words (controller_overhead.py's) instead",
    )
    parser.add_argument("--prompt-stream", action="store_true", help="--prompt-words streamed")
    parser.add_argument("--classify", nargs="+", metavar="RAW", help="py-spy raw files")
    args = parser.parse_args()
    if args.classify:
        print(report(args.classify))
        return 0
    print(asyncio.run(run(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
