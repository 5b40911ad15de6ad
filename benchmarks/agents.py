"""Agents benchmark: the product defaults, a stock vLLM and peer-like configurations.

Today's coding and research agents on KV-bound simulated engines (issue [agents], item 4).

Workloads ``coding``, ``research`` and ``agents`` (docs/simulator.md, "Coding, research,
agents") at 0.5 / 0.8 / 1.0 / 1.5 × **direct's saturation**: the largest arrival rate at which a
stock vLLM (the ``direct`` configuration) still completes >= 90 % of the offered programs and
leaves <= 1 % unfinished (``agentrt_sim.runner.keeps_up``). The rates are in
:data:`SATURATION`, per workload, profile and engine count, measured by ``--calibrate``
(direct at ``DEFAULT_RATES × engines × CALIBRATION_STEPS``, stopping at the first rate it does
not keep up with); a point missing there is calibrated before the run.

Configurations (``agentrt_sim.peers``; docs/benchmarks.md, "Agents", lists the flags of
each and what of each paper could not be modelled): ``direct`` (stock vLLM), ``direct+cpu``
(with the KV CPU tier), ``continuum``, ``llm-d``, ``thunderagent`` (the peer-like ones) and
``defaults`` (the product with no flags). The same programs for every configuration of a
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt_controller.cost_model import CostModel  # noqa: E402
from agentrt_emulator.core.types import EngineConfig  # noqa: E402
from agentrt_sim.metrics import summarize  # noqa: E402
from agentrt_sim.peers import PEERS, peer  # noqa: E402
from agentrt_sim.plan import compile_program  # noqa: E402
from agentrt_sim.rates import DEFAULT_RATES  # noqa: E402
from agentrt_sim.runner import BenchConfig, keeps_up  # noqa: E402
from agentrt_sim.sim import Simulation  # noqa: E402
from benchmarks import _report  # noqa: E402

WORKLOADS = ("coding", "research", "agents")
LOADS = (0.5, 0.8, 1.0, 1.5)
#: Short profile names -> the simulator's hardware profiles.
PROFILES = {"a100": "a100-llama3-8b", "h100": "h100-llama3-8b"}
CONFIGS = tuple(PEERS)
#: The peer-like configurations ("the best peer-like" is the best of these at a point).
PEER_LIKE = ("continuum", "llm-d", "thunderagent")
#: The goals are judged on these workloads (the issue: "near direct's saturation on coding
#: and agents").
GOAL_WORKLOADS = ("coding", "agents")

#: direct's saturation (programs/s) per (workload, profile, engines): ``--calibrate``'s
#: result (docs/benchmarks.md, "Agents", gives the command and the date).
#: Measured 2026-12-05 on main (seeds 1, 2, 3; 30 measured arrivals per run):
#: ``benchmarks/agents.py --calibrate --workloads coding,agents``; coding kept up at 1.0 ×
#: 0.0075, not at 1.25 ×; agents at 1.0 × 0.02, not at 1.25 × (both as ``agentrt_sim.rates``).
SATURATION: dict[tuple[str, str, int], float] = {
    ("coding", "a100", 1): 0.0075,
    ("agents", "a100", 1): 0.02,
}
#: Multiples of ``DEFAULT_RATES[workload] × engines`` that ``--calibrate`` tries, in order.
CALIBRATION_STEPS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0)

#: The figures of a point (one run); medians and ranges over seeds are taken of each.
KEYS = (
    "mean_s",
    "p95_s",
    "token_mean_s",
    "throughput",
    "completed",
    "unfinished",
    "recomputed",
    "reloaded",
    "preemptions",
    "queue_delay_s",
    "arrival_rate",
)


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
    started = time.perf_counter()
    record = Simulation(plans, config, policies).run(None)
    summary = summarize(record, warmup_s=config.warmup_s, window_end_s=config.window_end_s)
    return {**vars(job), **figures(summary), "wall_s": time.perf_counter() - started}


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
            f"(elapsed {elapsed / 60:.1f} min)",
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
    ``seeds``; the saturation is the last rate at which most seeds kept up, the search stops at
    the first that did not. Raises ``SystemExit`` when direct keeps up with none."""
    base = DEFAULT_RATES[workload] * engines
    saturation: float | None = None
    points: list[dict[str, Any]] = []
    for step in CALIBRATION_STEPS:
        rate = base * step
        duration = duration_for(rate, programs, None)
        jobs = [
            Job(workload, profile, engines, step, rate, duration, seed, "direct") for seed in seeds
        ]
        runs = runner(jobs, workers)
        points += runs
        kept = sum(kept_up(r) for r in runs)
        if 2 * kept <= len(runs):
            break
        saturation = rate
    if saturation is None:
        raise SystemExit(
            f"--calibrate: direct keeps up with no rate tried for {workload} on {profile} "
            f"x{engines} (from {base * CALIBRATION_STEPS[0]:g}/s)"
        )
    return saturation, points


