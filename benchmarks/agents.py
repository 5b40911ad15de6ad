"""Agents benchmark: the product defaults, a stock vLLM and peer-like configurations.

Today's coding and research agents on KV-bound simulated engines (issue [agents], item 4).

Workloads ``coding``, ``research`` and ``agents`` (docs/simulator.md, "Coding, research,
agents") at 0.5 / 0.8 / 1.0 / 1.5 × **direct's saturation**: the largest arrival rate at which a
stock vLLM (the ``direct`` configuration) keeps up — its median mean JCT within
:data:`BLOW_UP` × its JCT at light load, at most 1 % of the programs unfinished
(:func:`kept_up`). The rates are in :data:`SATURATION`, per workload, profile and engine
count, measured by ``--calibrate`` (direct at ``DEFAULT_RATES × engines ×
CALIBRATION_STEPS``, stopping at the first rate it does not keep up with); a point missing
there is calibrated before the run.

Configurations (``agentrt_sim.peers``; docs/benchmarks.md, "Agents", lists the flags of
each and what of each paper could not be modelled): ``direct`` (stock vLLM), ``direct+cpu``
(with the KV CPU tier), ``continuum``, ``llm-d``, ``thunderagent`` (the peer-like ones) and
``defaults`` (the product with no flags); on request (``--configs``) ``continuum-gpu``
(Continuum without the CPU tier) and ``oracle`` / ``oracle+cpu`` (a bound: the defaults with
clairvoyant program SRPT). The same programs for every configuration of a
point; ``continuum``'s queueing delay ``T`` is the mean per-call queueing delay ``direct``
showed at the same point (its rule needs one and the policy seam carries none).

Reported per point (medians over seeds, [min–max] ranges): program E2E (JCT) mean and p95,
token latency, completed programs/s, unfinished programs, recomputed and reloaded prompt
tokens, preemptions; ratios to ``direct`` and to the best peer-like configuration (lowest
median mean JCT of continuum / llm-d / thunderagent) at the same point; the issue's goals,
met or not.

Run (from the repository root)::

    .venv/bin/python benchmarks/agents.py --quick            # smoke: a minute
    .venv/bin/python benchmarks/agents.py --write-docs       # the default grid, docs section
    .venv/bin/python benchmarks/agents.py --calibrate --workloads coding --profiles h100
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt_controller.cost_model import CostModel  # noqa: E402
from agentrt_emulator.core.types import EngineConfig  # noqa: E402
from agentrt_sim.metrics import summarize  # noqa: E402
from agentrt_sim.peers import peer  # noqa: E402
from agentrt_sim.plan import compile_program  # noqa: E402
from agentrt_sim.rates import DEFAULT_RATES  # noqa: E402
from agentrt_sim.runner import BenchConfig  # noqa: E402
from agentrt_sim.sim import Simulation  # noqa: E402
from benchmarks import _report  # noqa: E402
from benchmarks._agents_report import (  # noqa: E402
    ALL_CONFIGS,
    CALIBRATION_STEPS,
    CONFIGS,
    LOADS,
    PROFILES,
    WORKLOADS,
    aggregate,
    compare,
    markdown,
    point_key,
)

#: direct's saturation (programs/s) per (workload, profile, engines): ``--calibrate``'s
#: result. Measured 2026-12-05 on main (seeds 1, 2, 3; 30 measured arrivals per run):
#: ``benchmarks/agents.py --calibrate --workloads coding,agents``. coding kept up at 2 ×
#: ``agentrt_sim.rates`` (:func:`kept_up`), not at 2.5 ×; agents at 1.5 ×, not at 2 ×.
#: The rest measured 2026-12-05 on main (seeds 1, 2, 3; 30 measured arrivals per run), the
#: step (× DEFAULT_RATES × engines) direct kept up with, then the first it did not:
#: ``benchmarks/agents.py --calibrate --workloads research --profiles a100 --engines 1``:
#: 1.25 ×, not 1.5 ×; ``--calibrate --workloads coding,agents,research --profiles h100
#: --engines 1``: coding 3 × / 4 ×, agents 2.5 × / 3 ×, research 3 × / 4 ×;
#: ``--calibrate --workloads research,coding,agents --profiles a100 --engines 4``: research
#: 0.75 × / 1 ×, coding 1 × / 1.25 ×, agents 0.5 × / 0.75 × (0.5 × is the first step: a lower
#: bound); ``... --profiles h100 --engines 4``: research 1.5 × / 2 ×, coding 1 × / 1.25 ×,
#: agents 0.75 × / 1 ×. On four engines direct routes each call round robin, so a program's
#: context is rarely on the engine its next call lands on: less per engine than on one.
SATURATION: dict[tuple[str, str, int], float] = {
    ("coding", "a100", 1): 0.015,
    ("coding", "a100", 4): 0.03,
    ("coding", "h100", 1): 0.0225,
    ("coding", "h100", 4): 0.03,
    ("research", "a100", 1): 0.0625,
    ("research", "a100", 4): 0.15,
    ("research", "h100", 1): 0.15,
    ("research", "h100", 4): 0.3,
    ("agents", "a100", 1): 0.03,
    ("agents", "a100", 4): 0.04,
    ("agents", "h100", 1): 0.05,
    ("agents", "h100", 4): 0.06,
}


@dataclass(frozen=True)
class Job:
    """One simulation: a configuration at one point of the grid, one seed."""

    workload: str
    profile: str
    engines: int
    load: float
    rate: float
    duration_s: float
    seed: int
    config: str
    #: Continuum's ``T`` (seconds): direct's mean per-call queueing delay at this point.
    queueing_delay_s: float = 0.0

    def label(self) -> str:
        return (
            f"{self.workload} {self.profile} x{self.engines} load {self.load:g} "
            f"{self.config} seed {self.seed}"
        )


def run_job(job: Job) -> dict[str, Any]:
    """Simulate ``job`` and return its figures (:data:`KEYS`, the job's fields, ``wall_s``)."""
    preset = peer(job.config)
    engine = preset.engine_config(EngineConfig(max_model_len=131072))
    bench = BenchConfig(
        workload=job.workload,
        rate_per_s=job.rate,
        duration_s=job.duration_s,
        seed=job.seed,
        engines=job.engines,
        profile=PROFILES[job.profile],
        engine=engine,
    )
    plans = [compile_program(p) for p in bench.programs()]
    cost = CostModel()
    policies = preset.build(cost, _report.cost_function("controller"), job.queueing_delay_s)
    config = bench.sim_config()
    started, cpu_started = time.perf_counter(), time.process_time()
    record = Simulation(plans, config, policies).run(None)
    summary = summarize(record, warmup_s=config.warmup_s, window_end_s=config.window_end_s)
    return {
        **vars(job),
        **figures(summary),
        "wall_s": time.perf_counter() - started,
        "cpu_s": time.process_time() - cpu_started,
    }


def figures(summary: Mapping[str, Any]) -> dict[str, float]:
    """The :data:`KEYS` of a simulator summary (``docs/simulator.md`` names its fields).
    ``queue_delay_s`` is the mean queueing delay per call (seconds), ``arrival_rate`` the
    realised arrival rate of the measured programs (programs/s)."""
    completed = summary["programs_completed"]
    calls = summary["calls_completed"]
    per_call = summary["call_wait_s_mean"] * completed / calls if calls else 0.0
    return {
        "mean_s": summary["e2e_latency_s"]["mean"],
        "p95_s": summary["e2e_latency_s"]["p95"],
        "token_mean_s": summary["token_latency_s"]["mean"],
        "throughput": summary["throughput_programs_per_s"],
        "completed": completed,
        "unfinished": summary["programs_unfinished"],
        "recomputed": summary["recomputed_prompt_tokens"],
        "reloaded": summary.get("reloaded_tokens", 0),
        "preemptions": summary["preemptions"],
        "queue_delay_s": per_call if per_call == per_call else 0.0,  # NaN: no calls
        "arrival_rate": summary["arrival_rate_per_s"],
    }


def duration_for(rate: float, programs: int, fixed_s: float | None) -> float:
    """Arrival window (s): ``fixed_s`` if given, else long enough for ``programs`` measured
    arrivals at ``rate`` after the 10 % warm-up (at least 300 s)."""
    if fixed_s is not None:
        return fixed_s
    return max(300.0, programs / (0.9 * rate))


Runner = Callable[[Sequence[Job], int], list[dict[str, Any]]]


def run_jobs(jobs: Sequence[Job], workers: int) -> list[dict[str, Any]]:
    """Every job, at most ``workers`` at once (in this process when 1), progress on stderr;
    results in job order."""
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    started = time.perf_counter()

    def report(done: int, job: Job, result: dict[str, Any]) -> None:
        elapsed = time.perf_counter() - started
        print(
            f"[{done}/{len(jobs)}] {job.label()}: {result['wall_s']:.1f} s "
            f"({result.get('cpu_s', result['wall_s']):.1f} s CPU; elapsed {elapsed / 60:.1f} min)",
            file=sys.stderr,
            flush=True,
        )

    if workers <= 1:
        for index, job in enumerate(jobs):
            results[index] = run_job(job)
            report(index + 1, job, results[index])  # type: ignore[arg-type]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(run_job, job): i for i, job in enumerate(jobs)}
            for done, future in enumerate(as_completed(futures), 1):
                index = futures[future]
                results[index] = future.result()
                report(done, jobs[index], results[index])  # type: ignore[arg-type]
    return [r for r in results if r is not None]


# --- calibration ---------------------------------------------------------------------------


#: direct "keeps up" at a rate while its median mean JCT stays within this factor of its
#: median mean JCT at the first step (light load) ...
BLOW_UP = 1.5
#: ... and it leaves at most this share of the measured programs unfinished (at least one).
MAX_UNFINISHED = 0.01


def calibrate(
    workload: str,
    profile: str,
    engines: int,
    *,
    seeds: Sequence[int],
    programs: int,
    workers: int,
    runner: Runner = run_jobs,
) -> tuple[float, list[dict[str, Any]]]:
    """direct's saturation (programs/s) and the runs behind it: at each step of
    :data:`CALIBRATION_STEPS` (× ``DEFAULT_RATES[workload] × engines``) run direct over
    ``seeds``; the saturation is the last rate at which direct kept up (:func:`kept_up`
    against the first step's median mean JCT), the search stops at the first that did not.
    Raises ``SystemExit`` when direct keeps up with none.

    Not ``agentrt_sim.runner.keeps_up``: its completed throughput counts only programs that
    finish inside the arrival window, so with programs of ~10 minutes and windows sized for a
    fixed number of arrivals it falls behind the offered rate at any load (the window's last
    JCT is cut off), more so the shorter the window."""
    base = DEFAULT_RATES[workload] * engines
    saturation: float | None = None
    light_mean_s: float | None = None
    points: list[dict[str, Any]] = []
    for step in CALIBRATION_STEPS:
        rate = base * step
        duration = duration_for(rate, programs, None)
        jobs = [
            Job(workload, profile, engines, step, rate, duration, seed, "direct") for seed in seeds
        ]
        runs = runner(jobs, workers)
        points += runs
        if light_mean_s is None:
            light_mean_s = statistics.median(r["mean_s"] for r in runs)
        ok = kept_up(runs, light_mean_s)
        median_s = statistics.median(r["mean_s"] for r in runs)
        print(
            f"  {workload} {profile} x{engines} at {rate:.4g}/s: median mean JCT "
            f"{median_s:.0f} s ({median_s / light_mean_s:.2f} × light load), unfinished "
            f"{[int(r['unfinished']) for r in runs]}, CPU "
            f"{sum(r.get('cpu_s', r['wall_s']) for r in runs):.0f} s: "
            + ("kept up" if ok else "did not keep up"),
            file=sys.stderr,
            flush=True,
        )
        if not ok:
            break
        saturation = rate
    if saturation is None:
        raise SystemExit(
            f"--calibrate: direct keeps up with no rate tried for {workload} on {profile} "
            f"x{engines} (from {base * CALIBRATION_STEPS[0]:g}/s)"
        )
    return saturation, points


def kept_up(runs: Sequence[Mapping[str, Any]], light_mean_s: float) -> bool:
    """Whether direct kept up in ``runs`` (one per seed, same rate): its median mean JCT is
    at most :data:`BLOW_UP` × ``light_mean_s`` and, in most seeds, at most
    :data:`MAX_UNFINISHED` of the measured programs (and at least one) were left unfinished
    when the drain ended."""
    median_s = statistics.median(r["mean_s"] for r in runs)
    finished = sum(
        r["unfinished"] <= max(1.0, MAX_UNFINISHED * (r["completed"] + r["unfinished"]))
        for r in runs
    )
    return median_s <= BLOW_UP * light_mean_s and 2 * finished > len(runs)


# --- the grid ------------------------------------------------------------------------------


def grid_jobs(
    args: argparse.Namespace, saturation: Mapping[tuple[str, str, int], float]
) -> list[Job]:
    """Every job of the grid (of ``--piece``'s setups), without Continuum's ``T`` (filled
    per point from direct)."""
    jobs = []
    for workload, profile, engines in setups_of(args):
        rate_1 = saturation[(workload, profile, engines)]
        for load in args.loads:
            rate = rate_1 * load
            duration = duration_for(rate, args.programs, args.duration)
            for config in args.configs:
                for seed in args.seeds:
                    jobs.append(Job(workload, profile, engines, load, rate, duration, seed, config))
    return jobs


#: The configurations that run Continuum's rule (its ``T`` comes from direct).
CONTINUUM = ("continuum", "continuum-gpu")


def measure(jobs: Sequence[Job], workers: int, runner: Runner = run_jobs) -> list[dict[str, Any]]:
    """Run ``jobs``: direct first, then the rest with Continuum's ``T`` taken from direct's
    run of the same point and seed."""
    first = [j for j in jobs if j.config == "direct"]
    points = runner(first, workers)
    delay = {(*point_key(p), p["seed"]): p["queue_delay_s"] for p in points}
    rest = [
        replace(j, queueing_delay_s=delay.get((*point_key(vars(j)), j.seed), 0.0))
        if j.config in CONTINUUM
        else j
        for j in jobs
        if j.config != "direct"
    ]
    return points + runner(rest, workers)


# --- command line --------------------------------------------------------------------------


def _items(
    text: str, option: str, valid: Sequence[str] | None = None, kind: type = str
) -> list[Any]:
    """Comma-separated ``text`` of ``option`` as a list of ``kind``; ``SystemExit`` naming
    the option and the bad item (and the valid names)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise SystemExit(f"{option}: give at least one value")
    out = []
    for item in items:
        if valid is not None and item not in valid:
            raise SystemExit(f"{option}: unknown {item!r}; valid: {', '.join(valid)}")
        try:
            value = kind(item)
        except ValueError:
            raise SystemExit(f"{option}: {item!r} is not a {kind.__name__}") from None
        if kind is not str and not value > 0:
            raise SystemExit(f"{option}: {item!r} must be > 0")
        out.append(value)
    return out


def machine() -> str:
    """The machine's CPUs and load average now, for the report."""
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load average {one:.1f} (1 min) / {five:.1f} (5 min)"


#: The issue's grid, the default: every workload, load, profile and engine count (3 × 4 × 2
#: × 2 points × 6 configurations × 3 seeds = 864 runs; hours of CPU on a small machine: run it
#: in pieces, ``--piece``, and render the pieces together with ``--from-json``).
FULL_GRID: Mapping[str, str] = {
    "workloads": ",".join(WORKLOADS),
    "loads": ",".join(f"{x:g}" for x in LOADS),
    "profiles": "a100,h100",
    "engines": "1,4",
}
#: ``--subset``: named parts of the grid. ``ran`` is what docs/benchmarks.md ("Agents")
#: shows: every workload and load on one a100 (216 runs; ~3 s of CPU each on coding and
#: agents, ~1 s on research, on main 2026-12-05: ~10–15 min of CPU, run in pieces with
#: ``--workloads``).
SUBSETS: Mapping[str, Mapping[str, str]] = {
    "full": FULL_GRID,
    "ran": {**FULL_GRID, "profiles": "a100", "engines": "1"},
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="The default is the issue's full grid (3 workloads × 4 loads × 6 configurations "
        "× 2 profiles × 2 engine counts × 3 seeds: 864 runs, hours of CPU); --subset ran is "
        "what docs/benchmarks.md shows (every workload and load on one a100: 216 runs, "
        "~10–20 min of CPU). Split a long grid with --piece "
        "1/3, 2/3, 3/3 (in parallel, each with --json > FILE) and render the pieces together: "
        "--from-json A,B,C --write-docs. See docs/benchmarks.md, 'Agents'.",
    )
    grid = parser.add_argument_group("grid")
    grid.add_argument(
        "--subset",
        choices=tuple(SUBSETS),
        default="full",
        help="the grid's workloads, loads, profiles and engines unless given below: full "
        "(the issue's grid) or ran (what the docs show: every workload and load on one "
        "a100) (default: %(default)s)",
    )
    grid.add_argument(
        "--workloads",
        default=None,
        help=f"comma-separated, of {', '.join(WORKLOADS)} (default: all)",
    )
    grid.add_argument(
        "--loads",
        default=None,
        help=f"fractions of direct's saturation, comma-separated (default: {FULL_GRID['loads']})",
    )
    grid.add_argument(
        "--profiles",
        default=None,
        help="comma-separated, of "
        + ", ".join(f"{k} ({v})" for k, v in PROFILES.items())
        + f" (default: {FULL_GRID['profiles']})",
    )
    grid.add_argument(
        "--engines",
        default=None,
        help=f"engine counts, comma-separated (default: {FULL_GRID['engines']})",
    )
    grid.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
    grid.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help=f"configurations, of {', '.join(ALL_CONFIGS)} (default: {', '.join(CONFIGS)}; "
        "direct always runs: the baseline; oracle and oracle+cpu are clairvoyant bounds)",
    )
    grid.add_argument(
        "--piece",
        default=None,
        metavar="K/N",
        help="run the K-th of N pieces of the grid: every N-th (workload, profile, engines) "
        "setup from the K-th on, whole (direct and the others of a point run together)",
    )
    grid.add_argument(
        "--programs",
        type=int,
        default=30,
        help="size each arrival window for this many measured program arrivals (default 30)",
    )
    grid.add_argument(
        "--duration", type=float, default=None, help="fixed arrival window (s) instead"
    )
    run = parser.add_argument_group("run")
    run.add_argument("--jobs", type=int, default=1, help="simulations at once (default 1)")
    run.add_argument(
        "--calibrate",
        action="store_true",
        help="measure direct's saturation for the grid's workloads, profiles and engines "
        "and print it (the entries of SATURATION) instead of running the grid",
    )
    run.add_argument("--quick", action="store_true", help="smoke run: coding, one seed, small")
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the rows as JSON")
    out.add_argument(
        "--from-json",
        metavar="FILE[,FILE...]",
        help="render saved --json output; several files (runs of different points, e.g. "
        "more loads) are rendered as one section",
    )
    out.add_argument("--write-docs", action="store_true", help="update the docs section")
    out.add_argument(
        "--docs",
        default=str(ROOT / "docs" / "benchmarks.md"),
        help="the markdown file --write-docs updates (default: docs/benchmarks.md)",
    )
    out.add_argument(
        "--heading",
        default="## Agents",
        help="the section --write-docs replaces or appends, e.g. '## Agents: two-hour windows' "
        "for a run with --duration 7200 (default: '## Agents')",
    )
    out.add_argument(
        "--note",
        action="append",
        default=[],
        help="a paragraph to print under the heading, the first in bold (repeatable; with "
        "--from-json, replaces the saved ones)",
    )
    out.add_argument(
        "--date",
        default=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        help="the run's date to quote (default: today, UTC)",
    )
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    # the notes are printed in the section anyway: quote them as "…"
    shown = ["…" if i > 0 and given[i - 1] == "--note" else a for i, a in enumerate(given)]
    args.command = shlex.join([".venv/bin/python", "benchmarks/agents.py", *shown])
    subset = SUBSETS[args.subset]
    for name in ("workloads", "loads", "profiles", "engines"):
        if getattr(args, name) is None:
            setattr(args, name, subset[name])
    if args.quick:
        args.workloads, args.loads, args.seeds, args.programs = "coding", "0.5,1.0", "1", 6
        args.profiles, args.engines = "a100", "1"
    args.workloads = _items(args.workloads, "--workloads", WORKLOADS)
    args.loads = _items(args.loads, "--loads", kind=float)
    args.profiles = _items(args.profiles, "--profiles", tuple(PROFILES))
    args.engines = _items(args.engines, "--engines", kind=int)
    args.seeds = [int(s) for s in _items(args.seeds, "--seeds", kind=int)]
    configs = _items(args.configs, "--configs", ALL_CONFIGS)
    args.configs = ["direct", *[c for c in configs if c != "direct"]]
    if args.programs < 1:
        raise SystemExit("--programs must be >= 1")
    if args.duration is not None and not args.duration > 0:
        raise SystemExit("--duration must be > 0 seconds")
    if args.jobs < 1:
        raise SystemExit("--jobs must be >= 1")
    args.piece = _piece(args.piece)
    return args


