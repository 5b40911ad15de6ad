"""Scheduling benchmark: program token latency and E2E latency against load.

For each workload (chatbot, react, mcts, mixed) on one ``a100-llama3-8b`` engine with prefix
caching on, the simulator runs FCFS, MLFQ, PLAS, ATLAS and the clairvoyant SRPT on the *same*
generated programs at several arrival rates, all through the controller's own policy objects
(``agentrt_controller.scheduling``). Everything but the policy is the product default
(``agentrt_controller.defaults``, what ``agentrt controller serve`` runs with no flags): the
adaptive admission window, the ``prefix`` router, KV retention on, FCFS engines (priority
passthrough off) and the controller's default cost model charging each call's service.
``--window 32 --router round_robin --retention off --cost roofline`` gives the settings this
benchmark used before those defaults existed.

The rates are fractions of the workload's saturation rate, found first by an FCFS probe (the
largest rate at which FCFS still keeps up, see ``agentrt_sim.runner.keeps_up``: a geometric
ladder, then bisection) unless given (``--saturation mixed=1.5``, or ``--saturation-table``
for the rates of ``agentrt_sim.rates``). Each workload gets a measurement window long enough
for its programs: the warm-up is at least twice the p95 program E2E at light load, and at
least 400 programs are measured — or exactly ``--duration`` / ``--warmup`` when ``--warmup``
is given. ``--max-num-seqs 256,8`` repeats everything on an engine with 8 batch slots, where
the batch binds and the controller's order decides who runs.

Prints a markdown table and, with ``--write-docs``, replaces the "## Scheduling" section of
docs/benchmarks.md and writes docs/img/scheduling.png.

    .venv/bin/python benchmarks/scheduling.py --write-docs
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt_controller import defaults  # noqa: E402
from agentrt_controller.cost_model import CostFunction  # noqa: E402
from agentrt_emulator.core.types import EngineConfig  # noqa: E402
from agentrt_sim.rates import DEFAULT_RATES  # noqa: E402
from agentrt_sim.registry import PolicySpec, parse_window  # noqa: E402
from agentrt_sim.runner import BenchConfig, keeps_up, run_comparison  # noqa: E402
from benchmarks import _report  # noqa: E402

POLICIES = ("fcfs", "mlfq", "plas", "atlas", "srpt")
WORKLOADS = ("chatbot", "react", "mcts", "mixed")
LOAD_FACTORS = (0.5, 0.8, 1.0, 1.5)
#: Programs measured (after the warm-up) in each probe run.
MIN_MEASURED = 400
#: Probe ladder (programs/s) for the FCFS saturation search.
LADDER = (
    0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0,
    6.0, 8.0, 12.0, 16.0, 24.0, 32.0,
)  # fmt: skip


@dataclass(frozen=True)
class Setup:
    """What every policy of a run shares: the product defaults unless told otherwise."""

    #: Controller admission window per engine: calls, ``"adaptive"`` or ``None`` (unlimited).
    window: int | str | None = defaults.ADMISSION_WINDOW
    #: Router name (one engine: it only decides retention's binding and the prefix index).
    router: str = defaults.ROUTER
    #: KV retention during tool waits: ``on`` / ``off`` / a retention name.
    retention: str = defaults.RETENTION
    #: Charged service: one of ``_report.COSTS``.
    cost: str = "controller"
    #: Engine batch slots (vLLM ``--max-num-seqs``).
    max_num_seqs: int = 256

    def spec(self, policy: str) -> PolicySpec:
        return PolicySpec(
            policy=policy,
            router=self.router,
            retention=self.retention,
            admission_window=self.window,
        )

    def cost_function(self) -> CostFunction | None:
        """The simulator's cost function (``None``: the profile's roofline)."""
        return _report.cost_function(self.cost)

    def bench(
        self, workload: str, rate: float, duration_s: float, seed: int, warmup_s: float | None
    ) -> BenchConfig:
        engine = replace(EngineConfig(max_model_len=131072), max_num_seqs=self.max_num_seqs)
        return BenchConfig(
            workload=workload,
            rate_per_s=rate,
            duration_s=duration_s,
            seed=seed,
            warmup_s=warmup_s,
            engine=engine,
        )

    def describe(self) -> str:
        """The shared configuration in the controller's start-up words."""
        text = defaults.describe(
            policy="<varies>",
            admission_window=self.window,
            router=self.router,
            retention=self.retention,
            priority="off",
        )
        return f"{text} cost={self.cost}"  # the batch slots are a column of the tables