def kept_up(point: Mapping[str, Any]) -> bool:
    """Whether a run kept up with its load (``agentrt_sim.runner.keeps_up`` on its figures)."""
    return keeps_up(
        {
            "rate": point["rate"],
            "arrival_rate_per_s": point["arrival_rate"],
            "throughput_programs_per_s": point["throughput"],
            "programs_completed": point["completed"],
            "programs_unfinished": point["unfinished"],
        }
    )


# --- the grid ------------------------------------------------------------------------------


def grid_jobs(
    args: argparse.Namespace, saturation: Mapping[tuple[str, str, int], float]
) -> list[Job]:
    """Every job of the grid, without Continuum's ``T`` (filled per point from direct)."""
    jobs = []
    for workload in args.workloads:
        for profile in args.profiles:
            for engines in args.engines:
                rate_1 = saturation[(workload, profile, engines)]
                for load in args.loads:
                    rate = rate_1 * load
                    duration = duration_for(rate, args.programs, args.duration)
                    for config in args.configs:
                        for seed in args.seeds:
                            jobs.append(
                                Job(workload, profile, engines, load, rate, duration, seed, config)
                            )
    return jobs


def point_key(row: Mapping[str, Any]) -> tuple[str, str, int, float]:
    return (row["workload"], row["profile"], int(row["engines"]), float(row["load"]))


def measure(jobs: Sequence[Job], workers: int, runner: Runner = run_jobs) -> list[dict[str, Any]]:
    """Run ``jobs``: direct first, then the rest with Continuum's ``T`` taken from direct's
    run of the same point and seed."""
    first = [j for j in jobs if j.config == "direct"]
    points = runner(first, workers)
    delay = {(*point_key(p), p["seed"]): p["queue_delay_s"] for p in points}
    rest = [
        replace(j, queueing_delay_s=delay.get((*point_key(vars(j)), j.seed), 0.0))
        if j.config == "continuum"
        else j
        for j in jobs
        if j.config != "direct"
    ]
    return points + runner(rest, workers)


def aggregate(points: Iterable[Mapping[str, Any]], configs: Sequence[str]) -> list[dict[str, Any]]:
    """One row per point and configuration: per :data:`KEYS` the median over seeds and its
    range (``KEY_min``, ``KEY_max``), ``seeds`` and the summed ``wall_s``; rows ordered by
    workload, profile, engines, load, then ``configs``."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for point in points:
        groups.setdefault((*point_key(point), point["config"]), []).append(point)
    rank = {c: i for i, c in enumerate(configs)}
    workload_rank = {w: i for i, w in enumerate(WORKLOADS)}
    rows = []
    for key in sorted(
        groups,
        key=lambda k: (workload_rank.get(k[0], 99), k[0], k[1], k[2], k[3], rank.get(k[4], 99)),
    ):
        group = groups[key]
        row: dict[str, Any] = {
            "workload": key[0],
            "profile": key[1],
            "engines": key[2],
            "load": key[3],
            "config": key[4],
            "rate": group[0]["rate"],
            "duration_s": group[0]["duration_s"],
            "seeds": sorted(p["seed"] for p in group),
            "wall_s": sum(p["wall_s"] for p in group),
        }
        for name in KEYS:
            values = [float(p[name]) for p in group]
            row[name] = statistics.median(values)
            row[f"{name}_min"], row[f"{name}_max"] = min(values), max(values)
        rows.append(row)
    return rows


def compare(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with ratios (``x ÷ reference``, < 1 = lower) added: ``vs_direct_mean``,
    ``vs_direct_p95``, ``vs_direct_throughput`` and ``vs_best_peer_mean``, plus ``best_peer``
    (the peer-like configuration with the lowest median mean JCT at the point); ``None`` where
    the reference is missing or zero."""
    by_point: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_point.setdefault(point_key(row), {})[row["config"]] = row
    out = []
    for row in rows:
        at = by_point[point_key(row)]
        direct = at.get("direct")
        peers = [at[c] for c in PEER_LIKE if c in at]
        best = min(peers, key=lambda r: r["mean_s"]) if peers else None
        out.append(
            {
                **row,
                "vs_direct_mean": _ratio(row["mean_s"], direct and direct["mean_s"]),
                "vs_direct_p95": _ratio(row["p95_s"], direct and direct["p95_s"]),
                "vs_direct_throughput": _ratio(row["throughput"], direct and direct["throughput"]),
                "best_peer": best["config"] if best else None,
                "vs_best_peer_mean": _ratio(row["mean_s"], best and best["mean_s"]),
            }
        )
    return out


