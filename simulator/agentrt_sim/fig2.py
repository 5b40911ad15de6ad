"""Autellix Fig. 2 (arXiv 2502.13965; docs/scheduling.md) through the full simulator, for any
registered policy.

The four programs of :mod:`agentrt_sim.workloads.fig2` run on one ``unit-step`` engine with two
batch slots, behind the controller with an admission window of two (so every wait happens in
the controller's queue, where the policy orders it). ``window=None`` instead hands every call
to the engine at once (its FCFS queue orders them); for FCFS both give the same waits.

A call's waiting time is its release-to-finish time minus the engine steps it ran in; the
total over the example's ten calls is the figure the paper reports (FCFS 18).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrt_sim.plan import compile_program
from agentrt_sim.registry import PolicySpec, build_policies
from agentrt_sim.sim import SimConfig, Simulation
from agentrt_sim.workloads.fig2 import FIG2_PROFILE, fig2_engine_config, fig2_programs

__all__ = ["run_fig2"]


def run_fig2(
    policies: Sequence[str], *, window: int | None = 2, engine_policy: str = "fcfs"
) -> dict[str, dict[str, Any]]:
    """``{policy: {"total_wait": steps, "program_wait": {...}, ...}}`` for each policy.

    ``engine_policy="priority"`` lets the engine order its own queue by the scheduler's
    ``backend_priority`` (the second lever, docs/scheduling.md). Unknown policy names raise
    :class:`~agentrt.errors.ConfigError`.
    """
    from dataclasses import replace

    results: dict[str, dict[str, Any]] = {}
    engine = replace(fig2_engine_config(), scheduling_policy=engine_policy)  # type: ignore[arg-type]
    for policy in policies:
        plans = [compile_program(p) for p in fig2_programs()]
        sim = Simulation(
            plans,
            SimConfig(profile=FIG2_PROFILE, engine=engine),
            # The paper's example: one engine, no tool waits; no retention, no prefix index.
            build_policies(PolicySpec(policy, "round_robin", "off", admission_window=window)),
        )
        record = sim.run()
        programs = sorted(record.programs, key=lambda p: p.program_id)
        results[policy] = {
            "total_wait": sum(p.call_wait_s for p in programs),
            "program_wait": {p.program_id: p.call_wait_s for p in programs},
            "program_finish": {p.program_id: p.finish_s for p in programs},
            "mean_e2e": sum(p.e2e_s for p in programs) / len(programs),
            "makespan": max(p.finish_s for p in programs),
            "admission_window": window,
            "engine_policy": engine_policy,
        }
    return results
