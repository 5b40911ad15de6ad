"""Routing benchmark: four engines, four routers, same programs.

For each workload the same programs (same seed, same arrival process) are replayed under each
router — ``round_robin``, ``least_loaded``, ``autellix`` and our ``prefix`` — on 4 simulated
A100 engines (Llama-3.1-8B); everything but the router is the product default
(``agentrt_controller.defaults``: PLAS, the adaptive admission window, KV retention on, FCFS
engines, the controller's default cost model charging the service), so routing alone differs.
``--policy fcfs --window unlimited --retention off --cost roofline`` gives the settings this
benchmark used before those defaults existed. Each router climbs a ladder of arrival rates
``r0 · step^k`` until its p50 program E2E latency passes the target
``L = latency_factor × p50 of round_robin at r0`` (light load).

Reported per workload and router:

* **throughput at equal latency**: the highest completed-program throughput at which the p50
  E2E latency is at most ``L`` (the best rung under ``L``, or the linear interpolation where
  p50 crosses ``L`` if higher; ``≥ x`` when the router never reached ``L`` on the ladder, a
  lower bound);
* the ratios to round_robin and to autellix;
* at the highest rung every router ran: mean token latency (E2E ÷ generated tokens), E2E
  mean / p95, completed throughput, unfinished programs, each against round_robin, and the
  prefix-cache hit rate.

Workloads: ``chatbot``, ``react``, ``mixed`` (the simulator's, after the workloads Autellix
measured, arXiv 2502.13965) and ``sysprompt``:
chat programs that all share a 3,000-token system prompt (so every call is "long" for
Autellix's 2,048-token threshold) plus 4 % very large programs (a 24,000-token document, ~20
turns) — where a fixed threshold pins every program and cannot move a small one off an engine
that large programs made hot.

Run (from the repository root)::

    .venv/bin/python benchmarks/routing.py --quick              # smoke: seconds
    .venv/bin/python benchmarks/routing.py --write-docs         # docs/benchmarks.md + PNG
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt_controller import defaults  # noqa: E402
from agentrt_sim.plan import compile_program  # noqa: E402
from agentrt_sim.registry import PolicySpec, parse_window  # noqa: E402
from agentrt_sim.runner import BenchConfig, run_one  # noqa: E402
from agentrt_sim.workloads.chatbot import ChatbotParams, ChatbotWorkload  # noqa: E402
from agentrt_sim.workloads.program import Program  # noqa: E402
from benchmarks import _report  # noqa: E402

ROUTERS = ("round_robin", "least_loaded", "autellix", "prefix")
ENGINES = 4

#: Per workload: the first rung (programs/s) and the ladder's step. The first rung is about
#: 0.6 × four engines' FCFS saturation (``agentrt_sim.rates``: chatbot 3.5, react 16, mixed 1.5
#: per engine under the engine prompt calibration); sysprompt re-sends its history (``fresh``).
LADDERS: dict[str, tuple[float, float]] = {
    "chatbot": (8.0, 1.35),
    "react": (38.0, 1.35),
    "mixed": (3.6, 1.35),
    "sysprompt": (1.5, 1.35),
}


@dataclasses.dataclass(frozen=True)
class Setup:
    """What every router shares: the product defaults unless told otherwise."""

    #: Scheduler name.
    policy: str = defaults.POLICY
    #: Controller admission window per engine: calls, ``"adaptive"`` or ``None`` (unlimited).
    window: int | str | None = defaults.ADMISSION_WINDOW
    #: KV retention during tool waits: ``on`` / ``off`` / a retention name.
    retention: str = defaults.RETENTION
    #: Charged service: one of ``_report.COSTS``.
    cost: str = "controller"

    def describe(self) -> str:
        """The shared configuration in the controller's start-up words."""
        text = defaults.describe(
            policy=self.policy,
            admission_window=self.window,
            router="<varies>",
            retention=self.retention,
            priority="off",
        )
        return f"{text} cost={self.cost}"


def sysprompt_programs(rate: float, duration_s: float, seed: int) -> list[Program]:
    """Chat programs sharing a 3,000-token system prompt, 4 % of them with a 24,000-token
    document as their first message and ~20 turns (Poisson arrivals)."""
    system = 3000
    small = ChatbotWorkload(
        ChatbotParams(
            prompt_calibration="fresh",  # conversations re-send their history (docs/simulator.md)
            system_prompt_tokens=system,
            prompt_tokens_mean=256 + system / 6.66,
        )
    )
    large = ChatbotWorkload(
        ChatbotParams(
            prompt_calibration="fresh",
            system_prompt_tokens=system,
            calls_mean=20.0,
            prompt_tokens_mean=256 + system / 20,
        )
    )
    rng = random.Random(seed)
    programs: list[Program] = []
    now = rng.expovariate(rate)
    while now < duration_s:
        index = len(programs)
        if rng.random() < 0.04:
            program = large.draw(rng, f"large-{index:07d}", now)
            program = dataclasses.replace(program, root_prompt_tokens=24_000, kind="large")
        else:
            program = small.draw(rng, f"small-{index:07d}", now)
            program = dataclasses.replace(program, kind="small")
        programs.append(dataclasses.replace(program, system_prompt_id="sys3k"))
        now += rng.expovariate(rate)
    return programs


