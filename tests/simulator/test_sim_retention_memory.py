"""Retention under memory pressure in the simulator: the deadlock guard unblocks an engine
whose pins leave no room for a waiting call, and a pin of a program that died (cut off in a
tool wait) is released by its TTL — nothing is left in the process table, the driver or the
engine after a run."""

from __future__ import annotations

import pytest
from simtest_helpers import RecordingFcfs, react_program, simulate

from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention import RetentionDecision, WaitInfo
from agentrt_emulator.core.types import EngineConfig
from agentrt_sim.sim import SimConfig
from agentrt_sim.workloads.program import Program

pytestmark = pytest.mark.timeout(30)


class PinAll:
    """Pin every wait for ``ttl_s``: the pressure a too-eager policy would put on memory."""

    name = "pin-all"

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s

    def on_wait_start(self, facts: WaitInfo, now_s: float) -> RetentionDecision:
        return RetentionDecision(ttl_s=self.ttl_s, pin=True, reason="pin")

    def on_wait_end(
        self, program: ProgramKey, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        return None

    def on_call_arrived(self, program: ProgramKey, thread_id: str, now_s: float) -> None:
        return None

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        return None


#: 40 blocks of 16 tokens: two pinned contexts of ~14 blocks leave no room for a third call.
SMALL = SimConfig(
    profile="a100-llama3-8b", engine=EngineConfig(max_model_len=2048, num_gpu_blocks=40)
)


def _programs() -> list[Program]:
    """Three programs of ~14 blocks each (their own 200-token roots), waiting 50 s on a tool."""
    return [
        react_program(
            f"p{i}", arrival_s=float(i), outputs=(8, 8), tool_s=(50.0,), system=16, root=200
        )
        for i in range(3)
    ]


def test_the_guard_unpins_the_newest_pin_when_pins_block_the_engine() -> None:
    scheduler = RecordingFcfs()
    sim = simulate(_programs(), SMALL, scheduler=scheduler, retention=PinAll(1000.0))
    driver = sim.waits.driver
    assert driver.guard_releases >= 1
    # without the guard the third program's call waits for a pin's 1,000 s TTL
    assert sim.record.end_s < 100.0
    assert sim.record.unfinished_programs == 0
    assert len(driver) == 0 and driver.pinned("engine-0") == []
    assert len(scheduler.table) == 0
    assert sim.record.engine_stats_end[0].pinned_blocks == 0


def test_a_pin_of_a_program_cut_off_in_its_tool_wait_ends_at_its_ttl() -> None:
    """The run stops while the program waits (it never ends): its pin is still held; past the
    TTL the driver and the engine have released everything on their own."""
    config = SimConfig(profile="a100-llama3-8b", stop_s=10.0)
    program = react_program("dies", outputs=(8, 8), tool_s=(500.0,), system=200)
    sim = simulate([program], config, retention=PinAll(30.0))
    driver = sim.waits.driver
    core = sim.engines[0].core
    assert sim.record.unfinished_programs == 1
    (pinned,) = driver.pinned("engine-0")
    assert pinned.program.program_id == "dies" and pinned.until_s < 31.0
    assert core.stats().pinned_blocks > 0
    driver.tick(31.0)
    core.expire_pins(31.0)
    assert len(driver) == 0 and driver.pinned("engine-0") == []
    assert core.stats().pinned_blocks == 0
