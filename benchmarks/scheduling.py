"""Scheduling benchmark (issue [controller] item 8): program token latency against load.

For each workload (chatbot, react, mcts, mixed) on one ``a100-llama3-8b`` engine with prefix
caching on, the simulator runs FCFS, MLFQ, PLAS, ATLAS and the clairvoyant SRPT on the *same*
generated programs at several arrival rates, all through the controller's own policy objects
(``controller.scheduling``) and an admission window. The rates are fractions of the workload's
saturation rate, found first by a short FCFS probe (the largest rate on a geometric ladder at
which FCFS still keeps up, see ``simulator.runner.keeps_up``).

Prints a markdown table and, with ``--write-docs``, replaces the "## Scheduling" section of
docs/benchmarks.md and writes docs/img/scheduling.png.

    .venv/bin/python benchmarks/scheduling.py --duration 600 --write-docs
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from simulator.registry import PolicySpec
from simulator.runner import BenchConfig, keeps_up, run_comparison

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ("fcfs", "mlfq", "plas", "atlas", "srpt")
WORKLOADS = ("chatbot", "react", "mcts", "mixed")
LOAD_FACTORS = (0.5, 0.8, 1.0, 1.5)
#: Probe ladder (programs/s) for the FCFS saturation search.
LADDER = (0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0)


def _spec(policy: str, window: int) -> PolicySpec:
    return PolicySpec(policy=policy, admission_window=window)


def find_saturation(workload: str, duration_s: float, seed: int, window: int) -> float:
    """Largest ladder rate at which FCFS keeps up on ``workload``."""
    best = LADDER[0]
    for rate in LADDER:
        bench = BenchConfig(workload=workload, rate_per_s=rate, duration_s=duration_s, seed=seed)
        (outcome,) = run_comparison(bench, [_spec("fcfs", window)])
        if not keeps_up(outcome.summary):
            break
        best = rate
    return best


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
        saturation = known.get(workload) or find_saturation(workload, duration_s, seed, window)
        print(f"[{workload}] saturation ≈ {saturation} programs/s", file=sys.stderr)
        for factor in LOAD_FACTORS:
            bench = BenchConfig(
                workload=workload, rate_per_s=saturation * factor, duration_s=duration_s, seed=seed
            )
            outcomes = run_comparison(bench, [_spec(p, window) for p in POLICIES])
            for outcome in outcomes:
                s = outcome.summary
                rows.append(
                    {
                        "workload": workload,
                        "load": factor,
                        "rate": round(bench.rate_per_s, 4),
                        "policy": s["policy"],
                        "token_latency_mean_s": s["token_latency_s"]["mean"],
                        "token_latency_p95_s": s["token_latency_s"]["p95"],
                        "e2e_mean_s": s["e2e_latency_s"]["mean"],
                        "completed": s["programs_completed"],
                        "throughput": s["throughput_programs_per_s"],
                        "prefix_hit_rate": s["prefix_hit_rate"],
                        "recomputed_prompt_tokens": s["recomputed_prompt_tokens"],
                    }
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
        "a load. Load = arrival rate ÷ the FCFS saturation rate found by a short probe.",
        "",
        f"Command: `{command}` (load average at the end: {os.getloadavg()[0]:.1f} on 2 cores).",
        "",
        "| workload | load | rate/s | " + " | ".join(f"{p} mean / p95" for p in POLICIES) + " |",
        "|---|---|---|" + "---|" * len(POLICIES),
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
            lines.append(f"| {workload} | {load}× | {rate} | " + " | ".join(cells) + " |")
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
    lines += ["", "![token latency against load](img/scheduling.png)", ""]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, workloads: tuple[str, ...]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(workloads), figsize=(4 * len(workloads), 3.4), squeeze=False)
    for ax, workload in zip(axes[0], workloads, strict=True):
        for policy in POLICIES:
            pts = sorted(
                (r["load"], r["token_latency_mean_s"])
                for r in rows
                if r["workload"] == workload and r["policy"] == policy
            )
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=policy)
        ax.set_title(workload)
        ax.set_xlabel("load (× FCFS saturation)")
        ax.set_yscale("log")
    axes[0][0].set_ylabel("mean token latency (s/token)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_docs(section: str) -> None:
    doc = ROOT / "docs" / "benchmarks.md"
    text = doc.read_text()
    start = text.find("## Scheduling\n")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + ("" if end < 0 else text[end + 1 :])
    else:
        text = text.rstrip("\n") + "\n\n" + section
    doc.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="arrival window (sim s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--window", type=int, default=32, help="controller admission window")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument(
        "--saturation",
        action="append",
        default=[],
        metavar="WORKLOAD=RATE",
        help="use this saturation rate instead of probing (e.g. mixed=0.3 from bench sweep)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    workloads = tuple(w for w in args.workloads.split(",") if w)
    known = {k: float(v) for k, v in (item.split("=", 1) for item in args.saturation)}
    rows = run(args.duration, args.seed, args.window, workloads, known)
    command = " ".join([".venv/bin/python", *sys.argv])
    section = markdown(rows, command, workloads)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(section)
    if args.write_docs:
        plot(rows, ROOT / "docs" / "img" / "scheduling.png", workloads)
        write_docs(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
