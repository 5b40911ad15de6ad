"""Controller replicas (simulated): scheduling quality with 1 / 2 / 4 / 8 controller replicas.

N controller processes over the same engines, each with its own process table, queues, prefix
index and adaptive admission window (``agentrt_sim.sim``, "Controller replicas"), behind a
balancer that shards requests **by program** (consistent hash of the program id,
:class:`agentrt_controller.replicas.ConsistentHashRing`) or **by call** (round robin per
request). Everything else is the controller's default (PLAS, adaptive window, prefix router,
retention on, FCFS engines, the controller's cost model), on ``mixed`` near saturation:

* one engine with 256 batch slots at 1.35 programs/s (``agentrt_sim.rates``: its FCFS
  saturation);
* one engine with 8 slots (``--max-num-seqs 8``, where the controller's order decides who
  runs: docs/scheduling.md) at 0.244 programs/s (its probed FCFS saturation, docs/scheduling.md).

Extra rows: ``others`` at 4 and 8 replicas (each replica's adaptive window counts the other
replicas' requests, scraped ``num_running + num_waiting`` minus its own, against its window:
``AdaptiveWindowConfig.count_other_load``); at the largest replica count ``split`` (each
replica's adaptive window bounded by its share of the batch, ``max_num_seqs // N``, instead of
the whole batch) and ``prio`` (the engine orders its queue by the controller's backend priority
— vLLM's ``--scheduling-policy priority`` — compared with one replica on the same priority
engine), and ``prio, unlimited`` (no admission window: every call goes to the engine at once,
and the engine's priority queue orders the calls of all replicas on one scale — the fix the
issue suggests), and ``prio, target 32`` (the priority engine, the adaptive window aiming at 32
calls waiting in it instead of 2, compared with one replica with the same setting).

The 8-slot setting runs seven seeds, the 256-slot one three: at 8 slots the per-seed ratios
spread by several per cent, and a run costs a fifth of a 256-slot one. Per configuration and
seed: mean program token latency, mean and p95 program E2E, completed and arrived programs/s;
ratios to one replica are per seed (same programs), then the median and the per-seed range.

    .venv/bin/python benchmarks/replicas.py --write-docs
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt_controller import defaults  # noqa: E402
from agentrt_emulator.core.types import EngineConfig  # noqa: E402
from agentrt_sim.costs import default_cost_model  # noqa: E402
from agentrt_sim.registry import PolicySpec  # noqa: E402
from agentrt_sim.runner import BenchConfig, run_comparison  # noqa: E402
from benchmarks import _report  # noqa: E402

HEADING = "## Controller replicas (simulated)"


@dataclass(frozen=True)
class Setting:
    """One engine setting: batch slots, load and the (cut) measurement window."""

    name: str
    max_num_seqs: int
    rate_per_s: float
    duration_s: float
    warmup_s: float
    #: Seeds run unless ``--seeds`` names others.
    seeds: tuple[int, ...] = (1, 2, 3)


SETTINGS = (
    Setting("256 slots", 256, 1.35, 400.0, 100.0),
    Setting("8 slots", 8, 0.244, 800.0, 200.0, seeds=(1, 2, 3, 4, 5, 6, 7)),
)
QUICK_SETTINGS = (Setting("8 slots (quick)", 8, 0.244, 120.0, 30.0, seeds=(1,)),)


@dataclass(frozen=True)
class Config:
    """One controller deployment."""

    label: str
    replicas: int
    shard: str = "program"
    replica_window: str = "shared"
    engine_policy: Literal["fcfs", "priority"] = "fcfs"
    #: Admission window per replica and engine: ``"adaptive"`` (the default) or ``None``
    #: (unlimited: every call goes to the engine, whose queue orders them).
    window: str | None = "adaptive"
    #: Adaptive-window parameters over the controller's defaults (``AdaptiveWindowConfig``
    #: fields), e.g. ``(("count_other_load", True),)``.
    admission: tuple[tuple[str, Any], ...] = ()
    #: Run at 8 slots only (at 256 nothing queues and no admission setting changes anything).
    small_batch_only: bool = False
    #: The one-replica row to compare with; ``None`` = the controller's default (adaptive
    #: window) on an engine with the same queue order.
    compare_with: str | None = None

    @property
    def baseline(self) -> str:
        """The label of the one-replica row this one is compared with."""
        if self.compare_with is not None:
            return self.compare_with
        return "1, prio" if self.engine_policy == "priority" else "1"


def configs(counts: Sequence[int]) -> list[Config]:
    """1 replica, then per count > 1 by program and by call (and at 4 and 8 slots' 4 and 8
    replicas, by program with the other replicas' load counted); at the largest count, the
    split window and the priority engine (with its own one-replica baselines)."""
    others = (("count_other_load", True),)
    out = [Config("1", 1)]
    for n in counts:
        if n > 1:
            out += [Config(f"{n} by program", n), Config(f"{n} by call", n, "call")]
        if n in (4, 8):
            label = f"{n} by program, others"
            out.append(Config(label, n, admission=others, small_batch_only=True))
    top = max(counts)
    if top > 1:
        out += [
            Config(f"{top} by program, split", top, replica_window="split"),
            Config("1, prio", 1, engine_policy="priority"),
            Config(f"{top} by program, prio", top, engine_policy="priority"),
            Config(f"{top} by call, prio", top, "call", engine_policy="priority"),
            Config(
                "1, prio, target 32",
                1,
                engine_policy="priority",
                admission=(("target_waiting", 32),),
                small_batch_only=True,
                compare_with="1, prio, target 32",
            ),
            Config(
                f"{top} by program, prio, target 32",
                top,
                engine_policy="priority",
                admission=(("target_waiting", 32),),
                small_batch_only=True,
                compare_with="1, prio, target 32",
            ),
            Config("1, prio, unlimited", 1, engine_policy="priority", window=None),
            Config(
                f"{top} by program, prio, unlimited", top, engine_policy="priority", window=None
            ),
            Config(
                f"{top} by call, prio, unlimited",
                top,
                "call",
                engine_policy="priority",
                window=None,
            ),
        ]
    return out


def run_point(setting: Setting, config: Config, seed: int) -> dict[str, Any]:
    """One simulation: the figures the table needs (picklable for the process pool)."""
    engine = replace(
        EngineConfig(max_model_len=131072),
        max_num_seqs=setting.max_num_seqs,
        scheduling_policy=config.engine_policy,
    )
    bench = BenchConfig(
        workload="mixed",
        rate_per_s=setting.rate_per_s,
        duration_s=setting.duration_s,
        warmup_s=setting.warmup_s,
        seed=seed,
        engine=engine,
    )
    admission = dict(defaults.ADMISSION) | dict(config.admission)
    spec = PolicySpec(
        admission_window=config.window,
        admission_options=admission,
        replicas=config.replicas,
        shard=config.shard,
        replica_window=config.replica_window,
    )
    started = time.process_time()
    (outcome,) = run_comparison(bench, [spec], cost_model=default_cost_model().service_s)
    s = outcome.summary
    return {
        "setting": setting.name,
        "config": config.label,
        "seed": seed,
        "token_mean_s": s["token_latency_s"]["mean"],
        "e2e_mean_s": s["e2e_latency_s"]["mean"],
        "e2e_p95_s": s["e2e_latency_s"]["p95"],
        "completed_per_s": s["throughput_programs_per_s"],
        "arrived_per_s": s["arrival_rate_per_s"],
        "unfinished": s["programs_unfinished"],
        "hit_rate": s["prefix_hit_rate"],
        "controller_wait_s": s["controller_wait_s_mean"],
        "split_programs": s.get("programs_on_several_replicas", 0),
        "replica_calls": s.get("replica_calls", [s["calls_completed"]]),
        "cpu_s": time.process_time() - started,
    }


_KEYS = ("token_mean_s", "e2e_mean_s", "e2e_p95_s", "completed_per_s", "arrived_per_s")


def _ratios(rows: list[dict[str, Any]], row: dict[str, Any], key: str) -> list[float]:
    """Per seed, this configuration's ``key`` divided by its baseline's on the same seed."""
    ratios = []
    for point in row["points"]:
        base = next(
            p
            for r in rows
            if r["setting"] == row["setting"] and r["config"] == row["baseline"]
            for p in r["points"]
            if p["seed"] == point["seed"]
        )
        ratios.append(point[key] / base[key] if base[key] else float("nan"))
    return ratios


def summarise(points: list[dict[str, Any]], config_list: list[Config]) -> list[dict[str, Any]]:
    """One row per (setting, configuration): medians over seeds and ratios to the baseline."""
    rows: list[dict[str, Any]] = []
    for setting in dict.fromkeys(p["setting"] for p in points):
        for config in config_list:
            mine = [p for p in points if p["setting"] == setting and p["config"] == config.label]
            if not mine:
                continue
            row: dict[str, Any] = {
                "setting": setting,
                "config": config.label,
                "baseline": config.baseline,
                "points": mine,
            }
            for key in (*_KEYS, "unfinished", "split_programs", "controller_wait_s"):
                row[key] = statistics.median(p[key] for p in mine)
            rows.append(row)
    for row in rows:
        for key in ("token_mean_s", "e2e_mean_s", "e2e_p95_s", "completed_per_s"):
            ratios = _ratios(rows, row, key)
            row[f"{key}_ratio"] = statistics.median(ratios)
            row[f"{key}_ratio_range"] = (min(ratios), max(ratios))
    return rows


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace, wall_s: float) -> str:
    by_setting: dict[str, set[int]] = {}
    for r in rows:
        by_setting.setdefault(r["setting"], set()).update(p["seed"] for p in r["points"])
    seeds = "; ".join(f"{name}: {sorted(s)}" for name, s in by_setting.items())
    lines = [
        HEADING,
        "",
        f"`benchmarks/replicas.py` — simulated, run {args.date}. N controller replicas over the "
        "same engine, each with its own process table, queues, prefix index and adaptive "
        'window (docs/simulator.md, "Controller replicas"), behind a balancer that shards '
        "requests by program (consistent hash of the program id) or by call (round robin per "
        "request); every other setting the controller's default (PLAS, adaptive window, "
        "prefix router, retention on, FCFS engine). `mixed` on one `a100-llama3-8b`: 256 "
        "slots at 1.35 programs/s (its FCFS saturation, `agentrt_sim/rates.py`), 400 s of "
        "arrivals after a 100 s warm-up; 8 slots (`--max-num-seqs 8`) at 0.244 programs/s "
        "(its probed saturation, docs/scheduling.md), 800 s after 200 s. These windows are "
        "cut short to fit a 2-core machine (the scheduling benchmark uses 500 s after "
        f"150 s). Medians over seeds ({seeds}); ratios are per seed against one replica on the "
        "same programs, then the median, with the smallest and largest per-seed ratio in "
        "brackets (> 1 = larger than one replica). `others` = each replica's adaptive window "
        "counts the other replicas' requests on the engine (scraped running + waiting minus "
        "its own calls in flight) against its window, which then bounds the engine's total "
        "load (`count_other_load`; 8 slots only). `target 32` = the adaptive window aims at 32 "
        "calls waiting in the (priority) engine instead of 2 (`target_waiting`), compared with "
        "one replica with the same setting (8 slots only). `split` = each "
        "replica's window bounded by its share of the batch (`max_num_seqs // N`); `prio` = "
        "the engine orders its queue by the controller's backend priority (vLLM "
        "`--scheduling-policy priority`), compared with one replica on that engine and the "
        "default adaptive window (`1, prio`); `unlimited` = no admission window (every call "
        "goes to the engine at once and the engine's priority queue orders the calls of all "
        "replicas on one scale). `programs split` = programs whose requests reached more "
        f"than one replica. {wall_s / 60:.1f} min of simulation CPU; the simulation is "
        "deterministic (the same command gives the same figures on any machine).",
        "",
    ]
    header = [
        "engine",
        "replicas",
        "token latency mean (s)",
        "E2E mean (s)",
        "E2E p95 (s)",
        "completed / arrived (programs/s)",
        "token ÷ 1",
        "E2E mean ÷ 1",
        "E2E p95 ÷ 1",
        "completed ÷ 1",
        "programs split",
    ]
    body = [
        [
            r["setting"],
            r["config"],
            f"{r['token_mean_s']:.4f}",
            f"{r['e2e_mean_s']:.1f}",
            f"{r['e2e_p95_s']:.1f}",
            f"{r['completed_per_s']:.3f} / {r['arrived_per_s']:.3f}",
            _with_range(r, "token_mean_s"),
            _with_range(r, "e2e_mean_s"),
            _with_range(r, "e2e_p95_s"),
            f"{r['completed_per_s_ratio']:.3f}",
            f"{r['split_programs']:.0f}",
        ]
        for r in rows
    ]
    lines += _report.table(header, body)
    lines += ["", *goal_lines(rows), ""]
    lines += [
        "Why the default settings lose token latency at 8 slots, why `prio, unlimited` does "
        'not, and what sharding by call breaks: docs/simulator.md, §1.1 "Controller '
        'replicas"; the live counterpart (HAProxy, a killed replica): docs/replicas.md.',
        "",
    ]
    lines += [
        "Reproduce: `.venv/bin/python benchmarks/replicas.py --write-docs` (`--quick` for a "
        "smoke run); one configuration, e.g. `agentrt bench sim --workload mixed --rate 0.244 "
        "--duration 800 --warmup 200 --max-num-seqs 8 --replicas 1,2,4,8 --shard program,call "
        "--seed 1`.",
        "",
    ]
    return "\n".join(lines)


def _with_range(row: dict[str, Any], key: str) -> str:
    """``median [min–max]`` of the per-seed ratios (the median alone with one seed)."""
    low, high = row[f"{key}_ratio_range"]
    median = f"{row[f'{key}_ratio']:.3f}"
    return median if len(row["points"]) < 2 else f"{median} [{low:.2f}–{high:.2f}]"


def goal_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The goal (program-sharded within 5 % of one controller in mean and p95 E2E), per row."""
    out = []
    for r in rows:
        if "by program" not in r["config"] or "split" in r["config"]:
            continue
        ratios = (r["e2e_mean_s_ratio"], r["e2e_p95_s_ratio"])
        if all(abs(x - 1) <= 0.05 for x in ratios):
            verdict = "met"
        elif all(x <= 1.05 for x in ratios):
            verdict = "met: no worse, more than 5 % better on one"
        else:
            verdict = "NOT met"
        out.append(
            f"- {r['setting']}, {r['config']}: E2E mean {r['e2e_mean_s_ratio']:.3f}× and p95 "
            f"{r['e2e_p95_s_ratio']:.3f}× one replica (goal within 5 %: {verdict})."
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seeds",
        default=None,
        help="comma-separated, for every setting (default: 1-3 at 256 slots, 1-7 at 8 slots)",
    )
    parser.add_argument(
        "--window",
        default=None,
        metavar="DURATION,WARMUP",
        help="arrivals and warm-up (seconds) for every setting instead of its own; the setting "
        "is then named with them (not for --write-docs, whose text names the default windows)",
    )
    parser.add_argument(
        "--replicas", default="1,2,4,8", help="replica counts (default: %(default)s)"
    )
    parser.add_argument(
        "--settings",
        default="all",
        help="'all', '256' or '8': which engine settings to run (default: %(default)s)",
    )
    parser.add_argument(
        "--only",
        default=None,
        metavar="LABEL[;LABEL...]",
        help="run only these configurations (row labels, ';'-separated); with --merge, add "
        "them to saved points",
    )
    parser.add_argument(
        "--merge", metavar="FILE", default=None, help="--json output whose points to keep"
    )
    _report.add_date_option(parser)
    _report.add_output_options(parser, "per-seed points")
    args = parser.parse_args(argv)
    args.plot = None
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()] if args.seeds else None
    if args.window and args.write_docs:
        parser.error(
            "--window measures outside the documented windows: use --json, not --write-docs"
        )
    counts = sorted({int(n) for n in args.replicas.split(",") if n.strip()} | {1})
    config_list = configs(counts)
    if args.from_json:
        points = json.loads(Path(args.from_json).read_text())["points"]
    else:
        settings: tuple[Setting, ...] = QUICK_SETTINGS if args.quick else SETTINGS
        if args.settings != "all":
            settings = tuple(s for s in settings if s.name.split()[0] == args.settings)
        if args.window:
            duration_s, warmup_s = (float(x) for x in args.window.split(","))
            settings = tuple(
                replace(
                    s,
                    name=f"{s.name}, {duration_s:g} s after {warmup_s:g} s",
                    duration_s=duration_s,
                    warmup_s=warmup_s,
                )
                for s in settings
            )
        if args.quick:
            seeds, config_list = (seeds or [1])[:1], configs([1, 2])
        chosen = set(args.only.split(";")) if args.only else None
        jobs = [
            (s, c, seed)
            for s in settings
            for c in config_list
            for seed in (seeds or s.seeds)
            if (chosen is None or c.label in chosen)
            and not (c.small_batch_only and s.max_num_seqs > 8)
        ]
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(run_point, *job) for job in jobs]
            points = [f.result() for f in futures]
        if args.merge:
            points = json.loads(Path(args.merge).read_text())["points"] + points
    rows = summarise(points, config_list)
    cpu = sum(p["cpu_s"] for p in points)
    saved = {"points": points}
    return _report.publish(args, markdown(rows, args, cpu), saved, ROOT / "docs", HEADING)


if __name__ == "__main__":
    raise SystemExit(main())
