"""What each of the controller's features costs per call: its CPU per relayed call and per
streamed chunk with one feature switched off at a time, against the Python floor.

Every configuration is ``agentrt controller serve`` with its defaults (policy ``plas``,
admission window ``adaptive``, router ``prefix``, retention on, access log ``text``, the
direct HTTP path) plus one change, in front of ``benchmarks/controller_overhead.py``'s instant
backend (a backend that answers at once, so nearly all the CPU measured is the relay's):

* ``defaults``; ``--access-log off``; ``--retention off``; ``--router round_robin``;
  ``--policy fcfs``; ``--admission-window unlimited``;
* ``--http-path asgi`` (the slow path, for reference: a change that costs, not one that saves);
* ``all off``: every cheap choice at once (access log off, retention off, round robin, FCFS,
  unlimited window; the direct path);
* ``python-floor``: ``benchmarks/_floor_proxy.py``, the least a Python relay does per call
  (find the head, parse the JSON body, relay the bytes; as ``benchmarks/peers.py`` runs it) —
  the lower bound no flag of ours reaches. It frames answers by ``content-length`` only, so it
  relays no streamed (chunked) answers: no figure per chunk.

Measured, as ``controller_overhead.py`` does: the relay process's CPU (``/proc``) per call
while ``--concurrency`` connections send calls back to back for ``--seconds``, and per
streamed chunk while they send streamed calls (64 chunks each, the call's own share included)
for ``--stream-seconds``. Each configuration runs in a fresh backend + relay pair, after a short
warm-up. Interleaved: each repetition runs every configuration once, the order rotated by one
per repetition, so that a slow spell of the shared machine falls on all of them alike.
Reported: medians [ranges] over repetitions, and each configuration's difference to
``defaults`` paired by repetition (negative: the feature switched off saves that much).

Run::

    .venv/bin/python benchmarks/feature_cost.py --reps 3           # a table (markdown)
    .venv/bin/python benchmarks/feature_cost.py --reps 3 --json    # the JSON result
    .venv/bin/python benchmarks/feature_cost.py --reps 1 --seconds 1 --stream-seconds 0 \\
        --configs defaults,all-off,python-floor                     # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import controller_overhead as overhead  # noqa: E402
from benchmarks._peers_setup import REFERENCES  # noqa: E402
from benchmarks._processes import cpu_s, free_port  # noqa: E402

#: The relay for the lower bound (not a controller).
FLOOR = "python-floor"
#: The controller's defaults, as ``controller_overhead.controller_command`` takes them.
DEFAULT_POLICY, DEFAULT_WINDOW = "plas", "adaptive"
#: The cheap choice of every flag that has one (the direct HTTP path is the default).
ALL_OFF = (
    "--access-log", "off", "--retention", "off", "--router", "round_robin",
    "--policy", "fcfs", "--admission-window", "unlimited",
)  # fmt: skip
#: Configuration name → the flags it adds to the defaults (``python-floor`` is no controller).
CONFIGS: dict[str, tuple[str, ...]] = {
    "defaults": (),
    "access-log-off": ("--access-log", "off"),
    "retention-off": ("--retention", "off"),
    "round-robin": ("--router", "round_robin"),
    "fcfs": ("--policy", "fcfs"),
    "unlimited-window": ("--admission-window", "unlimited"),
    "asgi": ("--http-path", "asgi"),
    "all-off": ALL_OFF,
    FLOOR: (),
}
#: Seconds of calls before each measured run (connections opened, caches and code warm).
WARMUP_S = 0.5


def label(name: str) -> str:
    """How the report names a configuration: its flags, or its name when it adds none."""
    flags = CONFIGS[name]
    return f"`{' '.join(flags)}`" if flags and name != "all-off" else name


def split_flags(flags: tuple[str, ...]) -> tuple[str, str, tuple[str, ...]]:
    """``flags`` as ``controller_command`` takes them: (policy, window, the other flags)."""
    policy, window, rest = DEFAULT_POLICY, DEFAULT_WINDOW, []
    for flag, value in zip(flags[::2], flags[1::2], strict=True):
        if flag == "--policy":
            policy = value
        elif flag == "--admission-window":
            window = value
        else:
            rest += [flag, value]
    return policy, window, tuple(rest)


def config_names(text: str) -> list[str]:
    """``--configs``: comma-separated names of :data:`CONFIGS` ('' = all, in their order);
    ArgumentTypeError naming an unknown one."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in CONFIGS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown configuration(s) {', '.join(unknown)}; known: {', '.join(CONFIGS)}"
        )
    return names or list(CONFIGS)


def rotation(names: list[str], rep: int) -> list[str]:
    """The order of repetition ``rep``: ``names`` rotated left by ``rep``."""
    shift = rep % len(names)
    return names[shift:] + names[:shift]


@contextlib.asynccontextmanager
async def floor_stack() -> AsyncIterator[tuple[int, int]]:
    """The instant backend and the Python floor relay in front of it: (relay port, its pid)."""
    backend_port, port = free_port(), free_port()
    python = sys.executable
    with overhead._process([python, overhead.__file__, "--serve-backend", str(backend_port)]):
        await overhead._wait_ready(backend_port, b"/health")
        relay = [python, str(ROOT / REFERENCES[FLOOR]), "--port", str(port),
                 "--backend", f"http://127.0.0.1:{backend_port}"]  # fmt: skip
        with overhead._process(relay) as proc:
            await overhead._wait_ready(port, b"/health")  # relayed to the backend
            yield port, proc.pid