def _piece(text: str | None) -> tuple[int, int]:
    """``--piece K/N`` as ``(K, N)`` (``(1, 1)`` when not given); ``SystemExit`` naming it."""
    if text is None:
        return (1, 1)
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SystemExit(f"--piece: {text!r} is not K/N (e.g. 1/3)") from None
    if not 1 <= k <= n:
        raise SystemExit(f"--piece: {text!r} needs 1 <= K <= N")
    return (k, n)


def setups_of(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """The (workload, profile, engines) setups this run covers: the grid's, or with
    ``--piece K/N`` every N-th from the K-th on."""
    every = [(w, p, e) for w in args.workloads for p in args.profiles for e in args.engines]
    k, n = args.piece
    return every[k - 1 :: n]


def merge_saved(
    saved: Sequence[Mapping[str, Any]], configs: Sequence[str]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows and meta of several ``--json`` outputs as one: the rows of every file (a point
    measured twice: the later file's), ordered as :func:`aggregate` orders them, their ratios
    to direct and the best peer-like taken again over the merged rows (a point whose
    configurations came from different files is compared whole); the commands and machine
    loads joined, the simulation times summed, the saturations merged, the seeds united."""
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    for one in saved:
        for row in one["rows"]:
            by_key[(*point_key(row), row["config"])] = row
    rank = {c: i for i, c in enumerate(configs)}
    workloads = {w: i for i, w in enumerate(WORKLOADS)}
    rows = compare(
        [
            by_key[k]
            for k in sorted(
                by_key, key=lambda k: (workloads.get(k[0], 99), *k[:4], rank.get(k[4], 99))
            )
        ]
    )
    metas = [one["meta"] for one in saved]
    saturation = {tuple(s): r for m in metas for s, r in m["saturation"]}
    meta = {
        **metas[0],
        "command": "`; `".join(m["command"] for m in metas),
        "machine": "; ".join(m["machine"] for m in metas),
        "wall_s": sum(m["wall_s"] for m in metas),
        "saturation": [[list(s), r] for s, r in saturation.items()],
        "seeds": sorted({s for m in metas for s in m["seeds"]}),
        "cpu_s": sum(m.get("cpu_s", m["wall_s"]) for m in metas),
    }
    return rows, meta


def main(argv: Sequence[str] | None = None, runner: Runner = run_jobs) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    load_start = machine()
    setups = setups_of(args)
    if args.from_json:
        rows, meta = merge_saved(
            [json.loads(Path(f).read_text()) for f in _items(args.from_json, "--from-json")],
            args.configs,
        )
        if args.note:
            meta["note"] = args.note
    else:
        saturation = dict(SATURATION)
        for setup in setups:
            if args.calibrate or setup not in saturation:
                print(f"calibrating direct's saturation: {setup}", file=sys.stderr)
                saturation[setup], _ = calibrate(
                    *setup,
                    seeds=args.seeds,
                    programs=args.programs,
                    workers=args.jobs,
                    runner=runner,
                )
        if args.calibrate:
            for setup in setups:
                print(f"    {setup!r}: {saturation[setup]:.6g},")
            return 0
        points = measure(grid_jobs(args, saturation), args.jobs, runner)
        rows = compare(aggregate(points, args.configs))
        meta = {
            "command": args.command,
            "date": args.date,
            "seeds": args.seeds,
            "wall_s": time.perf_counter() - started,
            "cpu_s": sum(p.get("cpu_s", p["wall_s"]) for p in points),
            "machine": f"at the start {load_start}; at the end {machine()}",
            "note": args.note,
            "saturation": [[list(s), saturation[s]] for s in setups],
            "programs": args.programs,
            "duration": args.duration,
        }
    meta_view = {**meta, "saturation": [(tuple(s), r) for s, r in meta["saturation"]]}
    section = markdown(rows, meta_view, args.heading)
    print(json.dumps({"meta": meta, "rows": rows}, indent=2) if args.json else section)
    if args.write_docs:
        _report.replace_section(Path(args.docs), args.heading, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