def _ratio(value: float, reference: float | None) -> float | None:
    return value / reference if reference else None


# --- goals ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    """One of the issue's goals at one point: the measured ratio and whether it is met."""

    point: str
    text: str
    ratio: float | None
    met: bool | None  # None: not measured (a configuration or load missing)


#: (load, what, row key, test on the ratio, the bound as the issue words it)
GOALS: tuple[tuple[float, str, str, Callable[[float], bool], str], ...] = (
    (1.0, "mean JCT vs direct", "vs_direct_mean", lambda r: r <= 0.5, "≥ 2× lower (≤ 0.50)"),
    (1.0, "p95 JCT vs direct", "vs_direct_p95", lambda r: r <= 1 / 1.5, "≥ 1.5× lower (≤ 0.67)"),
    (
        1.0,
        "completed/s vs direct",
        "vs_direct_throughput",
        lambda r: r >= 1.0,
        "≥ direct's (≥ 1.00)",
    ),
    (
        1.0,
        "mean JCT vs the best peer-like",
        "vs_best_peer_mean",
        lambda r: r <= 1 / 1.3,
        "≥ 1.3× lower (≤ 0.77)",
    ),
    (
        0.5,
        "mean JCT vs direct at 0.5 load",
        "vs_direct_mean",
        lambda r: r <= 1 / 0.98,
        "no worse than 0.98× (≤ 1.02)",
    ),
)


def goals(rows: Sequence[Mapping[str, Any]]) -> list[Goal]:
    """The issue's goals for ``defaults`` on :data:`GOAL_WORKLOADS`, per profile and engine
    count (``rows`` from :func:`compare`); "near saturation" is load 1.0."""
    defaults = {point_key(r): r for r in rows if r["config"] == "defaults"}
    setups = sorted({(r["workload"], r["profile"], int(r["engines"])) for r in rows})
    out = []
    for workload, profile, engines in setups:
        if workload not in GOAL_WORKLOADS:
            continue
        for load, what, key, test, bound in GOALS:
            row = defaults.get((workload, profile, engines, load))
            ratio = row.get(key) if row else None
            out.append(
                Goal(
                    f"{workload}, {profile} x{engines}, load {load:g}",
                    f"{what} {bound}",
                    ratio,
                    None if ratio is None else bool(test(ratio)),
                )
            )
    return out


# --- the report ----------------------------------------------------------------------------

#: What of each paper the preset could not model (docs/benchmarks.md).
NOT_MODELLED = {
    "direct": "vLLM's own preemption is recompute (v1); swap to CPU is not modelled apart from "
    "the CPU tier of `direct+cpu`.",
    "direct+cpu": "the tier is vLLM's native offloading (LRU, PCIe cost not overlapped with the "
    "forward pass): LMCache's layer-wise pipelining and disk tiers are not modelled.",
    "continuum": "its `T` (recent queueing delay of evicted requests) is not visible to a policy "
    "here: the preset takes direct's mean per-call queueing delay at the same point, with "
    "η = 1; the deadlock guard refuses a pin that would not fit instead of unpinning the latest "
    "pins later; a pin holds the GPU blocks (no CPU offload of pinned KV).",
    "llm-d": "its flow control's saturation detector is stood in for by our adaptive admission "
    "window; its prefix- and load-aware scorers (which decide a session's first pod) by "
    "`autellix`'s least-loaded first placement; no per-pod KV-utilisation threshold.",
    "thunderagent": "its pause/resume of whole programs at tool boundaries, capacity model and "
    "best-fit-decreasing resume across nodes are not modelled: the preset keeps programs on "
    "their engine, orders the queue by program and evicts the shortest context first inside "
    "the engine when memory runs out; its tool-environment management is out of scope.",
    "defaults": "—",
}