def simulate(bench: BenchConfig, setup: Setup, policies: Sequence[str]) -> list[Any]:
    """``run_comparison`` of ``policies`` under ``setup`` on ``bench``'s programs."""
    specs = [setup.spec(p) for p in policies]
    return run_comparison(bench, specs, cost_model=setup.cost_function())


@dataclass(frozen=True)
class Saturation:
    """A workload's FCFS saturation rate and the measurement window that found it."""

    rate: float
    #: Arrival window and warm-up (simulated seconds) long enough for this workload's programs.
    duration_s: float
    warmup_s: float
    #: ``probed`` (found by :func:`find_saturation`) or ``given`` (``--saturation``, a table).
    source: str = "probed"


def measurement_window(
    workload: str, duration_s: float, seed: int, setup: Setup
) -> tuple[float, float]:
    """(duration, warm-up) for ``workload``: the warm-up at least twice the p95 program E2E at
    light load (so the throughput window holds no ramp-up) and the window ≥ 6× the warm-up."""
    bench = setup.bench(workload, LADDER[0], duration_s, seed, None)
    (outcome,) = simulate(bench, setup, ["fcfs"])
    p95 = float(outcome.summary["e2e_latency_s"]["p95"])
    warmup = max(0.1 * duration_s, 2.0 * p95)
    return max(duration_s, 6.0 * warmup), warmup


def probe_duration(duration_s: float, warmup_s: float, rate: float) -> float:
    """Arrival window at ``rate``: at least ``duration_s`` and long enough that about
    :data:`MIN_MEASURED` programs arrive after the warm-up (the keeps-up test compares counts,
    so fewer programs make it a coin toss)."""
    return max(duration_s, warmup_s + MIN_MEASURED / rate)


def find_saturation(workload: str, duration_s: float, seed: int, setup: Setup) -> Saturation:
    """Largest rate at which FCFS keeps up on ``workload`` (``agentrt_sim.runner.keeps_up``):
    up a geometric ladder, then three bisection steps between the last rate that kept up and
    the first that did not."""
    duration, warmup = measurement_window(workload, duration_s, seed, setup)

    def ok(rate: float) -> bool:
        bench = setup.bench(
            workload, rate, probe_duration(duration, warmup, rate), seed, warmup_s=warmup
        )
        (outcome,) = simulate(bench, setup, ["fcfs"])
        kept = keeps_up(outcome.summary)
        print(
            f"[{workload} @{setup.max_num_seqs}] probe {rate:.4g}/s: throughput "
            f"{outcome.summary['throughput_programs_per_s']:.4g}/s of "
            f"{outcome.summary['arrival_rate_per_s']:.4g}/s arriving → "
            f"{'kept up' if kept else 'fell behind'}",
            file=sys.stderr,
        )
        return kept

    good, bad = LADDER[0], None
    for rate in LADDER[1:]:
        if not ok(rate):
            bad = rate
            break
        good = rate
    if bad is not None:
        for _ in range(3):
            mid = round((good + bad) / 2, 4)
            if ok(mid):
                good = mid
            else:
                bad = mid
    return Saturation(good, probe_duration(duration, warmup, good), warmup)


@dataclass(frozen=True)
class Job:
    """One simulated run: a policy at a load."""

    workload: str
    setup: Setup
    found: Saturation
    load: float
    policy: str
    seed: int


