"""Scheduling benchmark: program token latency against load.

For each workload (chatbot, react, mcts, mixed) on one ``a100-llama3-8b`` engine with prefix
caching on, the simulator runs FCFS, MLFQ, PLAS, ATLAS and the clairvoyant SRPT on the *same*
generated programs at several arrival rates, all through the controller's own policy objects
(``agentrt_controller.scheduling``) and an admission window. The rates are fractions of the
workload's
saturation rate, found first by an FCFS probe (the largest rate at which FCFS still keeps up,
see ``agentrt_sim.runner.keeps_up``: a geometric ladder, then bisection). Each workload gets a
measurement window long enough for its programs: the warm-up is at least twice the p95 program
E2E at light load, and at least 400 programs are measured.

Prints a markdown table and, with ``--write-docs``, replaces the "## Scheduling" section of
docs/benchmarks.md and writes docs/img/scheduling.png. Takes about half an hour on two shared
cores (the probes and 80 simulated runs).

    .venv/bin/python benchmarks/scheduling.py --write-docs
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt_sim.registry import PolicySpec  # noqa: E402
from agentrt_sim.runner import BenchConfig, keeps_up, run_comparison  # noqa: E402
from benchmarks import _report  # noqa: E402

POLICIES = ("fcfs", "mlfq", "plas", "atlas", "srpt")
WORKLOADS = ("chatbot", "react", "mcts", "mixed")
LOAD_FACTORS = (0.5, 0.8, 1.0, 1.5)
#: Probe ladder (programs/s) for the FCFS saturation search.
#: Programs measured (after the warm-up) in each probe run.
MIN_MEASURED = 400
LADDER = (0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0)


def _spec(policy: str, window: int) -> PolicySpec:
    # This benchmark's published figures: round-robin (one engine), no retention.
    return PolicySpec(policy=policy, router="round_robin", retention="off", admission_window=window)


@dataclass(frozen=True)
class Saturation:
    """A workload's FCFS saturation rate and the measurement window that found it."""

    rate: float
    #: Arrival window and warm-up (simulated seconds) long enough for this workload's programs.
    duration_s: float
    warmup_s: float


def measurement_window(
    workload: str, duration_s: float, seed: int, window: int
) -> tuple[float, float]:
    """(duration, warm-up) for ``workload``: the warm-up at least twice the p95 program E2E at
    light load (so the throughput window holds no ramp-up) and the window ≥ 5× the warm-up."""
    bench = BenchConfig(workload=workload, rate_per_s=LADDER[0], duration_s=duration_s, seed=seed)
    (outcome,) = run_comparison(bench, [_spec("fcfs", window)])
    p95 = float(outcome.summary["e2e_latency_s"]["p95"])
    warmup = max(0.1 * duration_s, 2.0 * p95)
    return max(duration_s, 6.0 * warmup), warmup


def probe_duration(duration_s: float, warmup_s: float, rate: float) -> float:
    """Arrival window at ``rate``: at least ``duration_s`` and long enough that about
    :data:`MIN_MEASURED` programs arrive after the warm-up (the keeps-up test compares counts,
    so fewer programs make it a coin toss)."""
    return max(duration_s, warmup_s + MIN_MEASURED / rate)


