"""Scheduling policies (fcfs / priority) and preemption by recompute under block pressure."""

from __future__ import annotations

import pytest

from agentrt.errors import ConfigError
from agentrt_emulator.core import EngineCore

from .helpers import Trace, engine, record, request, run

pytestmark = pytest.mark.timeout(10)

# (id, priority, arrival_s), added in this order
ARRIVALS = [
    ("background", 9, 0.0),
    ("normal-b", 1, 1.0),
    ("normal-a", 1, 1.0),
    ("late-urgent", 0, 3.0),
    ("normal-c", 1, 0.5),
]


@pytest.mark.parametrize(
    ("policy", "expected_order"),
    [
        # fcfs: the order requests reached the engine
        ("fcfs", ["background", "normal-b", "normal-a", "late-urgent", "normal-c"]),
        # priority: lower value first, ties by arrival time, then by id
        ("priority", ["late-urgent", "normal-c", "normal-a", "normal-b", "background"]),
    ],
)
def test_admission_order(policy: str, expected_order: list[str]) -> None:
    core = engine(max_num_seqs=1, scheduling_policy=policy)
    for rid, priority, arrival in ARRIVALS:
        core.add_request(request(rid, 4, 1, priority=priority, arrival_s=arrival))
    trace = run(core)
    assert sorted(trace.finish_step, key=trace.finish_step.__getitem__) == expected_order


def test_better_priority_waits_instead_of_preempting_when_memory_suffices() -> None:
    core = engine(max_num_seqs=1, scheduling_policy="priority")
    core.add_request(request("running", 4, 5, priority=5))
    assert core.step(0.0) is not None
    core.add_request(request("urgent", 4, 5, priority=0, arrival_s=1.0))
    trace = run(core, now_s=1.0)
    assert trace.finish_step["running"] < trace.first_token_step["urgent"]
    assert core.stats().num_preemptions == 0


def _pressure_scenario(policy: str) -> tuple[EngineCore, Trace]:
    """5 blocks of 4 tokens. A (priority 5) starts alone; B (priority 0) joins at step 3.
    At step 9 B needs a fifth block while A already holds three: somebody must go."""
    core = engine(block_size=4, num_gpu_blocks=5, scheduling_policy=policy)
    core.add_request(request("A", 4, 16, priority=5, first_token=100))
    trace = Trace()
    steps_done = 0
    for step_index in range(200):
        if step_index == 2:
            core.add_request(request("B", [50, 51, 52], 8, priority=0, arrival_s=trace.now_s))
        result = core.step(trace.now_s)
        if result is None:
            break
        record(trace, result, steps_done)
        steps_done += result.num_steps
    return core, trace


@pytest.mark.parametrize(
    ("policy", "victim", "survivor"), [("priority", "A", "B"), ("fcfs", "B", "A")]
)
def test_preemption_victim_and_recompute(policy: str, victim: str, survivor: str) -> None:
    core, trace = _pressure_scenario(policy)
    preempting = [s for s in trace.steps if s.preempted]
    assert preempting, "the scenario must run out of blocks"
    first = preempting[0]
    assert first.preempted == [victim]
    # the victim does not run in the step that preempts it (its budget is given back)
    assert victim not in {p.request_id for p in first.progress}
    stats = core.stats()
    assert stats.num_preemptions == len(trace.preempted) >= 1
    # everybody still gets exactly its output, the first token is reported once
    assert trace.tokens == {"A": 16, "B": 8}
    assert stats.generation_tokens == 24
    assert trace.first_token_step["A"] == 1
    assert trace.finish_step[survivor] < trace.finish_step[victim]
    # the victim's KV was computed again on resumption (cache hits cover part of it)
    assert stats.recomputed_prompt_tokens > 0
    assert not core.has_unfinished()
    assert core.num_free_blocks == 5


def test_priority_victim_is_unscheduled_within_the_step() -> None:
    """With priority scheduling the victim (A) was already scheduled earlier in the same step;
    it is taken out of the batch and B runs alone."""
    _, trace = _pressure_scenario("priority")
    first = next(s for s in trace.steps if s.preempted)
    assert [p.request_id for p in first.progress] == ["B"]
    assert first.num_steps == 1


def test_prefix_stats_count_resumption_again() -> None:
    core, trace = _pressure_scenario("priority")
    stats = core.stats()
    # A is looked up twice (first scheduling and resumption), B once
    assert stats.prefix_cache_queries > 4 + 3
    assert trace.cached["A"] == 0  # cached tokens of the first scheduling are kept


def test_a_request_alone_that_cannot_grow_preempts_itself() -> None:
    """A single running request that needs a block held by a pin preempts itself; the
    engine then reports no work until the pin goes (vLLM wastes that iteration too)."""
    core = engine(block_size=4, num_gpu_blocks=3)
    core.add_request(request("warm", [9] * 8, 1))
    run(core)
    assert core.pin("p", [9] * 8, cache_salt=None, ttl_s=50.0, now_s=0.0) == 2
    core.add_request(request("r", [1, 2, 3], 6))
    trace = run(core)
    assert trace.preempted == ["r"]
    assert trace.steps[-1].progress == [] and trace.steps[-1].num_steps == 0
    assert core.has_unfinished() and core.step(10.0) is None
    assert core.next_pin_expiry_s == 50.0
    rest = run(core, now_s=50.0)
    assert rest.tokens["r"] + trace.tokens["r"] == 6
    assert not core.has_unfinished()


def _older_short_newer_long(order: str) -> tuple[EngineCore, Trace]:
    """7 blocks of 4 tokens. ``short`` (4-token prompt) is admitted first, ``long`` (12-token
    prompt) a step later; both decode 12 tokens, so they outgrow the 7 blocks together."""
    core = engine(block_size=4, num_gpu_blocks=7, preemption_order=order)
    core.add_request(request("short", 4, 12, first_token=100))
    trace = Trace()
    steps_done = 0
    for step_index in range(200):
        if step_index == 1:
            core.add_request(request("long", range(200, 212), 12, arrival_s=trace.now_s))
        result = core.step(trace.now_s)
        if result is None:
            break
        record(trace, result, steps_done)
        steps_done += result.num_steps
    return core, trace


@pytest.mark.parametrize(
    ("order", "victim"),
    [
        # vLLM: the most recently admitted goes, whatever it holds
        ("newest", "long"),
        # ThunderAgent's shortest-first eviction: the fewest tokens of context goes
        ("shortest", "short"),
    ],
)
def test_preemption_order_picks_the_victim(order: str, victim: str) -> None:
    core, trace = _older_short_newer_long(order)
    preempting = [s for s in trace.steps if s.preempted]
    assert preempting, "the scenario must run out of blocks"
    assert preempting[0].preempted == [victim]
    assert trace.tokens == {"short": 12, "long": 12}
    assert not core.has_unfinished()
    assert core.num_free_blocks == 7


def test_unknown_preemption_order_is_refused() -> None:
    with pytest.raises(ConfigError, match="preemption_order"):
        engine(preemption_order="oldest")
