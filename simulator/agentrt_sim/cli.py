"""``agentrt bench``: simulate workloads under policies (``sim``), sweep the load (``sweep``),
replay Autellix Fig. 2 (``fig2``), and replay a trace against a live server (``replay``,
docs/replay.md). See docs/simulator.md."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from agentrt_controller import defaults

__all__ = ["register"]

_SIM_EPILOG = """\
With no policy option a run simulates what `agentrt controller serve --backend URL` runs
(agentrt_controller.defaults); with no --rate, the workload near its saturation.

examples:
  agentrt bench sim --workload mixed --policy fcfs,plas
  agentrt bench sim --workload mixed --rate 0.3 --duration 3600 --seed 1 --json
  agentrt bench sim --workload react --rate 1 --duration 600 --policy fcfs,plas \\
      --admission-window 32 --plot out/
  agentrt bench sim --trace-in programs.jsonl --policy fcfs,srpt
  agentrt bench sim --tenants well:mixed@0.5,greedy:mixed@1.5:rotate --tenancy off,on
  agentrt bench sim --workload mixed --replicas 1,2,4,8 --shard program,call
  agentrt bench sweep --workload chatbot --rates 0.5,1,2,4 --policy fcfs,plas --plot out/
  agentrt bench fig2 --json"""


def register(subparsers: Any) -> None:
    """Add the ``bench`` command group to the ``agentrt`` parser."""
    bench = subparsers.add_parser(
        "bench",
        help="simulate workloads and compare scheduling / routing / retention policies",
        description="Discrete-event simulation of agent workloads on modelled engines.",
    )
    commands = bench.add_subparsers(dest="bench_command", metavar="SUBCOMMAND")
    bench.set_defaults(handler=lambda args: _usage(bench))

    sim = commands.add_parser(
        "sim",
        help="run one workload under one or more policy configurations",
        description="Generate programs (or replay a trace) and simulate them under each "
        "configuration; every configuration replays the same programs.",
        epilog=_SIM_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_workload_args(sim, rate=True)
    _add_tenant_args(sim)
    _add_policy_args(sim)
    _add_output_args(sim)
    sim.add_argument(
        "--trace-in",
        metavar="FILE",
        help="replay programs from a JSONL trace, or recorded sessions (one line per call)",
    )
    sim.add_argument("--trace-out", metavar="FILE", help="save the programs as a JSONL trace")
    sim.set_defaults(handler=_sim)

    sweep = commands.add_parser(
        "sweep",
        help="sweep the arrival rate: latency against load, saturation point",
        description="Run each configuration at each rate and report the largest rate at "
        "which it keeps up (completed throughput >= 90% of the offered rate).",
        epilog=_SIM_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_workload_args(sweep, rate=False)
    sweep.add_argument(
        "--rates",
        required=True,
        metavar="R[,R...]",
        help="arrival rates to try (programs/s), comma-separated",
    )
    _add_policy_args(sweep)
    _add_output_args(sweep)
    sweep.set_defaults(handler=_sweep)

    fig2 = commands.add_parser(
        "fig2",
        help="Autellix Fig. 2: total waiting time per policy (FCFS = 18)",
        description=(
            "Four programs, two batch slots, unit-step engine "
            "(Autellix arXiv 2502.13965 Fig. 2; docs/scheduling.md)."
        ),
    )
    fig2.add_argument(
        "--policy",
        default=None,
        metavar="P[,P...]",
        help="policies (default: every registered scheduler)",
    )
    fig2.add_argument(
        "--admission-window",
        default="2",
        metavar="N|unlimited",
        help="controller admission window (default: %(default)s = the engine's slots)",
    )
    fig2.add_argument(
        "--engine-policy",
        choices=["fcfs", "priority"],
        default="fcfs",
        help="the engine's own queue order (default: %(default)s)",
    )
    fig2.add_argument("--json", action="store_true", help="print JSON instead of a table")
    fig2.set_defaults(handler=_fig2)

    from agentrt_sim.replay.cli import add_parser as add_replay_parser

    add_replay_parser(commands)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _add_workload_args(parser: argparse.ArgumentParser, *, rate: bool) -> None:
    group = parser.add_argument_group("workload")
    group.add_argument(
        "--workload",
        default="mixed",
        help="chatbot, react, mapreduce, mcts, mixed, coding, research or agents "
        "(default: %(default)s)",
    )
    if rate:
        group.add_argument(
            "--rate",
            type=float,
            default=None,
            metavar="R",
            help="program arrivals per second, Poisson (default: the workload's FCFS "
            "saturation on one engine, agentrt_sim/rates.py: "
            + ", ".join(f"{k} {v:g}" for k, v in _default_rates().items())
            + ")",
        )
    group.add_argument(
        "--duration",
        type=float,
        default=600.0,
        metavar="S",
        help="arrival window in simulated seconds (default: %(default)s)",
    )
    group.add_argument("--seed", type=int, default=None, help="random seed (default: 1)")
    group.add_argument(
        "--seeds",
        metavar="S[,S...]",
        help="run every configuration on each seed (e.g. 1,2,3) and report medians with their "
        "ranges (min-max); instead of --seed",
    )
    group.add_argument(
        "--warmup",
        type=float,
        default=None,
        metavar="S",
        help="programs arriving before S seconds are not measured (default: 10%% of duration)",
    )
    group.add_argument(
        "--drain",
        type=float,
        default=None,
        metavar="S",
        help="simulate at most S seconds past the arrival window (default: the duration)",
    )
    group.add_argument(
        "--workload-param",
        action="append",
        default=[],
        metavar="KIND.FIELD=VALUE",
        help="override a workload assumption, e.g. chatbot.think_mean_s=0 (repeatable)",
    )
    group.add_argument(
        "--prompt-calibration",
        choices=["engine", "fresh"],
        default=None,
        help="what the paper's prompt tokens per call measure: each call's whole prompt "
        "(engine) or the new tokens only (fresh); sets it for chatbot, react and mcts "
        "(default: engine; docs/simulator.md, Calibration)",
    )
    engines = parser.add_argument_group("engines")
    engines.add_argument("--engines", type=int, default=1, help="engines (default: 1)")
    engines.add_argument(
        "--profile",
        default="a100-llama3-8b",
        metavar="NAME",
        help="hardware profile of every engine (default: %(default)s)",
    )
    engines.add_argument(
        "--engine-policy",
        choices=["fcfs", "priority"],
        default=defaults.ENGINE_POLICY,
        help="the engines' queue order; priority passes the scheduler's backend priority "
        "(default: %(default)s, a stock vLLM: the controller's default priority passthrough "
        "is off)",
    )
    engines.add_argument("--max-num-seqs", type=int, default=256, help="batch slots (default: 256)")
    engines.add_argument(
        "--block-size", type=int, default=16, help="KV block size in tokens (default: 16)"
    )
    engines.add_argument(
        "--num-gpu-blocks", type=int, default=None, metavar="N",
        help="KV cache size of every engine in blocks, as the emulator's flag (default: "
        "derived from the profile's memory)",
    )  # fmt: skip
    engines.add_argument(
        "--no-prefix-caching", action="store_true", help="turn the engines' prefix cache off"
    )
    engines.add_argument(
        "--kv-offloading-size",
        type=float,
        default=0.0,
        metavar="GIB",
        help="KV CPU tier of every engine in GiB, as vLLM's flag: evicted and preempted "
        "blocks are reloaded over PCIe instead of recomputed (default: 0, off; "
        "docs/engine-model.md)",
    )
    engines.add_argument(
        "--preemption-order",
        choices=["newest", "shortest"],
        default="newest",
        help="which running request an engine preempts when its KV cache runs out: newest = "
        "vLLM's (the most recently admitted), shortest = the fewest tokens of context first "
        "(ThunderAgent's shortest-first eviction; default: %(default)s; docs/engine-model.md)",
    )


def _add_tenant_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "tenants",
        "Several tenants (API-key holders) on the same engines, and fair shares between them "
        "(docs/tenancy.md). The JSON and a second table report each tenant's programs, E2E, "
        "token latency and charged service with its share.",
    )
    group.add_argument(
        "--tenants",
        metavar="NAME:WORKLOAD@RATE[:rotate][:weight=W][,...]",
        default=None,
        help="tenants instead of --workload/--rate: each its own workload and Poisson rate "
        "(programs/s) from its own seed; rotate = the tenant sends every LLM call under a "
        "fresh program id (a client gaming attained service); weight = its fair share "
        "(default 1). Example: well:mixed@0.5,greedy:mixed@1.5:rotate",
    )
    group.add_argument(
        "--tenancy",
        default="off",
        metavar="off|on|fair|isolate[=F][,...]",
        help="off = one policy over all calls; fair = weighted fair shares of charged service "
        "between tenants, the policy inside each (the queue only); isolate = fair shares and "
        "per-tenant caps on calls in flight while tenants contend (=F: the fraction of an "
        "engine's window the tenants above their fair share may hold while another is within "
        "its share, or none); on = the controller's default for several tenants; a list "
        "compares them (default: %(default)s)",
    )
    group.add_argument(
        "--isolation-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="per-tenant cap parameter for isolate, e.g. reservation_s=5 (repeatable; "
        "docs/tenancy.md)",
    )


def _tenancy_values(
    text: str, isolation_options: dict[str, Any]
) -> list[tuple[bool, dict[str, Any] | None]]:
    """``--tenancy`` items as (tenancy on, ``PolicySpec.isolation``)."""
    from agentrt.errors import ConfigError

    values: list[tuple[bool, dict[str, Any] | None]] = []
    for item in (part.strip().lower() for part in text.split(",")):
        name, sep, share = item.partition("=")
        if name == "isolate":
            params: dict[str, Any] = {**isolation_options, "enabled": True}
            if sep:
                try:
                    params["surplus_share"] = None if share == "none" else float(share)
                except ValueError:
                    raise ConfigError(
                        f"--tenancy isolate=F takes a fraction in (0, 1] or none, got {item!r}"
                    ) from None
            values.append((True, params))
        elif sep or name not in ("on", "off", "fair"):
            raise ConfigError(
                f"--tenancy takes off, on, fair, isolate or isolate=F (a list of them), got "
                f"{text!r}"
            )
        elif name == "fair":
            values.append((True, {"enabled": False}))
        else:
            values.append((name == "on", None))  # on = TenancyConfig's default
    return values


def _add_policy_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("controller policies")
    group.add_argument(
        "--policy",
        default=defaults.POLICY,
        metavar="P[,P...]",
        help="scheduling policies to compare, comma-separated (default: %(default)s, the "
        "controller's)",
    )
    group.add_argument(
        "--router",
        default=defaults.ROUTER,
        help="routing policy: round_robin, least_loaded, autellix, prefix, pipeline "
        "(default: %(default)s)",
    )
    group.add_argument(
        "--router-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="router parameter, e.g. threshold_tokens=2048 (repeatable; JSON values)",
    )
    group.add_argument(
        "--retention",
        default=defaults.RETENTION,
        help="KV retention: on, off or a policy name (default: %(default)s)",
    )
    group.add_argument(
        "--admission-window",
        default=_window_text(defaults.ADMISSION_WINDOW),
        metavar="N|unlimited|adaptive",
        help="calls the controller may have in flight per engine; adaptive = steered by the "
        "engine's waiting queue, at most its batch size + 2 (default: %(default)s)",
    )
    group.add_argument(
        "--admission-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="adaptive window parameter (AdaptiveWindowConfig), e.g. slow_start=false "
        "(repeatable; JSON values; docs/scheduling.md, Admission windows)",
    )
    group.add_argument(
        "--scrape-interval",
        type=float,
        default=0.0,
        metavar="S",
        help="how often the controller refreshes the engines' gauges that the adaptive window "
        "steers by, in simulated seconds (0 = at every decision; the served controller "
        "scrapes every 1 s; default: %(default)s)",
    )
    group.add_argument(
        "--cost",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="charge service with the controller's cost model (e.g. profile=a100-llama3-8b, "
        "or prefill_s_per_token=..., decode_s_per_token=...; repeatable; JSON values), or "
        "'roofline': the engine profile's modelled GPU time; default: what `agentrt controller "
        "serve` charges by default (agentrt_controller.defaults.COST)",
    )
    group.add_argument(
        "--policy-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="scheduler parameter, e.g. starvation_beta=3 (repeatable; JSON values)",
    )
    group.add_argument(
        "--memory-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="memory-aware admission parameter, as the controller's memory_admission table, "
        "e.g. min_context_tokens=4096 or enabled=false (repeatable; JSON values; "
        "docs/scheduling.md, 'Admission under memory pressure')",
    )
    replicas = parser.add_argument_group(
        "controller replicas",
        "Several controller processes over the same engines, each with its own process table, "
        "queues, router and admission window, behind a balancer (docs/simulator.md, "
        "'Controller replicas'). A list compares them; one replica ignores --shard and "
        "--replica-window.",
    )
    replicas.add_argument(
        "--replicas",
        default="1",
        metavar="N[,N...]",
        help="controller replicas, integers >= 1, comma-separated (default: %(default)s)",
    )
    replicas.add_argument(
        "--shard",
        default="program",
        metavar="program|call[,...]",
        help="how the balancer spreads requests: program = consistent hash of the program id "
        "(every request of a program meets one replica), call = round robin per request "
        "(default: %(default)s)",
    )
    replicas.add_argument(
        "--replica-window",
        default="shared",
        metavar="shared|split[,...]",
        help="each replica's adaptive window is bounded by the engine's whole batch (shared) or "
        "by its share, max_num_seqs // N (split); both follow the engine's shared waiting queue "
        "(default: %(default)s)",
    )


def _default_rates() -> dict[str, float]:
    from agentrt_sim.rates import DEFAULT_RATES

    return dict(DEFAULT_RATES)


def _window_text(window: int | str | None) -> str:
    return "unlimited" if window is None else str(window)


def _add_output_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array, one per run (with --seeds: medians, seeds and seed_range)",
    )
    group.add_argument(
        "--wide",
        action="store_true",
        help="every column in the table (default: the few that fit 100 columns)",
    )
    group.add_argument("--plot", metavar="DIR", help="write PNG charts to DIR")
    group.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _options(items: list[str]) -> dict[str, Any]:
    from agentrt.errors import ConfigError

    options: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"option {item!r}: expected KEY=VALUE")
        try:
            options[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            options[key.strip()] = raw
    return options


def _cost(args: argparse.Namespace) -> Any:
    from agentrt_controller.cost_model import CostModel
    from agentrt_sim.costs import default_cost_model

    if args.cost == ["roofline"]:
        return None  # the simulator charges the engine profile's roofline
    model = CostModel.from_mapping(_options(args.cost)) if args.cost else default_cost_model()
    return model.service_s


def _cost_table(args: argparse.Namespace) -> dict[str, object]:
    """The cost model table the router's and retention's derived parameters come from: the
    ``--cost`` table, else (no ``--cost``, or ``roofline``) the controller's default."""
    from agentrt_controller import defaults

    if args.cost and args.cost != ["roofline"]:
        return _options(args.cost)
    return dict(defaults.COST)