def find_saturation(workload: str, duration_s: float, seed: int, window: int) -> Saturation:
    """Largest rate at which FCFS keeps up on ``workload`` (``agentrt_sim.runner.keeps_up``):
    up a geometric ladder, then three bisection steps between the last rate that kept up and
    the first that did not."""
    duration, warmup = measurement_window(workload, duration_s, seed, window)

    def ok(rate: float) -> bool:
        bench = BenchConfig(
            workload=workload,
            rate_per_s=rate,
            duration_s=probe_duration(duration, warmup, rate),
            seed=seed,
            warmup_s=warmup,
        )
        (outcome,) = run_comparison(bench, [_spec("fcfs", window)])
        kept = keeps_up(outcome.summary)
        print(
            f"[{workload}] probe {rate:.4g}/s: throughput "
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


def run(
    duration_s: float,
    seed: int,
    window: int,
    workloads: tuple[str, ...],
    known: dict[str, float],
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for workload in workloads:
        t0 = time.perf_counter()
        if workload in known:
            duration, warmup = measurement_window(workload, duration_s, seed, window)
            rate = known[workload]
            found = Saturation(rate, probe_duration(duration, warmup, rate), warmup)
        else:
            found = find_saturation(workload, duration_s, seed, window)
        print(
            f"[{workload}] saturation ≈ {found.rate} programs/s "
            f"(window {found.duration_s:.0f} s, warm-up {found.warmup_s:.0f} s)",
            file=sys.stderr,
        )
        for factor in LOAD_FACTORS:
            bench = BenchConfig(
                workload=workload,
                rate_per_s=found.rate * factor,
                duration_s=found.duration_s,
                seed=seed,
                warmup_s=found.warmup_s,
            )
            outcomes = run_comparison(bench, [_spec(p, window) for p in POLICIES])
            for outcome in outcomes:
                s = outcome.summary
                rows.append(
                    {
                        "workload": workload,
                        "load": factor,
                        "rate": round(bench.rate_per_s, 4),
                        "saturation": found.rate,
                        "duration_s": found.duration_s,
                        "warmup_s": found.warmup_s,
                        "policy": s["policy"],
                        "token_latency_mean_s": s["token_latency_s"]["mean"],
                        "token_latency_p95_s": s["token_latency_s"]["p95"],
                        "e2e_mean_s": s["e2e_latency_s"]["mean"],
                        "completed": s["programs_completed"],
                        "unfinished": s["programs_unfinished"],
                        "throughput": s["throughput_programs_per_s"],
                        "prefix_hit_rate": s["prefix_hit_rate"],
                        "recomputed_prompt_tokens": s["recomputed_prompt_tokens"],
                    }
                )
            print(
                f"[{workload}] load {factor}× done ({time.perf_counter() - t0:.0f} s)",
                file=sys.stderr,
            )
        print(f"[{workload}] done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return rows


def _ratios(rows: list[dict[str, Any]], workload: str, load: float) -> dict[str, float]:
    by = {
        r["policy"]: r["token_latency_mean_s"]
        for r in rows
        if r["workload"] == workload and r["load"] == load
    }
    best = min(by["plas"], by["atlas"])
    return {
        "vs_fcfs": by["fcfs"] / best,
        "vs_mlfq": by["mlfq"] / best,
        "of_srpt": best / by["srpt"],
    }


def markdown(rows: list[dict[str, Any]], command: str, workloads: tuple[str, ...]) -> str:
    lines = [
        "## Scheduling",
        "",
        "`benchmarks/scheduling.py`: program token latency (E2E ÷ generated tokens, seconds per",
        "token; mean and p95) against load on one `a100-llama3-8b` engine, prefix caching on, the",
        "controller's policies behind an admission window, the same programs for every policy at",
        "a load. Load = arrival rate ÷ the workload's FCFS saturation rate: the largest rate at",
        "which FCFS still completes ≥ 90 % of the arriving programs inside the measurement",
        "window (geometric ladder, then three bisection steps; warm-up ≥ 2× the p95 program E2E",
        "at light load so the window holds no ramp-up, ≥ 400 measured programs per probe).",
        "",
        f"Command: `{command}` (simulated time: the figures do not depend on the machine's"
        " load; the same command gives the same numbers).",
        "",
        "| workload | FCFS saturation (programs/s) | arrival window (s) | warm-up (s) |",
        "|---|---|---|---|",
    ]
    for workload in workloads:
        first = next((r for r in rows if r["workload"] == workload), None)
        if first is not None:
            lines.append(
                f"| {workload} | {first['saturation']} | {first['duration_s']:.0f} "
                f"| {first['warmup_s']:.0f} |"
            )
    lines += [
        "",
        "Mean / p95 program token latency (s/token) of the programs that finished; the last",
        "column counts programs still unfinished when the drain ended (as long as the arrival",
        "window), per policy in the same order — they are *not* in the latency figures.",
        "",
        "| workload | load | rate/s | "
        + " | ".join(f"{p} mean / p95" for p in POLICIES)
        + " | unfinished |",
        "|---|---|---|" + "---|" * (len(POLICIES) + 1),
    ]
    for workload in workloads:
        for load in LOAD_FACTORS:
            sel = {r["policy"]: r for r in rows if r["workload"] == workload and r["load"] == load}
            if not sel:
                continue
            cells = [
                f"{sel[p]['token_latency_mean_s']:.3f} / {sel[p]['token_latency_p95_s']:.3f}"
                for p in POLICIES
            ]
            rate = next(iter(sel.values()))["rate"]
            unfinished = " / ".join(str(sel[p]["unfinished"]) for p in POLICIES)
            lines.append(
                f"| {workload} | {load}× | {rate} | " + " | ".join(cells) + f" | {unfinished} |"
            )
    lines += [
        "",
        "Best of PLAS / ATLAS against the baselines (mean token latency; goal near saturation "
        "on mixed: ≥ 2× FCFS, ≥ 1.3× MLFQ, within 1.3× of SRPT):",
        "",
        "| workload | load | FCFS ÷ ours | MLFQ ÷ ours | ours ÷ SRPT |",
        "|---|---|---|---|---|",
    ]
    for workload in workloads:
        for load in LOAD_FACTORS:
            if not any(r["workload"] == workload and r["load"] == load for r in rows):
                continue
            q = _ratios(rows, workload, load)
            lines.append(
                f"| {workload} | {load}× | {q['vs_fcfs']:.2f}× | {q['vs_mlfq']:.2f}× "
                f"| {q['of_srpt']:.2f}× |"
            )
    lines += ["", "![token latency against load](img/scheduling.png)"]
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


def plot(rows: list[dict[str, Any]], path: Path, workloads: tuple[str, ...]) -> None:
    """Mean (top row) and p95 (bottom row) token latency against arrival rate, per workload."""
    fig, axes = _report.subplots(2, len(workloads), (4 * len(workloads), 6.4))
    for column, workload in enumerate(workloads):
        for row, (key, what) in enumerate(
            (("token_latency_mean_s", "mean"), ("token_latency_p95_s", "p95"))
        ):
            ax = axes[row][column]
            for policy in POLICIES:
                pts = sorted(
                    (r["rate"], r[key])
                    for r in rows
                    if r["workload"] == workload and r["policy"] == policy
                )
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=policy, **STYLES[policy])
            sat = next(r["saturation"] for r in rows if r["workload"] == workload)
            ax.axvline(sat, color="grey", linestyle=":", linewidth=1)
            ax.set_yscale("log")
            ax.set_title(f"{workload} — {what}")
            if row == 1:
                ax.set_xlabel("arrival rate (programs/s; dotted: FCFS saturation)")
            if column == 0:
                ax.set_ylabel(f"{what} token latency (s/token)")
    axes[0][-1].legend(fontsize=8)
    _report.save_figure(fig, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration",
        type=float,
        default=600.0,
        help="shortest arrival window (simulated s); lengthened per workload so the warm-up "
        "exceeds its programs' E2E and enough programs are measured (default 600)",
    )
    parser.add_argument("--seed", type=int, default=1, help="programs and arrivals (default 1)")
    parser.add_argument(
        "--window", type=int, default=32, help="controller admission window (default 32)"
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
        metavar="WORKLOAD=RATE",
        help="use this FCFS saturation rate instead of probing (e.g. mixed=0.28)",
    )
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
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help='replace the "## Scheduling" section of docs/benchmarks.md and write '
        "docs/img/scheduling.png",
    )
    args = parser.parse_args()
    workloads = tuple(w for w in args.workloads.split(",") if w)
    known = {k: float(v) for k, v in (item.split("=", 1) for item in args.saturation)}
    if args.from_json is not None:
        rows = json.loads(args.from_json.read_text())
        workloads = tuple(w for w in workloads if any(r["workload"] == w for r in rows))
    else:
        rows = run(args.duration, args.seed, args.window, workloads, known)
    command = args.command or " ".join([".venv/bin/python", *sys.argv])
    section = markdown(rows, command, workloads)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(section)
    if args.write_docs:
        plot(rows, ROOT / "docs" / "img" / "scheduling.png", workloads)
        _report.replace_section(ROOT / "docs" / "benchmarks.md", "## Scheduling", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