@contextlib.asynccontextmanager
async def relay(name: str) -> AsyncIterator[tuple[int, int]]:
    """Configuration ``name`` running: (the port calls go to, the pid whose CPU counts)."""
    if name == FLOOR:
        async with floor_stack() as running:
            yield running
        return
    policy, window, extra = split_flags(CONFIGS[name])
    async with overhead.stack(policy, window, extra) as (_, port, pid):
        yield port, pid


async def measure_once(name: str, args: argparse.Namespace) -> dict[str, float | None]:
    """One run of configuration ``name``: CPU µs per call, and per streamed chunk (None for
    the floor, or when ``--stream-seconds`` is 0)."""
    async with relay(name) as (port, pid):
        await overhead.throughput(port, args.concurrency, WARMUP_S)
        before = cpu_s(pid)
        rate = await overhead.throughput(port, args.concurrency, args.seconds)
        per_call = (cpu_s(pid) - before) / (rate * args.seconds) * 1e6
        per_chunk = None
        if args.stream_seconds > 0 and name != FLOOR:
            before = cpu_s(pid)
            rate = await overhead.throughput(
                port, args.concurrency, args.stream_seconds, overhead.STREAM_BODY
            )
            chunks = rate * args.stream_seconds * overhead.STREAM_CHUNKS
            per_chunk = (cpu_s(pid) - before) / chunks * 1e6
    return {"cpu_us_per_call": per_call, "cpu_us_per_chunk": per_chunk}


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(reps: list[dict[str, dict[str, float | None]]]) -> dict[str, Any]:
    """Per configuration and figure: median, min, max over repetitions, and the difference to
    ``defaults`` paired by repetition (when ``defaults`` ran). ``reps``: per repetition,
    configuration → figure → value (None: not measured)."""
    out: dict[str, Any] = {}
    for name in reps[0]:
        figures: dict[str, Any] = {}
        for figure in reps[0][name]:
            values = [v for rep in reps if (v := rep[name][figure]) is not None]
            if len(values) < len(reps):
                continue
            figures[figure] = _spread(values)
            if "defaults" in reps[0] and name != "defaults":
                base = [b for rep in reps if (b := rep["defaults"][figure]) is not None]
                if len(base) == len(reps):
                    diffs = [v - b for v, b in zip(values, base, strict=True)]
                    figures[f"{figure}_minus_defaults"] = _spread(diffs)
        out[name] = figures
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    reps: list[dict[str, dict[str, float | None]]] = []
    for rep in range(args.reps):
        measured = {name: await measure_once(name, args) for name in rotation(args.configs, rep)}
        reps.append({name: measured[name] for name in args.configs})
        print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr)
    return {
        "reps": args.reps,
        "concurrency": args.concurrency,
        "seconds_per_call_run": args.seconds,
        "seconds_per_stream_run": args.stream_seconds,
        "stream_chunks": overhead.STREAM_CHUNKS,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}",
        # The machine is shared: its 1-minute load average says how much CPU others took.
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "flags": {name: list(CONFIGS[name]) for name in args.configs},
        "configs": summarise(reps),
        "repetitions": reps,
    }


def _cell(figures: dict[str, Any], key: str, digits: int, signed: bool = False) -> str:
    spread = figures.get(key)
    if spread is None:
        return "—"
    # "z": a value that rounds to zero prints as 0, not -0.
    form = f"{'+' if signed else ''}z.{digits}f"
    return f"{spread['median']:{form}} [{spread['min']:{form}} … {spread['max']:{form}}]"


def markdown(result: dict[str, Any]) -> str:
    """The table: per configuration, CPU µs per call and per streamed chunk, medians
    [ranges], and their paired differences to ``defaults``."""
    rows = []
    for name, figures in result["configs"].items():
        rows.append(
            f"| {label(name)} | **{_cell(figures, 'cpu_us_per_call', 0)}** | "
            f"{_cell(figures, 'cpu_us_per_call_minus_defaults', 0, signed=True)} | "
            f"{_cell(figures, 'cpu_us_per_chunk', 1)} | "
            f"{_cell(figures, 'cpu_us_per_chunk_minus_defaults', 1, signed=True)} |"
        )
    return "\n".join(
        [
            f"{result['machine']}; {result['reps']} interleaved repetitions; "
            f"{result['concurrency']} connections, {result['seconds_per_call_run']} s of calls "
            f"and {result['seconds_per_stream_run']} s of streamed calls "
            f"({result['stream_chunks']} chunks each) per configuration and repetition; "
            f"1-minute load {result['load_average'][0]} before, "
            f"{result['load_average'][1]} after. Medians [ranges]; "
            "Δ: paired by repetition, against `defaults`.",
            "",
            "| configuration | CPU µs per call | Δ per call | CPU µs per chunk | Δ per chunk |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="configurations (--configs): "
        + "; ".join(f"{name} = {' '.join(flags) or '(no flag)'}" for name, flags in CONFIGS.items())
        + f". {FLOOR} is benchmarks/_floor_proxy.py, not a controller (no streamed figure).",
    )
    parser.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument(
        "--concurrency", type=int, default=16, help="connections sending back to back (16)"
    )
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="of calls per configuration and rep (3)"
    )
    parser.add_argument(
        "--stream-seconds", type=float, default=3.0,
        help=f"of streamed calls ({overhead.STREAM_CHUNKS} chunks each) per configuration and "
        "rep, for the CPU per chunk; 0 = none (3)",
    )  # fmt: skip
    parser.add_argument(
        "--configs", type=config_names, default=list(CONFIGS),
        help="comma-separated configurations to run (default: all; see below)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the JSON result instead")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    result = asyncio.run(run(args))
    print(json.dumps(result, indent=2) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