def _replica_values(args: argparse.Namespace) -> list[tuple[int, str, str]]:
    """``--replicas`` x ``--shard`` x ``--replica-window`` as (replicas, shard, window); one
    replica appears once (sharding and window shares mean nothing there)."""
    from agentrt.errors import ConfigError
    from agentrt_controller.replicas import SHARD_MODES
    from agentrt_sim.registry import REPLICA_WINDOWS

    def items(text: str) -> list[str]:
        return [part.strip().lower() for part in text.split(",") if part.strip()]

    counts: list[int] = []
    for item in items(args.replicas):
        try:
            count = int(item)
        except ValueError:
            count = 0
        if count < 1:
            raise ConfigError(f"--replicas takes integers >= 1, got {args.replicas!r}")
        counts.append(count)
    shards, windows = items(args.shard), items(args.replica_window)
    if not counts or not shards or not windows:
        raise ConfigError("--replicas, --shard and --replica-window need at least one value")
    for shard in shards:
        if shard not in SHARD_MODES:
            raise ConfigError(f"--shard takes {' or '.join(SHARD_MODES)}, got {shard!r}")
    for window in windows:
        if window not in REPLICA_WINDOWS:
            raise ConfigError(
                f"--replica-window takes {' or '.join(REPLICA_WINDOWS)}, got {window!r}"
            )
    values: list[tuple[int, str, str]] = []
    for count in counts:
        combos = (
            [(1, "program", "shared")]
            if count == 1
            else [(count, shard, window) for shard in shards for window in windows]
        )
        values += [c for c in combos if c not in values]
    return values


