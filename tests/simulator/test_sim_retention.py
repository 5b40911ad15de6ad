"""The retention seam: a policy's TTL becomes a native pin on the engine, released on time."""

from __future__ import annotations

import pytest
from simtest_helpers import RecordingDispatcher, RecordingFcfs, react_program, simulate

from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention import RetentionDecision, WaitInfo
from agentrt_sim.retention import NoRetention
from agentrt_sim.sim import SimConfig

pytestmark = pytest.mark.timeout(30)


class FixedTtl:
    """Test policy: retain every tool wait for ``ttl_s``; remembers what it was told."""

    name = "fixed-ttl"

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.starts: list[WaitInfo] = []
        self.ends: list[tuple[str, float]] = []
        self.ended: list[str] = []

    def on_wait_start(self, facts: WaitInfo, now_s: float) -> RetentionDecision:
        self.starts.append(facts)
        return RetentionDecision(ttl_s=self.ttl_s, pin=True)

    def on_wait_end(
        self, program: ProgramKey, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        self.ends.append((node_id, duration_s))

    def on_call_arrived(self, program: ProgramKey, thread_id: str, now_s: float) -> None:
        return None

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        self.ended.append(program.program_id)


def test_policy_gets_the_facts_and_its_ttl_pins_the_context() -> None:
    policy = FixedTtl(30.0)
    scheduler = RecordingFcfs()
    program = react_program(outputs=(40, 40, 40), tool_s=(1.0, 3.0), observation=64, system=128)
    sim = simulate(
        [program], SimConfig(profile="a100-llama3-8b"), scheduler=scheduler, retention=policy
    )
    assert [f.node_id for f in policy.starts] == ["t1", "t2"]
    first, second = policy.starts
    assert first.predicted_duration_s is None  # no history yet for "search"
    assert second.predicted_duration_s == pytest.approx(1.0)  # mean of the finished waits
    assert first.backend_id == "engine-0" and first.kind == "tool" and first.name == "search"
    # the pinned context is call 0's prompt + output
    assert first.context_tokens == 128 + 20 + 40
    assert [node for node, _ in policy.ends] == ["t1", "t2"]
    assert [duration for _, duration in policy.ends] == pytest.approx([1.0, 3.0])
    assert policy.ended == ["p"]
    assert sim.waits.pins_placed == 2 and sim.waits.pinned_blocks > 0
    # the returning calls were tagged with the engine holding their KV and went through the
    # dispatcher's retained lane, not the scheduler's queues
    dispatcher = sim.dispatcher
    assert isinstance(dispatcher, RecordingDispatcher)
    tagged = [c.facts.node_id for c in dispatcher.submitted if c.retained_backend is not None]
    assert tagged == ["c1", "c2"]
    assert dispatcher.lane_total == 2
    assert [c.facts.node_id for c in scheduler.submitted] == ["c0"]
    # every pin was released (next call scheduled, or program end)
    assert sim.record.engine_stats_end[0].pinned_blocks == 0


def test_expired_ttl_does_not_tag_the_returning_call() -> None:
    policy = FixedTtl(0.5)
    scheduler = RecordingFcfs()
    program = react_program(outputs=(4, 4), tool_s=(2.0,))
    sim = simulate(
        [program], SimConfig(profile="a100-llama3-8b"), scheduler=scheduler, retention=policy
    )
    assert isinstance(sim.dispatcher, RecordingDispatcher)
    assert [c.facts.node_id for c in sim.dispatcher.submitted] == ["c0", "c1"]
    assert all(c.retained_backend is None for c in sim.dispatcher.submitted)


def test_retention_off_places_no_pins_and_the_process_table_sees_tool_waits() -> None:
    scheduler = RecordingFcfs()
    sim = simulate(
        [react_program(tool_s=(1.0, 2.0))],
        SimConfig(profile="a100-llama3-8b"),
        scheduler=scheduler,
        retention=NoRetention(),
    )
    assert sim.waits.pins_placed == 0
    assert len(scheduler.table) == 0  # the program ended and left the table


def test_bench_sim_reports_the_retention_drivers_counts_beside_the_controllers() -> None:
    """`retention_counts` in a run's summary: decisions by reason, pins placed and the blocks
    they held — the keys a live controller shows under `retention.counts`; none without
    retention."""
    from agentrt_emulator.core.types import EngineConfig
    from agentrt_sim.registry import PolicySpec
    from agentrt_sim.runner import BenchConfig, run_comparison

    # Coding programs arriving twice as fast as one small engine serves them: memory is
    # short, so the driver decides to pin some waits and the engine holds their blocks.
    bench = BenchConfig(
        workload="coding",
        rate_per_s=0.4,
        duration_s=60.0,
        seed=1,
        drain_s=3000.0,
        engine=EngineConfig(num_gpu_blocks=4096, max_num_seqs=8),
        workload_params={
            "coding": {
                "calls_mean": 12.0,
                "system_tokens": 1000,
                "repo_tokens": 4000,
                "final_context_tokens_mean": 16000.0,
                "tool_max_s": 20.0,
            }
        },
    )
    on, off = run_comparison(bench, [PolicySpec(), PolicySpec(retention="off")])
    counts = on.summary["retention_counts"]
    decisions = {k: v for k, v in counts.items() if k not in ("pins", "unpins", "pinned_blocks")}
    assert decisions["pin"] > 0 and sum(decisions.values()) > decisions["pin"]
    # a pin decision pins the thread's context; its returning call, while it waits to be
    # admitted, extends the pin (one more pin action)
    assert counts["pins"] >= decisions["pin"]
    assert counts["pinned_blocks"] > counts["pins"]
    assert 0 < counts["unpins"] <= counts["pins"]  # a pin is released once, re-pins included
    assert "retention_counts" not in off.summary