def _cell(row: Mapping[str, Any], key: str, fmt: str, scale: float = 1.0) -> str:
    """``median [min–max]`` of ``key`` (a single value when the range is empty)."""
    median = format(row[key] / scale, fmt)
    low, high = format(row[f"{key}_min"] / scale, fmt), format(row[f"{key}_max"] / scale, fmt)
    return median if low == high else f"{median} [{low}–{high}]"


def _r(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def table_rows(rows: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """One markdown row per load and configuration (``rows`` from :func:`compare`)."""
    lines = []
    for r in rows:
        lines.append(
            [
                f"{r['load']:g} ({r['rate']:.4g}/s)",
                f"`{r['config']}`",
                _cell(r, "mean_s", ".0f"),
                _cell(r, "p95_s", ".0f"),
                f"{_r(r['vs_direct_mean'])} / {_r(r['vs_direct_p95'])}",
                _r(r["vs_best_peer_mean"]),
                _cell(r, "token_mean_s", ".3f"),
                _cell(r, "throughput", ".4f"),
                _cell(r, "unfinished", ".0f"),
                f"{_cell(r, 'recomputed', '.1f', 1e6)} / {_cell(r, 'reloaded', '.1f', 1e6)}",
                _cell(r, "preemptions", ".0f"),
            ]
        )
    return lines


HEADER = (
    "load (rate)",
    "config",
    "JCT mean (s)",
    "JCT p95 (s)",
    "÷ direct (mean / p95)",
    "÷ best peer (mean)",
    "token latency (s/token)",
    "completed/s",
    "unfinished",
    "recomputed / reloaded (M tokens)",
    "preemptions",
)


def markdown(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    """The docs section (``## Agents``) for ``rows`` (from :func:`compare`) and the run's
    ``meta`` (``command``, ``date``, ``seeds``, ``wall_s``, ``machine``, ``note``,
    ``saturation``, ``programs``, ``duration``)."""
    lines = [
        "## Agents",
        "",
        "`benchmarks/agents.py` — today's agents (`coding`, `research`, `agents`; "
        "docs/simulator.md) on simulated engines at fractions of **direct's saturation**, "
        "the product defaults against a stock vLLM and peer-like configurations. "
        f"Run {meta['date']}, command: `{meta['command']}`; medians over seeds "
        f"{list(meta['seeds'])} with [min–max] ranges; "
        f"{meta['wall_s'] / 60:.1f} min of simulation on this machine ({meta['machine']}).",
        "",
    ]
    if meta.get("note"):
        lines += [f"**{meta['note']}**", ""]
    lines += [
        "Configurations (`agentrt_sim/peers.py`; each follows its paper's rule as written, "
        "with its authors' recommended settings):",
        "",
    ]
    lines += _report.table(
        ("config", "what", "flags", "what we could not model"),
        (
            [f"`{p.name}`", p.summary, f"`{p.flags}`", NOT_MODELLED.get(p.name, "—")]
            for p in PEERS.values()
        ),
    )
    lines += [
        "",
        "Saturation (programs/s; direct keeps up: completes ≥ 90 % of the offered programs, "
        "≤ 1 % unfinished; `--calibrate` steps through "
        f"{', '.join(f'{s:g}' for s in CALIBRATION_STEPS)} × `agentrt_sim.rates` × engines and "
        "stops at the first rate direct does not keep up with): "
        + "; ".join(f"{w} {p} x{e}: {rate:.4g}" for (w, p, e), rate in meta["saturation"])
        + ".",
        "",
        "Arrival windows: "
        + (
            f"{meta['duration']:g} s"
            if meta.get("duration")
            else f"long enough for {meta['programs']} measured arrivals per run (≥ 300 s)"
        )
        + ", then a drain as long; the first 10 % are warm-up. JCT and token latency cover "
        "the programs that finished (`unfinished` = still running when the drain ended: "
        "where it is large, the means favour whoever left its long programs unfinished). "
        "Ratios `÷` are of medians (< 1: lower); the best peer-like is the lowest median mean "
        "JCT of `continuum`, `llm-d`, `thunderagent` at the point.",
        "",
    ]
    setups = list(dict.fromkeys((r["workload"], r["profile"], r["engines"]) for r in rows))
    for workload, profile, engines in setups:
        mine = [
            r
            for r in rows
            if (r["workload"], r["profile"], r["engines"]) == (workload, profile, engines)
        ]
        lines += [f"**{workload}**, `{PROFILES[profile]}` × {engines}:", ""]
        lines += _report.table(HEADER, table_rows(mine))
        lines.append("")
    marks = goals(rows)
    if marks:
        lines += [
            "Goals (issue [agents]; `defaults` against `direct` and the best peer-like, on "
            "coding and agents; near saturation = load 1.0):",
            "",
        ]
        for goal in marks:
            verdict = {True: "met", False: "NOT met", None: "not measured"}[goal.met]
            lines.append(f"- {goal.point}: {goal.text}: {_r(goal.ratio)} — {verdict}")
        lines.append("")
    lines += [
        "Reproduce: `.venv/bin/python benchmarks/agents.py --write-docs` (the default grid; "
        "`--quick` for a smoke run, `--help` for the grid options).",
        "",
    ]
    return "\n".join(lines)


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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="The full grid (3 workloads × 4 loads × 6 configurations × 2 profiles × 2 "
        "engine counts × 3 seeds) is 864 runs; the default is coding and agents, loads 0.5 "
        "and 1.0, a100, one engine, 3 seeds. See docs/benchmarks.md, 'Agents'.",
    )
    grid = parser.add_argument_group("grid")
    grid.add_argument(
        "--workloads",
        default="coding,agents",
        help=f"comma-separated, of {', '.join(WORKLOADS)} (default: %(default)s)",
    )
    grid.add_argument(
        "--loads",
        default="0.5,1.0",
        help="fractions of direct's saturation, comma-separated (default: %(default)s; the "
        "issue's grid: 0.5,0.8,1.0,1.5)",
    )
    grid.add_argument(
        "--profiles",
        default="a100",
        help="comma-separated, of "
        + ", ".join(f"{k} ({v})" for k, v in PROFILES.items())
        + " (default: %(default)s)",
    )
    grid.add_argument(
        "--engines", default="1", help="engine counts, comma-separated, e.g. 1,4 (default: 1)"
    )
    grid.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
    grid.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help=f"configurations, of {', '.join(CONFIGS)} (direct always runs: the baseline)",
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
    out.add_argument("--from-json", metavar="FILE", help="render saved --json output")
    out.add_argument("--write-docs", action="store_true", help="update the docs section")
    out.add_argument(
        "--docs",
        default=str(ROOT / "docs" / "benchmarks.md"),
        help="the markdown file --write-docs updates (default: docs/benchmarks.md)",
    )
    out.add_argument("--note", default="", help="a line to print in bold under the heading")
    out.add_argument(
        "--date",
        default=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        help="the run's date to quote (default: today, UTC)",
    )
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    args.command = shlex.join([".venv/bin/python", "benchmarks/agents.py", *given])
    if args.quick:
        args.workloads, args.loads, args.seeds, args.programs = "coding", "0.5,1.0", "1", 6
    args.workloads = _items(args.workloads, "--workloads", WORKLOADS)
    args.loads = _items(args.loads, "--loads", kind=float)
    args.profiles = _items(args.profiles, "--profiles", tuple(PROFILES))
    args.engines = _items(args.engines, "--engines", kind=int)
    args.seeds = [int(s) for s in _items(args.seeds, "--seeds", kind=int)]
    configs = _items(args.configs, "--configs", CONFIGS)
    args.configs = ["direct", *[c for c in configs if c != "direct"]]
    if args.programs < 1:
        raise SystemExit("--programs must be >= 1")
    if args.duration is not None and not args.duration > 0:
        raise SystemExit("--duration must be > 0 seconds")
    if args.jobs < 1:
        raise SystemExit("--jobs must be >= 1")
    return args


def main(argv: Sequence[str] | None = None, runner: Runner = run_jobs) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    load_start = machine()
    setups = [(w, p, e) for w in args.workloads for p in args.profiles for e in args.engines]
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        rows, meta = saved["rows"], saved["meta"]
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
            "machine": f"at the start {load_start}; at the end {machine()}",
            "note": args.note,
            "saturation": [[list(s), saturation[s]] for s in setups],
            "programs": args.programs,
            "duration": args.duration,
        }
    meta_view = {**meta, "saturation": [(tuple(s), r) for s, r in meta["saturation"]]}
    section = markdown(rows, meta_view)
    print(json.dumps({"meta": meta, "rows": rows}, indent=2) if args.json else section)
    if args.write_docs:
        _report.replace_section(Path(args.docs), "## Agents", section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