def _bench_and_specs(args: argparse.Namespace, rate: float) -> tuple[Any, list[Any]]:
    from dataclasses import replace

    from agentrt.errors import ConfigError
    from agentrt_emulator.core.types import EngineConfig
    from agentrt_sim.registry import PolicySpec, parse_window
    from agentrt_sim.runner import BenchConfig
    from agentrt_sim.workloads.generate import parse_workload_params

    if args.engines < 1:
        raise ConfigError(f"--engines must be >= 1, got {args.engines}")
    if not getattr(args, "scrape_interval", 0.0) >= 0:
        raise ConfigError(f"--scrape-interval must be >= 0, got {args.scrape_interval}")
    from agentrt_sim.workloads.tenants import TenantLoad, parse_tenants

    tenants: tuple[TenantLoad, ...] = ()
    if getattr(args, "tenants", None) is not None:
        if getattr(args, "trace_in", None):
            raise ConfigError("--tenants and --trace-in exclude each other")
        if args.rate is not None:
            raise ConfigError("--tenants gives each tenant its rate: drop --rate")
        tenants = parse_tenants(args.tenants)
    engine = replace(
        EngineConfig(max_model_len=131072),
        max_num_seqs=args.max_num_seqs,
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks,
        scheduling_policy=args.engine_policy,
        enable_prefix_caching=not args.no_prefix_caching,
        kv_offloading_size=args.kv_offloading_size,
        preemption_order=args.preemption_order,
    )
    bench = BenchConfig(
        workload=args.workload,
        rate_per_s=rate,
        duration_s=args.duration,
        seed=1 if args.seed is None else args.seed,
        warmup_s=args.warmup,
        drain_s=args.drain,
        engines=args.engines,
        profile=args.profile,
        engine=engine,
        workload_params=parse_workload_params(
            args.workload_param, prompt_calibration=args.prompt_calibration
        ),
        tenants=tenants,
        scrape_interval_s=getattr(args, "scrape_interval", 0.0),
    )
    if tenants:
        bench = replace(bench, workload="tenants", rate_per_s=sum(t.rate_per_s for t in tenants))
    window = parse_window(args.admission_window)
    options = _options(args.policy_option)
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    router_options = _options(args.router_option)
    given = _options(getattr(args, "admission_option", []))
    if given and window != "adaptive":
        raise ConfigError("--admission-option applies to --admission-window adaptive only")
    admission_options = {**defaults.ADMISSION, **given}
    memory = _options(getattr(args, "memory_option", []))
    if memory and window is None:
        raise ConfigError("--memory-option: the memory rule is off with an unlimited window")
    weights = {t.name: t.weight for t in tenants}
    specs = [
        PolicySpec(
            p,
            args.router,
            args.retention,
            window,
            options,
            router_options,
            tenancy=tenancy,
            tenant_weights=weights,
            isolation=isolation,
            replicas=replicas,
            shard=shard,
            replica_window=replica_window,
            cost=_cost_table(args),
            admission_options=admission_options,
            memory_admission=memory,
        )
        for p in policies
        for tenancy, isolation in _tenancy_values(
            getattr(args, "tenancy", "off"), _options(getattr(args, "isolation_option", []))
        )
        for replicas, shard, replica_window in _replica_values(args)
    ]
    return bench, specs