def run_job(job: Job) -> dict[str, Any]:
    """Simulate ``job``; its row of the results."""
    found = job.found
    bench = job.setup.bench(
        job.workload, found.rate * job.load, found.duration_s, job.seed, found.warmup_s
    )
    started = time.perf_counter()
    (outcome,) = simulate(bench, job.setup, [job.policy])
    s = outcome.summary
    return {
        "workload": job.workload,
        "slots": job.setup.max_num_seqs,
        "load": job.load,
        "rate": round(bench.rate_per_s, 4),
        "saturation": found.rate,
        "saturation_source": found.source,
        "duration_s": found.duration_s,
        "warmup_s": found.warmup_s,
        "policy": s["policy"],
        "token_latency_mean_s": s["token_latency_s"]["mean"],
        "token_latency_p95_s": s["token_latency_s"]["p95"],
        "e2e_mean_s": s["e2e_latency_s"]["mean"],
        "e2e_p95_s": s["e2e_latency_s"]["p95"],
        "completed": s["programs_completed"],
        "unfinished": s["programs_unfinished"],
        "throughput": s["throughput_programs_per_s"],
        "arrival_rate": s["arrival_rate_per_s"],
        "prefix_hit_rate": s["prefix_hit_rate"],
        "recomputed_prompt_tokens": s["recomputed_prompt_tokens"],
        "wall_s": time.perf_counter() - started,
    }


def saturations(
    workloads: Sequence[str],
    setups: Sequence[Setup],
    duration_s: float,
    seed: int,
    known: dict[tuple[str, int | None], float],
    warmup_s: float | None,
) -> list[tuple[str, Setup, Saturation]]:
    """Per workload and engine: the saturation (given or probed) and its measurement window.
    ``known`` maps ``(workload, slots)`` — slots ``None`` for any engine — to a rate; with
    ``warmup_s`` the window is exactly ``duration_s`` with that warm-up."""
    out = []
    for setup in setups:
        for workload in workloads:
            rate = known.get((workload, setup.max_num_seqs), known.get((workload, None)))
            if rate is not None and warmup_s is not None:
                found = Saturation(rate, duration_s, warmup_s, "given")
            elif rate is not None:
                duration, warmup = measurement_window(workload, duration_s, seed, setup)
                found = Saturation(rate, probe_duration(duration, warmup, rate), warmup, "given")
            else:
                found = find_saturation(workload, duration_s, seed, setup)
                if warmup_s is not None:
                    found = replace(found, duration_s=duration_s, warmup_s=warmup_s)
            print(
                f"[{workload} @{setup.max_num_seqs}] saturation ≈ {found.rate} programs/s "
                f"({found.source}; window {found.duration_s:.0f} s, warm-up "
                f"{found.warmup_s:.0f} s)",
                file=sys.stderr,
            )
            out.append((workload, setup, found))
    return out


def run(
    found: Sequence[tuple[str, Setup, Saturation]],
    seed: int,
    loads: Sequence[float],
    jobs: int,
) -> list[dict[str, Any]]:
    """Every policy at every load of every ``found`` saturation; rows in that order."""
    todo = [
        Job(workload, setup, sat, load, policy, seed)
        for workload, setup, sat in found
        for load in loads
        for policy in POLICIES
    ]
    # The longest runs first, so that the workers finish together.
    order = sorted(
        range(len(todo)),
        key=lambda i: -todo[i].found.rate * todo[i].load * todo[i].found.duration_s,
    )
    rows: list[dict[str, Any] | None] = [None] * len(todo)
    started = time.perf_counter()

    def done(index: int, row: dict[str, Any]) -> None:
        rows[index] = row
        print(
            f"[{row['workload']} @{row['slots']}] {row['load']}× {row['policy']}: "
            f"{row['token_latency_mean_s']:.4f} s/token, E2E {row['e2e_mean_s']:.1f} s, "
            f"{row['wall_s']:.0f} s ({time.perf_counter() - started:.0f} s total)",
            file=sys.stderr,
            flush=True,
        )

    if jobs <= 1:
        for index in order:
            done(index, run_job(todo[index]))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for index, row in zip(order, pool.map(run_job, [todo[i] for i in order]), strict=True):
                done(index, row)
    return [row for row in rows if row is not None]


def _slots(row: dict[str, Any]) -> int:
    return int(row.get("slots", 256))  # rows saved before the batch size was a lever


