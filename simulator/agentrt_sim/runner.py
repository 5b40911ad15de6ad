"""Run configurations on the same programs and summarise them (what ``agentrt bench`` does).

``run_comparison(bench, specs)`` generates (or takes) the programs once and replays them under
every :class:`~agentrt_sim.registry.PolicySpec`, returning one JSON-able summary per
configuration. ``sweep(...)`` repeats that over arrival rates and finds the saturation point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentrt.errors import ConfigError
from agentrt_controller.cost_model import CostFunction
from agentrt_emulator.core.types import EngineConfig
from agentrt_sim.metrics import RunRecord, summarize
from agentrt_sim.plan import ProgramPlan, compile_program
from agentrt_sim.registry import PolicySpec, build_policies, describe_tenancy
from agentrt_sim.sim import SimConfig, Simulation
from agentrt_sim.workloads.generate import generate_programs
from agentrt_sim.workloads.program import Program
from agentrt_sim.workloads.tenants import TenantLoad, format_tenants, generate_tenant_programs

__all__ = [
    "BenchConfig",
    "RunOutcome",
    "keeps_up",
    "run_comparison",
    "run_one",
    "saturation_rate",
    "sweep",
]

#: ``progress(label, sim_time_s, end_s)``: called now and then during a run.
Progress = Callable[[str, float, float], None]


@dataclass(frozen=True)
class BenchConfig:
    """What to simulate: the workload, its load, the engines and the measurement window."""

    workload: str = "mixed"
    #: Program arrivals per second (Poisson).
    rate_per_s: float = 0.25
    #: Arrival window (seconds): programs arrive in ``[0, duration_s)``.
    duration_s: float = 600.0
    seed: int = 1
    #: Programs arriving before this are not measured (seconds); ``None`` = 10 % of duration.
    warmup_s: float | None = None
    #: After the arrival window, keep simulating at most this long for stragglers (seconds);
    #: ``None`` = as long as the arrival window.
    drain_s: float | None = None
    engines: int = 1
    profile: str = "a100-llama3-8b"
    engine: EngineConfig = field(default_factory=lambda: EngineConfig(max_model_len=131072))
    #: Workload parameter overrides ``{kind: {field: value}}``.
    workload_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: How often the controller refreshes engine gauges (seconds).
    scrape_interval_s: float = 0.0
    #: ``max_steps`` per ``EngineCore.step`` call (1 = no fused decode steps).
    max_fused_steps: int = 1 << 20
    #: Tenants, each its own workload and rate (``agentrt_sim.workloads.tenants``); when
    #: given they replace ``workload`` and ``rate_per_s``.
    tenants: tuple[TenantLoad, ...] = ()

    def resolved_warmup_s(self) -> float:
        return 0.1 * self.duration_s if self.warmup_s is None else self.warmup_s

    def sim_config(self) -> SimConfig:
        drain = self.duration_s if self.drain_s is None else self.drain_s
        return SimConfig(
            profile=self.profile,
            engines=self.engines,
            engine=self.engine,
            warmup_s=self.resolved_warmup_s(),
            window_end_s=self.duration_s,
            stop_s=self.duration_s + drain,
            scrape_interval_s=self.scrape_interval_s,
            max_fused_steps=self.max_fused_steps,
        )

    def programs(self) -> list[Program]:
        if self.tenants:
            return generate_tenant_programs(
                self.tenants,
                duration_s=self.duration_s,
                seed=self.seed,
                overrides=self.workload_params,
            )
        return generate_programs(
            self.workload,
            rate_per_s=self.rate_per_s,
            duration_s=self.duration_s,
            seed=self.seed,
            overrides=self.workload_params,
        )


@dataclass
class RunOutcome:
    """One configuration's run: the JSON summary and the raw record (for plots)."""

    summary: dict[str, Any]
    record: RunRecord


def label(spec: PolicySpec) -> str:
    """A short human-readable name of a configuration."""
    window = "unlimited" if spec.admission_window is None else str(spec.admission_window)
    text = f"{spec.policy}/{spec.router}/retention={spec.retention}/window={window}"
    if spec.tenancy:
        text += f"/tenancy={describe_tenancy(spec)}"
    if spec.replicas > 1:
        text += f"/replicas={spec.replicas}/shard={spec.shard}"
        text += "/split-window" if spec.replica_window == "split" else ""
    return text