def _print_json(results: list[dict[str, Any]]) -> None:
    def clean(value: Any) -> Any:  # NaN is not JSON: print null
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    print(json.dumps([clean(r) for r in results], indent=2))


def _guarded(run: Any) -> int:
    from agentrt.errors import ConfigError

    try:
        code: int = run()
    except ConfigError as exc:
        print(f"agentrt bench: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `agentrt bench ... | head`
        sys.stderr.close()
        return 0
    return code


def _sim(args: argparse.Namespace) -> int:
    return _guarded(lambda: _run_sim(args))


def _run_sim(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from agentrt_sim.rates import default_rate
    from agentrt_sim.report import print_sim_table, progress_bar
    from agentrt_sim.runner import run_comparison
    from agentrt_sim.seeds import over_seeds
    from agentrt_sim.workloads.trace import load_trace, save_trace

    seeds = _seeds(args)
    rate = args.rate if args.rate is not None else default_rate(args.workload)
    bench, specs = _bench_and_specs(args, rate)
    runs: list[list[dict[str, Any]]] = []
    arrivals: list[tuple[int, int]] = []  # per seed: (programs, of them in the warm-up)
    outcomes: list[Any] = []
    for seed in seeds:
        bench = replace(bench, seed=seed)
        programs = load_trace(args.trace_in) if args.trace_in else bench.programs()
        if args.trace_in and programs:
            last = max(p.arrival_s for p in programs)
            bench = replace(bench, workload=f"trace:{args.trace_in}", duration_s=max(last, 1e-9))
        if args.trace_out:
            save_trace(programs, args.trace_out)
        warmup_s = bench.resolved_warmup_s()
        arrivals.append((len(programs), sum(1 for p in programs if p.arrival_s < warmup_s)))
        with progress_bar(not (args.json or args.no_progress)) as progress:
            outcomes = run_comparison(
                bench, specs, programs=programs, cost_model=_cost(args), progress=progress
            )
        runs.append([o.summary for o in outcomes])
    results = runs[0] if len(seeds) == 1 else over_seeds(runs, seeds)
    if args.json:
        _print_json(results)
    else:
        workload = args.tenants if bench.tenants else bench.workload
        print_sim_table(
            results,
            f"{workload} @ {bench.rate_per_s:g} programs/s, {_count(a for a, _ in arrivals)} "
            f"programs arrived ({_seeds_text(seeds)})",
            wide=args.wide,
            notes=[_warmup_note(bench.resolved_warmup_s(), arrivals)],
        )
    if args.plot:
        from agentrt_sim.plots import plot_comparison

        for path in plot_comparison(outcomes, args.plot):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def _seeds(args: argparse.Namespace) -> list[int]:
    """The seeds to run: ``--seeds``, else ``--seed`` (default 1). Raises ConfigError for
    both, a bad list, or several seeds with what takes one (a trace, plots)."""
    from agentrt.errors import ConfigError
    from agentrt_sim.seeds import parse_seeds

    if args.seeds is None:
        return [1 if args.seed is None else args.seed]
    if args.seed is not None:
        raise ConfigError("give --seed or --seeds, not both")
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if len(seeds) > 1:
        for flag in ("trace_in", "trace_out", "plot"):
            if getattr(args, flag, None):
                option = "--" + flag.replace("_", "-")
                raise ConfigError(f"{option} takes one seed; --seeds gives {len(seeds)}")
    return seeds


def _seeds_text(seeds: list[int]) -> str:
    return f"seed {seeds[0]}" if len(seeds) == 1 else "seeds " + ",".join(map(str, seeds))


def _count(values: Any) -> str:
    """A count, or ``min-max`` when it differs between seeds."""
    counts = list(values)
    low, high = min(counts), max(counts)
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"


def _warmup_note(warmup_s: float, arrivals: list[tuple[int, int]]) -> str:
    """Why the table's ``programs`` is smaller than the header's count."""
    return (
        f"programs = measured: arrived after the warm-up (the first {warmup_s:g} s; "
        f"{_count(w for _, w in arrivals)} programs arrived in it and are not measured) and "
        "finished; unfinished ones are not measured either"
    )


def _sweep(args: argparse.Namespace) -> int:
    return _guarded(lambda: _run_sweep(args))


def _run_sweep(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from agentrt.errors import ConfigError
    from agentrt_sim.report import print_sweep_table, progress_bar
    from agentrt_sim.runner import saturation_rate, sweep
    from agentrt_sim.seeds import over_seeds

    try:
        rates = sorted({float(r) for r in args.rates.split(",") if r.strip()})
    except ValueError as exc:
        raise ConfigError(f"--rates must be comma-separated numbers, got {args.rates!r}") from exc
    if not rates or rates[0] <= 0:
        raise ConfigError("--rates needs at least one rate > 0")
    seeds = _seeds(args)
    bench, specs = _bench_and_specs(args, rates[0])
    runs: list[list[dict[str, Any]]] = []
    outcomes: list[Any] = []
    for seed in seeds:
        with progress_bar(not (args.json or args.no_progress)) as progress:
            outcomes = sweep(
                replace(bench, seed=seed), specs, rates, cost_model=_cost(args), progress=progress
            )
        runs.append([o.summary for o in outcomes])
    results = runs[0] if len(seeds) == 1 else over_seeds(runs, seeds)
    saturation = {s.policy: saturation_rate(results, s.policy) for s in specs}
    if args.json:
        for result in results:
            result["saturation_rate"] = saturation[result["policy"]]
        _print_json(results)
    else:
        warmup_s = bench.resolved_warmup_s()
        print_sweep_table(
            results,
            saturation,
            wide=args.wide,
            notes=[
                f"{_seeds_text(seeds)}; measured: programs arriving after the warm-up (the "
                f"first {warmup_s:g} s) that finished"
            ],
        )
    if args.plot:
        from agentrt_sim.plots import plot_sweep

        for path in plot_sweep(outcomes, args.plot):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def _fig2(args: argparse.Namespace) -> int:
    return _guarded(lambda: _run_fig2(args))


def _run_fig2(args: argparse.Namespace) -> int:
    from agentrt_sim.fig2 import run_fig2
    from agentrt_sim.registry import SCHEDULER_NAMES, parse_window
    from agentrt_sim.report import print_fig2_table

    policies = (
        [p.strip() for p in args.policy.split(",") if p.strip()]
        if args.policy
        else list(SCHEDULER_NAMES)
    )
    window = parse_window(args.admission_window)
    if window == "adaptive":
        from agentrt.errors import ConfigError

        raise ConfigError("fig2 takes a fixed admission window or 'unlimited'")
    assert not isinstance(window, str)
    results = run_fig2(policies, window=window, engine_policy=args.engine_policy)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_fig2_table(results)
    return 0