def groups(rows: Sequence[dict[str, Any]]) -> list[tuple[str, int]]:
    """The (workload, batch slots) pairs of ``rows``, in their order."""
    return list(dict.fromkeys((r["workload"], _slots(r)) for r in rows))


def _at(
    rows: Sequence[dict[str, Any]], workload: str, slots: int, load: float
) -> dict[str, dict[str, Any]]:
    return {
        r["policy"]: r
        for r in rows
        if r["workload"] == workload and _slots(r) == slots and r["load"] == load
    }


def _ratio(numerator: float | None, denominator: float | None) -> str:
    if not numerator or not denominator:
        return "—"
    return f"{numerator / denominator:.2f}×"


def _ratios(by: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Best of PLAS / ATLAS (mean token latency) against FCFS, MLFQ and SRPT; PLAS (the
    default) against FCFS in E2E mean and p95."""
    token = {p: r["token_latency_mean_s"] for p, r in by.items()}
    best = min(token["plas"], token["atlas"])
    plas, fcfs = by["plas"], by["fcfs"]
    return {
        "vs_fcfs": _ratio(token["fcfs"], best),
        "vs_mlfq": _ratio(token["mlfq"], best),
        "of_srpt": _ratio(best, token["srpt"]),
        "e2e": f"{_ratio(fcfs.get('e2e_mean_s'), plas.get('e2e_mean_s'))} / "
        f"{_ratio(fcfs.get('e2e_p95_s'), plas.get('e2e_p95_s'))}",
        "throughput": _ratio(plas.get("throughput"), fcfs.get("throughput")),
    }


def _num(value: Any, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def markdown(
    rows: list[dict[str, Any]], command: str, setup_text: str, date: str, loads: Sequence[float]
) -> str:
    lines = [
        "## Scheduling",
        "",
        "`benchmarks/scheduling.py`: FCFS, MLFQ, PLAS, ATLAS and the clairvoyant SRPT on the",
        "same programs at each load, on one `a100-llama3-8b` engine with prefix caching on,",
        "everything else the product defaults (the policy is the only lever):",
        f"`{setup_text}`. Load = arrival rate ÷ the workload's FCFS saturation rate (the largest",
        "rate at which FCFS completes ≥ 90 % of the arriving programs inside the measurement",
        "window; probed by a geometric ladder and three bisection steps, or given).",
        "Token latency = a program's E2E ÷ its generated tokens (the Autellix metric, arXiv",
        "2502.13965); E2E = arrival to last token.",
        "",
        f"Run {date}. Command: `{command}` (simulated time: the figures do not depend on the "
        "machine's load; the same command gives the same numbers).",
        "",
        "| workload | batch slots | saturation (programs/s) | arrival window (s) | warm-up (s) |",
        "|---|---|---|---|---|",
    ]
    for workload, slots in groups(rows):
        first = next(r for r in rows if r["workload"] == workload and _slots(r) == slots)
        source = first.get("saturation_source", "probed")
        lines.append(
            f"| {workload} | {slots} | {first['saturation']} ({source}) "
            f"| {first['duration_s']:.0f} | {first['warmup_s']:.0f} |"
        )
    lines += [
        "",
        "Per policy: mean / p95 token latency (s/token) and mean / p95 E2E (s) of the programs",
        "that finished, each with its ratio to FCFS at the same load (< 1: faster than FCFS);",
        "completed programs/s inside the window (of the programs/s that arrived); programs",
        "still unfinished when the drain (as long as the arrival window) ended — they are",
        "*not* in the latency figures, so a policy that leaves long programs unfinished looks",
        "better than it is.",
        "",
        "| workload | slots | load | rate/s | policy | token mean / p95 | ÷ FCFS "
        "| E2E mean / p95 (s) | ÷ FCFS (mean / p95) | completed/s (arrived/s) | unfinished |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workload, slots in groups(rows):
        for load in loads:
            by = _at(rows, workload, slots, load)
            if not by:
                continue
            fcfs = by.get("fcfs", {})
            for policy in POLICIES:
                r = by.get(policy)
                if r is None:
                    continue
                lines.append(
                    f"| {workload} | {slots} | {load}× | {r['rate']} | {policy} "
                    f"| {r['token_latency_mean_s']:.4f} / {r['token_latency_p95_s']:.4f} "
                    f"| {_ratio(r['token_latency_mean_s'], fcfs.get('token_latency_mean_s'))} "
                    f"| {_num(r.get('e2e_mean_s'), '.1f')} / {_num(r.get('e2e_p95_s'), '.1f')} "
                    f"| {_ratio(r.get('e2e_mean_s'), fcfs.get('e2e_mean_s'))} / "
                    f"{_ratio(r.get('e2e_p95_s'), fcfs.get('e2e_p95_s'))} "
                    f"| {_num(r.get('throughput'), '.3f')} ({_num(r.get('arrival_rate'), '.3f')}) "
                    f"| {r['unfinished']} |"
                )
    lines += [
        "",
        "Summary (> 1: ours better): best of PLAS / ATLAS against the baselines in mean token",
        "latency (goal near saturation on mixed: ≥ 2× FCFS, ≥ 1.3× MLFQ, within 1.3× of SRPT);",
        "PLAS (the default) against FCFS in E2E mean / p95 and in completed throughput:",
        "",
        "| workload | slots | load | FCFS ÷ ours | MLFQ ÷ ours | ours ÷ SRPT "
        "| FCFS ÷ PLAS, E2E mean / p95 | PLAS ÷ FCFS, completed/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for workload, slots in groups(rows):
        for load in loads:
            by = _at(rows, workload, slots, load)
            if not all(p in by for p in POLICIES):
                continue
            q = _ratios(by)
            lines.append(
                f"| {workload} | {slots} | {load}× | {q['vs_fcfs']} | {q['vs_mlfq']} "
                f"| {q['of_srpt']} | {q['e2e']} | {q['throughput']} |"
            )
    lines += [
        "",
        "![token latency and E2E against load](img/scheduling.png)",
        "",
        "What these figures say, and what changed since the previous run: docs/scheduling.md,",
        '"Scheduling benchmark (latest results)".',
    ]
    return "\n".join(lines)


#: Line styles that keep coinciding curves visible (MLFQ equals FCFS at a proxy, PLAS often
#: equals ATLAS): dashed over solid, smaller markers on top.
STYLES: dict[str, dict[str, Any]] = {
    "fcfs": {"marker": "o", "markersize": 7, "linestyle": "-"},
    "mlfq": {"marker": "x", "markersize": 6, "linestyle": "--"},
    "plas": {"marker": "s", "markersize": 6, "linestyle": "-"},
    "atlas": {"marker": "+", "markersize": 8, "linestyle": "--"},
    "srpt": {"marker": "D", "markersize": 4, "linestyle": ":"},
}


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Mean token latency (top row) and mean E2E (bottom row) against arrival rate, per
    workload and engine."""
    pairs = groups(rows)
    fig, axes = _report.subplots(2, len(pairs), (4 * len(pairs), 6.4))
    for column, (workload, slots) in enumerate(pairs):
        mine = [r for r in rows if r["workload"] == workload and _slots(r) == slots]
        for row, (key, what) in enumerate(
            (
                ("token_latency_mean_s", "mean token latency (s/token)"),
                ("e2e_mean_s", "mean E2E (s)"),
            )
        ):
            ax = axes[row][column]
            for policy in POLICIES:
                pts = sorted(
                    (r["rate"], r[key]) for r in mine if r["policy"] == policy and key in r
                )
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=policy, **STYLES[policy])
            ax.axvline(mine[0]["saturation"], color="grey", linestyle=":", linewidth=1)
            ax.set_yscale("log")
            ax.set_title(f"{workload}, {slots} slots")
            if row == 1:
                ax.set_xlabel("arrival rate (programs/s; dotted: FCFS saturation)")
            if column == 0:
                ax.set_ylabel(what)
    axes[0][-1].legend(fontsize=8)
    _report.save_figure(fig, path)