def _bench(workload: str, rate: float, duration_s: float, seed: int) -> BenchConfig:
    return BenchConfig(
        workload="chatbot" if workload == "sysprompt" else workload,
        rate_per_s=rate,
        duration_s=duration_s,
        seed=seed,
        engines=ENGINES,
    )


def run_point(job: tuple[str, str, float, float, int, Setup]) -> dict[str, Any]:
    """One simulation: ``(workload, router, rate, duration_s, seed, setup)`` → summary."""
    workload, router, rate, duration_s, seed, setup = job
    bench = _bench(workload, rate, duration_s, seed)
    if workload == "sysprompt":
        programs = sysprompt_programs(rate, duration_s, seed)
    else:
        programs = bench.programs()
    plans = [compile_program(p) for p in programs]
    started = time.perf_counter()
    spec = PolicySpec(setup.policy, router, setup.retention, setup.window)
    cost = _report.cost_function(setup.cost)
    outcome = run_one(plans, bench, spec, cost_model=cost)
    summary = outcome.summary
    return {
        "workload": workload,
        "router": router,
        "rate": rate,
        "seed": seed,
        "throughput": summary["throughput_programs_per_s"],
        "p50_s": summary["e2e_latency_s"]["p50"],
        "mean_s": summary["e2e_latency_s"]["mean"],
        "p95_s": summary["e2e_latency_s"]["p95"],
        "token_mean_s": summary["token_latency_s"]["mean"],
        "hit_rate": summary["prefix_hit_rate"],
        "recomputed": summary["recomputed_prompt_tokens"],
        "unfinished": summary["programs_unfinished"],
        "wall_s": time.perf_counter() - started,
    }


#: The figures of a rung (medians over seeds).
POINT_KEYS = (
    "throughput",
    "p50_s",
    "mean_s",
    "p95_s",
    "token_mean_s",
    "unfinished",
    "hit_rate",
    "recomputed",
)


def crossing(points: Sequence[dict[str, Any]], target_s: float) -> tuple[float, bool]:
    """The highest completed throughput with p50 <= ``target_s``: the best rung under the
    target, or the interpolation where p50 crosses it if that is higher (past saturation the
    completed throughput falls again, so the crossing alone can understate). Returns it and
    whether the target was crossed (``False``: a lower bound, the ladder ended first)."""
    ordered = sorted(points, key=lambda p: p["rate"])
    best = max((p["throughput"] for p in ordered if p["p50_s"] <= target_s), default=0.0)
    previous = None
    for point in ordered:
        if point["p50_s"] > target_s:
            if previous is None:
                return best, True
            span = point["p50_s"] - previous["p50_s"]
            share = (target_s - previous["p50_s"]) / span if span > 0 else 0.0
            at = previous["throughput"] + share * (point["throughput"] - previous["throughput"])
            return max(best, at), True
        previous = point
    return best, False


def climb(
    workload: str, routers: Sequence[str], args: argparse.Namespace, pool: ProcessPoolExecutor
) -> dict[str, Any]:
    """Run every router up the rate ladder until it passes the latency target."""
    first, step = LADDERS[workload]
    rungs = [round(first * step**k, 3) for k in range(args.rungs)]
    results: dict[str, list[dict[str, Any]]] = {r: [] for r in routers}
    active = list(routers)
    target = None
    for rate in rungs:
        if not active:
            break
        jobs = [
            (workload, r, rate, args.duration, s, args.setup) for r in active for s in args.seeds
        ]
        by_router: dict[str, list[dict[str, Any]]] = {r: [] for r in active}
        for point in pool.map(run_point, jobs):
            by_router[point["router"]].append(point)
        for router, points in by_router.items():
            keys = POINT_KEYS
            results[router].append({"rate": rate, **_report.medians(points, keys)})
        if target is None:
            base = results["round_robin"][0]["p50_s"] if "round_robin" in results else None
            target = args.latency_factor * (base or max(r[0]["p50_s"] for r in results.values()))
        active = [r for r in active if results[r][-1]["p50_s"] <= target]
        print(
            f"  {workload} @ {rate:g}/s: "
            + ", ".join(f"{r} p50={results[r][-1]['p50_s']:.1f}s" for r in by_router),
            file=sys.stderr,
            flush=True,
        )
    assert target is not None
    common = min(len(points) for points in results.values())
    summary = {}
    for router, points in results.items():
        throughput, reached = crossing(points, target)
        summary[router] = {
            "throughput": throughput,
            "reached": reached,
            "hit_rate": points[common - 1]["hit_rate"],
            "at_common": points[common - 1],
            "points": points,
        }
    return {
        "workload": workload,
        "target_p50_s": target,
        "hit_rate_at": rungs[common - 1],
        "routers": summary,
    }