def run_one(
    plans: Sequence[ProgramPlan],
    bench: BenchConfig,
    spec: PolicySpec,
    *,
    cost_model: CostFunction | None = None,
    progress: Progress | None = None,
) -> RunOutcome:
    """Simulate ``plans`` under ``spec``: the summary (with the configuration's keys first)
    and the record."""
    config = bench.sim_config()
    sim = Simulation(plans, config, build_policies(spec, cost_model))
    name = label(spec)
    end = config.stop_s if math.isfinite(config.stop_s) else bench.duration_s
    record = sim.run(None if progress is None else (lambda t: progress(name, t, end)))
    metrics = summarize(record, warmup_s=config.warmup_s, window_end_s=config.window_end_s)
    summary = {
        "workload": bench.workload,
        "rate": bench.rate_per_s,
        "duration_s": bench.duration_s,
        "seed": bench.seed,
        "policy": spec.policy,
        "router": spec.router,
        "retention": spec.retention,
        "admission_window": spec.admission_window,
        "engines": bench.engines,
        "profile": bench.profile,
        "warmup_s": config.warmup_s,
        "tenancy": spec.tenancy,
        "replicas": spec.replicas,
        "shard": spec.shard,
        "replica_window": spec.replica_window,
        **({"tenancy_mode": describe_tenancy(spec)} if spec.tenancy else {}),
        **({"tenant_loads": format_tenants(bench.tenants)} if bench.tenants else {}),
        **metrics,
    }
    if spec.retention != "off":
        # The retention driver's decisions by reason and the pins it placed: what a live
        # controller's `/agentrt/v1/queues` shows under `retention.counts`.
        waits = sim.waits
        summary["retention_counts"] = {
            **dict(sorted(waits.driver.decisions.items())),
            "pins": waits.pins_placed,
            "unpins": waits.unpins,
            "pinned_blocks": waits.pinned_blocks,
        }
    if spec.replicas > 1:
        summary["replica_calls"] = list(record.replica_calls)
        summary["programs_on_several_replicas"] = record.programs_on_several_replicas
        # Entries left in the replicas' process tables when the run stopped (unfinished
        # programs, and by call the fragments whose replica never saw the program end), and
        # the calls the replicas' retained lanes served.
        summary["process_table_entries_at_end"] = sum(len(d.table.keys()) for d in sim.dispatchers)
        summary["retained_lane_calls"] = sum(d.lane_total for d in sim.dispatchers)
    return RunOutcome(summary, record)


def run_comparison(
    bench: BenchConfig,
    specs: Sequence[PolicySpec],
    *,
    programs: Sequence[Program] | None = None,
    cost_model: CostFunction | None = None,
    progress: Progress | None = None,
) -> list[RunOutcome]:
    """Every configuration of ``specs`` on the same programs (generated from ``bench`` unless
    given), in order."""
    if not specs:
        raise ConfigError("nothing to compare: no policy configuration given")
    for spec in specs:  # fail on a bad name before spending minutes on the first run
        build_policies(spec)
    plans = [compile_program(p) for p in (programs if programs is not None else bench.programs())]
    return [run_one(plans, bench, s, cost_model=cost_model, progress=progress) for s in specs]


def keeps_up(result: Mapping[str, Any], *, min_ratio: float = 0.9) -> bool:
    """Whether a run kept up with its load: completed throughput >= ``min_ratio`` × the
    realised arrival rate (``arrival_rate_per_s``; the nominal ``rate`` for summaries without
    it) and no measured program left unfinished by more than 1 % of arrivals.

    Throughput counts completions inside the measurement window, so the warm-up must be
    longer than a program's end-to-end latency at light load, or the window still holds the
    ramp-up and a stable system looks as if it fell behind (long MCTS programs at a 10 %
    warm-up of a short run, for example)."""
    rate = float(result.get("arrival_rate_per_s") or result["rate"])
    completed = int(result["programs_completed"]) + int(result["programs_unfinished"])
    unfinished_ok = result["programs_unfinished"] <= 0.01 * max(completed, 1)
    return bool(result["throughput_programs_per_s"] >= min_ratio * rate and unfinished_ok)


def saturation_rate(results: Sequence[Mapping[str, Any]], policy: str) -> float | None:
    """Largest swept rate at which ``policy`` kept up (:func:`keeps_up`); ``None`` if none."""
    rates = [float(r["rate"]) for r in results if r["policy"] == policy and keeps_up(r)]
    return max(rates) if rates else None


def sweep(
    bench: BenchConfig,
    specs: Sequence[PolicySpec],
    rates: Sequence[float],
    *,
    cost_model: CostFunction | None = None,
    progress: Progress | None = None,
) -> list[RunOutcome]:
    """:func:`run_comparison` at each rate (same seed, so the same arrival process scaled)."""
    results: list[RunOutcome] = []
    for rate in rates:
        results += run_comparison(
            replace(bench, rate_per_s=rate), specs, cost_model=cost_model, progress=progress
        )
    return results