def _known(items: Sequence[str], table: bool) -> dict[tuple[str, int | None], float]:
    """``WORKLOAD=RATE`` / ``WORKLOAD@SLOTS=RATE`` items (after the rates table with
    ``table``)."""
    known: dict[tuple[str, int | None], float] = (
        {(w, None): r for w, r in DEFAULT_RATES.items()} if table else {}
    )
    for item in items:
        key, _, value = item.partition("=")
        workload, _, slots = key.partition("@")
        if not value:
            raise SystemExit(f"--saturation {item!r}: expected WORKLOAD[@SLOTS]=RATE")
        known[workload.strip(), int(slots) if slots else None] = float(value)
    return known


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration",
        type=float,
        default=600.0,
        help="shortest arrival window (simulated s); lengthened per workload so the warm-up "
        "exceeds its programs' E2E and enough programs are measured, unless --warmup is given "
        "(default 600)",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="warm-up (simulated s): use exactly --duration and this warm-up for every run",
    )
    parser.add_argument("--seed", type=int, default=1, help="programs and arrivals (default 1)")
    parser.add_argument(
        "--window",
        type=parse_window,
        default=defaults.ADMISSION_WINDOW,
        help=f"controller admission window: N, adaptive or unlimited (default "
        f"{defaults.ADMISSION_WINDOW}, the product default)",
    )
    parser.add_argument("--router", default=defaults.ROUTER, help="(default: %(default)s)")
    parser.add_argument("--retention", default=defaults.RETENTION, help="(default: %(default)s)")
    _report.add_cost_option(parser)
    parser.add_argument(
        "--max-num-seqs",
        default="256",
        help="engine batch slots, comma-separated for several engines (e.g. 256,8; default 256)",
    )
    parser.add_argument(
        "--loads",
        default=",".join(str(f) for f in LOAD_FACTORS),
        help="load factors (× saturation), comma-separated (default %(default)s)",
    )
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help=f"comma-separated (default {','.join(WORKLOADS)})",
    )
    parser.add_argument(
        "--saturation",
        action="append",
        default=[],
        metavar="WORKLOAD[@SLOTS]=RATE",
        help="use this FCFS saturation rate instead of probing (e.g. mixed=1.5, mixed@8=0.4)",
    )
    parser.add_argument(
        "--saturation-table",
        action="store_true",
        help="take the saturation rates of agentrt_sim.rates (FCFS, 256 slots) unless "
        "--saturation says otherwise",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="FILE",
        help="render the rows a --json run printed instead of simulating again",
    )
    parser.add_argument(
        "--command",
        help="the command to quote in the markdown (default: this one; with --from-json, "
        "pass the command that produced FILE)",
    )
    _report.add_date_option(parser)
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help='replace the "## Scheduling" section of docs/benchmarks.md and write '
        "docs/img/scheduling.png",
    )
    args = parser.parse_args()
    workloads = tuple(w for w in args.workloads.split(",") if w)
    loads = tuple(float(f) for f in args.loads.split(",") if f.strip())
    setups = [
        Setup(args.window, args.router, args.retention, args.cost, int(slots))
        for slots in args.max_num_seqs.split(",")
        if slots.strip()
    ]
    if args.from_json is not None:
        rows = json.loads(args.from_json.read_text())
        rows = [r for r in rows if r["workload"] in workloads]
        loads = tuple(f for f in loads if any(r["load"] == f for r in rows)) or tuple(
            dict.fromkeys(r["load"] for r in rows)
        )
    else:
        known = _known(args.saturation, args.saturation_table)
        found = saturations(workloads, setups, args.duration, args.seed, known, args.warmup)
        rows = run(found, args.seed, loads, args.jobs)
    command = args.command or " ".join([".venv/bin/python", *sys.argv])
    section = markdown(rows, command, setups[0].describe(), args.date, loads)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(section)
    if args.write_docs:
        plot(rows, ROOT / "docs" / "img" / "scheduling.png")
        _report.replace_section(ROOT / "docs" / "benchmarks.md", "## Scheduling", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