def markdown(results: Sequence[dict[str, Any]], args: argparse.Namespace, wall_s: float) -> str:
    lines = [
        "## Routing",
        "",
        f"`benchmarks/routing.py` — {ENGINES} simulated engines (`a100-llama3-8b`), everything "
        f"but the router the product defaults: `{args.setup.describe()}`; the same programs "
        "for every router. Each router climbs a ladder of "
        "arrival rates until its p50 program E2E latency passes the target "
        f"L = {args.latency_factor:g} × round_robin's p50 at the first rung. "
        f"Arrival window {args.duration:g} s (+ drain), seeds {list(args.seeds)} (medians), "
        f"{wall_s / 60:.1f} min on this machine. Run {args.date}; command: "
        f"`{args.command}`.",
        "",
        "Throughput = the highest completed programs/s with p50 ≤ L (best rung, or interpolated "
        "at the crossing; `≥` = never reached L on the ladder, a lower bound). Hit rate = "
        "prefix-cache hit rate at the highest rate every router ran. With one seed, "
        "differences of a few per cent are within run-to-run noise.",
        "",
    ]
    header = (
        "workload",
        "L (s)",
        "router",
        "programs/s at p50 ≤ L",
        "× round_robin",
        "× autellix",
        "hit rate",
    )
    table_rows = []
    for result in results:
        routers = result["routers"]
        base = routers.get("round_robin", {}).get("throughput") or float("nan")
        autellix = routers.get("autellix", {}).get("throughput") or float("nan")
        for name, row in routers.items():
            mark = "" if row["reached"] else "≥ "
            table_rows.append(
                (
                    result["workload"],
                    f"{result['target_p50_s']:.1f}",
                    f"`{name}`",
                    f"{mark}{row['throughput']:.2f}",
                    f"{row['throughput'] / base:.2f}",
                    f"{row['throughput'] / autellix:.2f}",
                    f"{row['hit_rate']:.1%} (@ {result['hit_rate_at']:g}/s)",
                )
            )
    lines += _report.table(header, table_rows)
    lines += [
        "",
        "At the highest rate every router ran (latencies of the programs that finished; "
        "ratios to round_robin, < 1 faster; `unfinished` = still running when the drain ended, "
        "not in the latencies):",
        "",
    ]
    lines += _report.table(
        (
            "workload",
            "rate/s",
            "router",
            "token latency mean (s/token)",
            "÷ round_robin",
            "E2E mean / p95 (s)",
            "÷ round_robin",
            "completed/s",
            "unfinished",
        ),
        _common_rows(results),
    )
    verdicts = goals(results)
    if verdicts:
        lines += ["", "Goals: " + "; ".join(verdicts) + ".", ""]
    else:
        lines.append("")
    lines += [
        "What these figures say, and what changed since the previous run: "
        'docs/routing.md, "Benchmark results".',
        "",
    ]
    lines += _report.closing_lines(args, "p50 latency against throughput per router", "routing.py")
    return "\n".join(lines)


def goals(results: Sequence[dict[str, Any]]) -> list[str]:
    """The routing goals, as far as the routers that ran can say: prefix ≥ 1.4× round_robin
    on chatbot, prefix ≥ autellix on every workload."""
    verdicts = []
    chat = next((r for r in results if r["workload"] == "chatbot"), None)
    if chat is not None and {"prefix", "round_robin"} <= set(chat["routers"]):
        routers = chat["routers"]
        ratio = routers["prefix"]["throughput"] / routers["round_robin"]["throughput"]
        verdicts.append(
            f"prefix vs round_robin on chatbot: {ratio:.2f}× (goal ≥ 1.4×: "
            f"{'met' if ratio >= 1.4 else 'NOT met'})"
        )
    pairs = [
        (
            r["routers"]["prefix"]["throughput"] / r["routers"]["autellix"]["throughput"],
            r["workload"],
        )
        for r in results
        if {"prefix", "autellix"} <= set(r["routers"])
    ]
    if pairs:
        worst = min(pairs)
        verdicts.append(
            f"prefix vs autellix, worst workload: {worst[0]:.2f}× on {worst[1]} (goal ≥ 1.0×: "
            f"{'met' if worst[0] >= 0.995 else 'NOT met'})"
        )
    return verdicts


