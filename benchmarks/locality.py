"""Locality benchmark: do a long-context program's calls stay on the engine holding its context?

The same programs (same seed) are simulated on ``--engines`` A100 engines (Llama-3.1-8B) under
the product defaults, once per router configuration; reported per run:

* follow-up calls (a program's second call on), how many landed on another engine than the
  program's previous call (``moved``), the prompt tokens of the context each move left behind,
  and the programs that moved at least once (:class:`~agentrt_controller.routing.locality.
  LocalityStats`, kept by every pipeline router);
* the prefix-cache hit rate over all measured calls and its per-program median and minimum;
* program E2E mean / p95, unfinished programs, preemptions.

Run (from the repository root)::

    .venv/bin/python benchmarks/locality.py --workload coding --engines 2 --load 0.9
    .venv/bin/python benchmarks/locality.py --workload agents --engines 4 \\
        --config before=context_weight=0 --config after

``--config NAME[=KEY=VALUE;KEY=VALUE]`` runs the ``prefix`` router with those options (the
default runs ``default``: the router's own defaults). The load is a fraction of the workload's
one-engine FCFS saturation (``agentrt_sim/rates.py``) times the engines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from agentrt_sim.metrics import summarize
from agentrt_sim.plan import compile_program
from agentrt_sim.rates import DEFAULT_RATES
from agentrt_sim.registry import PolicySpec, build_policies
from agentrt_sim.runner import BenchConfig
from agentrt_sim.sim import Simulation


def _option(text: str) -> tuple[str, float]:
    key, _, value = text.partition("=")
    return key.strip(), float(value)


def parse_config(text: str) -> tuple[str, dict[str, float]]:
    """``NAME`` or ``NAME=K=V;K=V`` -> (name, router options)."""
    name, _, rest = text.partition("=")
    options = dict(_option(part) for part in rest.split(";") if part.strip())
    return name.strip(), options


def run(bench: BenchConfig, name: str, options: dict[str, float]) -> dict[str, Any]:
    """One configuration's row."""
    plans = [compile_program(p) for p in bench.programs()]
    spec = PolicySpec(router="prefix", router_options=options)
    config = bench.sim_config()
    sim = Simulation(plans, config, build_policies(spec))
    record = sim.run(None)
    metrics = summarize(record, warmup_s=config.warmup_s, window_end_s=config.window_end_s)
    locality = sim.dispatchers[0].router.locality.snapshot()  # type: ignore[attr-defined]
    rates = [p.cached_tokens / p.prompt_tokens for p in record.programs if p.prompt_tokens]
    return {
        "config": name,
        "options": options,
        "programs": len(record.programs),
        **locality,
        "moved_share": locality["moved_calls"] / max(1, locality["followup_calls"]),
        "prefix_hit_rate": metrics["prefix_hit_rate"],
        "program_hit_rate_median": statistics.median(rates) if rates else float("nan"),
        "program_hit_rate_min": min(rates) if rates else float("nan"),
        "e2e_mean_s": metrics["e2e_latency_s"]["mean"],
        "e2e_p95_s": metrics["e2e_latency_s"]["p95"],
        "unfinished": metrics["programs_unfinished"],
        "preemptions": metrics["preemptions"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="coding")
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--load", type=float, default=0.9, help="fraction of saturation")
    parser.add_argument("--duration", type=float, default=1200.0, help="arrival window (s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--config", action="append", default=[], metavar="NAME[=K=V;...]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rate = args.load * DEFAULT_RATES[args.workload] * args.engines
    bench = BenchConfig(
        workload=args.workload,
        rate_per_s=rate,
        duration_s=args.duration,
        seed=args.seed,
        engines=args.engines,
    )
    rows = [run(bench, *parse_config(c)) for c in (args.config or ["default"])]
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    print(f"{args.workload} on {args.engines} engines at {rate:.4f}/s, seed {args.seed}")
    header = (
        "config moved/followup programs_moved hit(all,med,min) e2e_mean p95 unfinished preemptions"
    )
    print(header)
    for r in rows:
        print(
            f"{r['config']} {r['moved_calls']}/{r['followup_calls']}"
            f" {r['programs_moved']}/{r['programs']}"
            f" {r['prefix_hit_rate']:.3f},{r['program_hit_rate_median']:.3f},"
            f"{r['program_hit_rate_min']:.3f} {r['e2e_mean_s']:.1f} {r['e2e_p95_s']:.1f}"
            f" {r['unfinished']} {r['preemptions']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
