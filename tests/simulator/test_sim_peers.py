"""The peer-like configurations (``agentrt_sim.peers``): program FCFS, Continuum's TTL rule,
and every preset running on the simulator."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.cost_model import CostModel
from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention.api import ToolWaitFacts
from agentrt_controller.scheduling.gittins import GittinsScheduler
from agentrt_controller.scheduling.srpt import SrptScheduler
from agentrt_emulator.core.types import EngineConfig
from agentrt_sim.metrics import summarize
from agentrt_sim.peers import (
    EXTRA,
    PEERS,
    ContinuumConfig,
    ContinuumRetention,
    ProgramFcfsScheduler,
    peer,
)
from agentrt_sim.plan import compile_program
from agentrt_sim.runner import BenchConfig
from agentrt_sim.sim import Simulation
from tests.controller_policies.helpers import make_call

pytestmark = pytest.mark.timeout(120)


def test_program_fcfs_orders_by_the_program_not_the_call() -> None:
    scheduler = ProgramFcfsScheduler()
    old_first = make_call("old", 0.0)
    scheduler.submit(old_first, 0.0)
    assert scheduler.pop(0.0) is old_first
    new_call = make_call("new", 1.0)
    old_second = make_call("old", 2.0)  # the old program's next call, after a tool
    scheduler.submit(new_call, 1.0)
    scheduler.submit(old_second, 2.0)
    # the old program goes first; its engine priority is its arrival rank
    assert scheduler.backend_priority(old_second) == 0
    assert scheduler.backend_priority(new_call) == 1
    assert scheduler.pop(2.0) is old_second
    assert scheduler.pop(2.0) is new_call
    assert scheduler.pop(2.0) is None
    # requeued: back to its program's place
    scheduler.submit(new_call, 3.0)
    third = make_call("old", 3.5)
    scheduler.submit(third, 3.5)
    popped = scheduler.pop(4.0)
    assert popped is third
    scheduler.requeue(popped, 4.0)
    assert scheduler.pop(4.0) is third
    scheduler.on_program_end(ProgramKey.untagged("old", None), 5.0)
    assert scheduler.backend_priority(make_call("old", 6.0)) == 2  # a new program now


def _wait(context: int, *, usage: float | None = 0.1, name: str = "pytest") -> ToolWaitFacts:
    return ToolWaitFacts(
        program=ProgramKey.untagged("p", None),
        thread_id="main",
        node_id="n1",
        kind="tool",
        name=name,
        predicted_duration_s=None,
        context_tokens=context,
        backend_id="engine-0",
        kv_cache_usage=usage,
        kv_capacity_tokens=400_000,
    )


def _learn(policy: ContinuumRetention, durations: list[float], name: str = "pytest") -> None:
    for index, duration in enumerate(durations):
        facts = _wait(1000, name=name)
        policy.on_wait_start(facts, float(index))
        policy.on_wait_end(facts.program, "main", "n1", duration, float(index) + duration)


@pytest.mark.parametrize(
    ("context", "delay_s", "ttl_s", "p"),
    [
        # benefit = T·η + 1e-4 s × context; value(τ) = P(τ)·benefit − τ over the learned
        # durations 1, 2, 4, 30 s (P = 0.25, 0.5, 0.75, 1)
        (10_000, 0.0, 0.0, 0.0),  # benefit 1 s: every value < 0: no pin
        (80_000, 0.0, 2.0, 0.5),  # benefit 8 s: 1, 2, 2, −22 (a tie keeps the shorter)
        (80_000, 12.0, 4.0, 0.75),  # benefit 20 s: 4, 8, 11, −10
        (80_000, 192.0, 30.0, 1.0),  # benefit 200 s: 49, 98, 146, 170
    ],
)
def test_continuum_ttl_rule(context: int, delay_s: float, ttl_s: float, p: float) -> None:
    policy = ContinuumRetention(ContinuumConfig(queueing_delay_s=delay_s, min_tool_samples=1))
    _learn(policy, [1.0, 2.0, 4.0, 30.0])
    decision = policy.on_wait_start(_wait(context), 100.0)
    assert (decision.ttl_s, decision.p_return_in_ttl) == (ttl_s, p)
    assert decision.pin is (ttl_s > 0)
    assert decision.reason == ("pin" if ttl_s > 0 else "not_worth_it")


def test_continuum_ttl_values() -> None:
    policy = ContinuumRetention()
    samples = [1.0, 2.0, 4.0, 30.0]
    # benefit 8 s: P·8 − τ = 1, 2, 2, −22: the first best, τ = 2 (P = 0.5)
    assert policy.ttl_for(samples, 8.0) == (2.0, 0.5)
    # benefit 48 s: 11, 22, 32, 18 → τ = 4
    assert policy.ttl_for(samples, 48.0) == (4.0, 0.75)
    # benefit 200 s: 49, 98, 146, 170 → τ = 30 (every sample covered)
    assert policy.ttl_for(samples, 200.0) == (30.0, 1.0)
    # ties in the samples count together: P(2) = 3/4
    assert policy.ttl_for([1.0, 2.0, 2.0, 9.0], 8.0) == (2.0, 0.75)
    assert policy.ttl_for(samples, 0.5) == (0.0, 0.0)


def test_continuum_falls_back_on_every_tool_below_its_sample_floor() -> None:
    policy = ContinuumRetention(ContinuumConfig(min_tool_samples=3))
    first = policy.on_wait_start(_wait(80_000), 0.0)
    assert first.reason == "no_history" and not first.pin
    policy.on_wait_end(ProgramKey.untagged("p", None), "main", "n1", 1.0, 1.0)
    _learn(policy, [1.0, 1.0], name="build")
    # "pytest" has 1 sample (< 3): the global CDF of all 3 is used
    decision = policy.on_wait_start(_wait(80_000), 10.0)
    assert decision.pin and decision.ttl_s == 1.0


def test_continuum_deadlock_guard() -> None:
    policy = ContinuumRetention(ContinuumConfig(min_tool_samples=1))
    _learn(policy, [1.0, 2.0])
    assert policy.on_wait_start(_wait(80_000, usage=0.5), 0.0).pin
    full = policy.on_wait_start(_wait(80_000, usage=0.9), 0.0)  # 0.9 + 0.2 >= 1
    assert full.reason == "memory_full" and not full.pin and full.ttl_s == 0.0


def test_continuum_history_is_bounded() -> None:
    policy = ContinuumRetention(ContinuumConfig(min_tool_samples=1, history_size=3))
    _learn(policy, [100.0, 1.0, 1.0, 1.0])  # the 100 s wait is forgotten
    assert policy.on_wait_start(_wait(80_000), 0.0).ttl_s == 1.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("queueing_delay_s", -1.0), ("eta", 1.5), ("reload_s_per_token", math.inf)],
)
def test_continuum_config_refuses_bad_values(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=field):
        ContinuumConfig(**{field: value})


def test_unknown_configuration_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="unknown configuration 'vllm'; valid: direct"):
        peer("vllm")


def test_every_preset_runs_and_continuum_pins() -> None:
    # research programs (large fetched results) on an engine of 3,000 blocks (48 K tokens):
    # contexts compete for memory
    results = {}
    for name, preset in PEERS.items():
        engine = preset.engine_config(EngineConfig(max_model_len=131072, num_gpu_blocks=3000))
        bench = BenchConfig(
            workload="research", rate_per_s=0.2, duration_s=40, seed=2, engine=engine
        )
        plans = [compile_program(p) for p in bench.programs()]
        policies = preset.build(CostModel(), None, 2.0)
        config = bench.sim_config()
        record = Simulation(plans, config, policies).run(None)
        results[name] = summarize(
            record, warmup_s=config.warmup_s, window_end_s=config.window_end_s
        )
        if name == "continuum":
            assert isinstance(policies.retention, ContinuumRetention)
            assert policies.retention.decisions.get("pin", 0) > 0
    assert all(r["programs_completed"] > 0 for r in results.values())
    # a stock engine preempts here; the defaults' memory-aware admission (docs/scheduling.md,
    # "Admission under memory pressure") holds new programs back instead
    assert results["direct"]["preemptions"] > 0
    assert results["defaults"]["preemptions"] < results["direct"]["preemptions"]
    assert results["direct+cpu"]["reloaded_tokens"] > 0
    assert results["continuum"]["reloaded_tokens"] > 0  # its CPU tier, as evaluated
    assert "reloaded_tokens" not in results["direct"]


def test_the_extra_configurations_run() -> None:
    # Continuum without its CPU tier pins on the engines the defaults get; the bounds schedule
    # by the plans' remaining service (clairvoyant SRPT), with and without the tier; gittins
    # is the defaults with the learned program order, with and without the tier
    assert set(EXTRA) == {
        "continuum-gpu",
        "gittins",
        "gittins+cpu",
        "program-fcfs+cpu",
        "oracle",
        "oracle+cpu",
    }
    with pytest.raises(ConfigError, match=r"valid: direct.*oracle\+cpu"):
        peer("srpt")
    for name in EXTRA:
        preset = peer(name)
        engine = preset.engine_config(EngineConfig(max_model_len=131072, num_gpu_blocks=3000))
        assert (engine.kv_offloading_size > 0) == name.endswith("+cpu")
        bench = BenchConfig(
            workload="research", rate_per_s=0.2, duration_s=40, seed=2, engine=engine
        )
        policies = preset.build(CostModel(), None, 2.0)
        if name.startswith("oracle"):
            assert isinstance(policies.dispatcher.scheduler, SrptScheduler)
        if name.startswith("gittins"):
            assert isinstance(policies.dispatcher.scheduler, GittinsScheduler)
        if name == "program-fcfs+cpu":  # the defaults' controller, Continuum's order
            assert isinstance(policies.dispatcher.scheduler, ProgramFcfsScheduler)
            assert policies.dispatcher.memory is not None
        config = bench.sim_config()
        plans = [compile_program(p) for p in bench.programs()]
        record = Simulation(plans, config, policies).run(None)
        summary = summarize(record, warmup_s=config.warmup_s, window_end_s=config.window_end_s)
        assert summary["programs_completed"] > 0
        if name == "continuum-gpu":
            assert isinstance(policies.retention, ContinuumRetention)
            assert policies.retention.decisions.get("pin", 0) > 0
            assert "reloaded_tokens" not in summary  # no tier: nothing is reloaded


def test_continuum_reads_the_queue_wait_and_reload_speed_from_the_facts() -> None:
    policy = ContinuumRetention(ContinuumConfig(queueing_delay_s=0.0, min_tool_samples=1))
    _learn(policy, [1.0, 2.0, 4.0, 30.0])
    # benefit = 192 s of queue wait + 80,000 tokens × 1e-4 s = 200 s: τ = 30 (see above)
    facts = replace(_wait(80_000), queue_wait_s=192.0)
    assert policy.on_wait_start(facts, 0.0).ttl_s == 30.0
    # with a CPU tier reloading at 1e-5 s per token: benefit 0.8 s, nothing worth a pin
    facts = replace(_wait(80_000), reload_s_per_token=1e-5)
    assert policy.on_wait_start(facts, 0.0).reason == "not_worth_it"