def _ratio(point: dict[str, Any], base: dict[str, Any], key: str) -> str:
    if not point.get(key) or not base.get(key):
        return "—"
    return f"{point[key] / base[key]:.2f}"


def _common_rows(results: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for result in results:
        routers = result["routers"]
        base = routers.get("round_robin", {}).get("at_common", {})

        for name, row in routers.items():
            point = row.get("at_common")
            if point is None or "token_mean_s" not in point:
                continue  # results saved before these figures existed
            rows.append(
                (
                    result["workload"],
                    f"{result['hit_rate_at']:g}",
                    f"`{name}`",
                    f"{point['token_mean_s']:.4f}",
                    _ratio(point, base, "token_mean_s"),
                    f"{point['mean_s']:.1f} / {point['p95_s']:.1f}",
                    f"{_ratio(point, base, 'mean_s')} / {_ratio(point, base, 'p95_s')}",
                    f"{point['throughput']:.2f}",
                    f"{point['unfinished']:g}",
                )
            )
    return rows


def plot(results: Sequence[dict[str, Any]], path: Path) -> None:
    fig, axes = _report.subplots(1, len(results), (4.2 * len(results), 3.6))
    for ax, result in zip(axes[0], results, strict=True):
        for name, row in result["routers"].items():
            points = row["points"]
            ax.plot(
                [p["throughput"] for p in points],
                [p["p50_s"] for p in points],
                marker="o",
                label=name,
            )
        ax.axhline(result["target_p50_s"], color="grey", linestyle="--", linewidth=1)
        ax.set_title(result["workload"])
        ax.set_xlabel("completed programs/s")
        ax.set_ylabel("p50 program E2E latency (s)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    _report.save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default=",".join(LADDERS), help="comma-separated")
    parser.add_argument("--routers", default=",".join(ROUTERS), help="comma-separated")
    parser.add_argument("--duration", type=float, default=200.0, help="arrival window (s)")
    parser.add_argument("--seeds", default="1", help="comma-separated seeds")
    parser.add_argument("--rungs", type=int, default=7, help="most rates per router")
    parser.add_argument("--latency-factor", type=float, default=1.5)
    parser.add_argument("--policy", default=defaults.POLICY, help="(default: %(default)s)")
    parser.add_argument(
        "--window",
        type=parse_window,
        default=defaults.ADMISSION_WINDOW,
        help="admission window: N, adaptive or unlimited (default: %(default)s)",
    )
    parser.add_argument("--retention", default=defaults.RETENTION, help="(default: %(default)s)")
    _report.add_cost_option(parser)
    _report.add_date_option(parser)
    parser.add_argument("--command", help="the command to quote (default: this one)")
    _report.add_output_options(parser, "results")
    args = parser.parse_args(argv)
    args.setup = Setup(args.policy, args.window, args.retention, args.cost)
    if args.command is None:
        args.command = " ".join(
            [".venv/bin/python", "benchmarks/routing.py", *(argv or sys.argv[1:])]
        )
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.quick:
        args.duration, args.rungs = min(args.duration, 40.0), min(args.rungs, 2)
    _report.resolve_plot(args, ROOT / "docs", "routing.png")
    routers = [r.strip() for r in args.routers.split(",") if r.strip()]
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        results, wall = saved["results"], float(saved["wall_s"])
        for result in results:  # re-derive the summary from the points
            for row in result["routers"].values():
                row["throughput"], row["reached"] = crossing(row["points"], result["target_p50_s"])
        args.seeds, args.duration = saved["seeds"], saved["duration"]
        args.latency_factor = saved["latency_factor"]
        if "setup" in saved:
            args.setup = Setup(**saved["setup"])
            args.date, args.command = saved.get("date", args.date), saved.get("command", "")
    else:
        started = time.perf_counter()
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = [
                climb(w.strip(), routers, args, pool)
                for w in args.workloads.split(",")
                if w.strip()
            ]
        wall = time.perf_counter() - started
    if args.plot:
        plot(results, Path(args.plot))
    saved = {
        "wall_s": wall,
        "seeds": args.seeds,
        "duration": args.duration,
        "latency_factor": args.latency_factor,
        "setup": dataclasses.asdict(args.setup),
        "date": args.date,
        "command": args.command,
        "results": results,
    }
    return _report.publish(args, markdown(results, args, wall), saved, ROOT / "docs", "## Routing")


if __name__ == "__main__":
    raise SystemExit(main())
