"""Mechanics of the discrete-queue schedulers: entry levels, demotion, FCFS and deadlines
inside a level, requeue, cancel, retention boost, SRPT, snapshots."""

from __future__ import annotations

import json
import math

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.api import Scheduler
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.scheduling.multilevel import MlfqScheduler, PlasScheduler
from agentrt_controller.scheduling.srpt import OracleBook, OracleFigures, SrptScheduler
from tests.controller_policies.helpers import make_call, oracle_call

pytestmark = pytest.mark.timeout(30)

#: A program of the default session.
K = ProgramKey.untagged


def _serve(scheduler: Scheduler, program: str, service_s: float, now_s: float = 0.0) -> None:
    call = make_call(program, now_s)
    scheduler.submit(call, now_s)
    assert scheduler.pop(now_s) is call
    scheduler.on_finish(call, service_s, now_s)


def _drain(scheduler: Scheduler, now_s: float) -> list[CallEntry]:
    out = []
    while (call := scheduler.pop(now_s)) is not None:
        out.append(call)
    return out


@pytest.mark.parametrize(
    ("policy", "expected_level"), [("mlfq", 0), ("plas", 2), ("atlas", 2), ("fcfs", 0)]
)
def test_entry_level_by_policy(policy: str, expected_level: int) -> None:
    """A program with 3 s of attained service: program-level policies send its next call to
    [2, 8) (index 2); per-call MLFQ sends every new call to Q1."""
    scheduler = build_scheduler(policy)
    _serve(scheduler, "long", 3.0)
    call = make_call("long")
    scheduler.submit(call, 1.0)
    assert call.level == expected_level
    assert scheduler.backend_priority(call) == expected_level


def test_fresh_programs_overtake_long_ones_under_plas() -> None:
    scheduler = PlasScheduler()
    _serve(scheduler, "long", 10.0)
    old = make_call("long", 1.0)
    scheduler.submit(old, 1.0)
    fresh = make_call("fresh", 2.0)
    scheduler.submit(fresh, 2.0)
    assert _drain(scheduler, 3.0) == [fresh, old]


def test_fcfs_inside_a_level_and_deadline_breaks_ties() -> None:
    scheduler = PlasScheduler()
    late = make_call("a", 0.0)
    tie_loose = make_call("b", 1.0, deadline_s=50.0)
    tie_tight = make_call("c", 1.0, deadline_s=20.0)
    no_deadline = make_call("d", 1.0)
    scheduler.submit(late, 0.0)
    for call in (tie_loose, tie_tight, no_deadline):
        scheduler.submit(call, 1.0)
    assert _drain(scheduler, 2.0) == [late, tie_tight, tie_loose, no_deadline]


def test_drop_expired_removes_only_past_deadlines() -> None:
    scheduler = PlasScheduler()
    soon = make_call("a", deadline_s=5.0)
    later = make_call("b", deadline_s=10.0)
    never = make_call("c")
    for call in (soon, later, never):
        scheduler.submit(call, 0.0)
    assert scheduler.drop_expired(4.9) == []
    assert scheduler.drop_expired(5.0) == [soon]
    assert soon.wait_s == 5.0
    assert scheduler.queued() == 2
    assert scheduler.table.get(K("a")) is not None
    entry = scheduler.table.get(K("a"))
    assert entry is not None and entry.active == {} and entry.waiting_s == 5.0
    assert _drain(scheduler, 6.0) == [later, never]
    assert scheduler.drop_expired(100.0) == []  # popped calls are not dropped
    assert isinstance(scheduler, PlasScheduler) and scheduler.dropped_total == 1


def test_requeue_keeps_the_place() -> None:
    scheduler = PlasScheduler()
    first, second = make_call("a"), make_call("b")
    scheduler.submit(first, 0.0)
    scheduler.submit(second, 0.0)
    popped = scheduler.pop(1.0)
    assert popped is first
    scheduler.requeue(first, 2.0)
    assert _drain(scheduler, 3.0) == [first, second]
    assert first.wait_s == pytest.approx(1.0 + 1.0)


def test_cancel_removes_a_queued_call_once() -> None:
    scheduler = PlasScheduler()
    keep, gone = make_call("a"), make_call("b")
    scheduler.submit(keep, 0.0)
    scheduler.submit(gone, 0.0)
    assert scheduler.cancel(gone, 1.0) is True
    assert scheduler.cancel(gone, 1.0) is False
    assert _drain(scheduler, 1.0) == [keep]
    assert scheduler.cancel(keep, 2.0) is False  # running, not queued


def test_demotion_by_quantum_counts_streamed_tokens() -> None:
    """Q1 quantum 16, Q2 32: 16 tokens demote once, 48 more twice; the last level keeps it."""
    scheduler = MlfqScheduler()
    call = make_call("p")
    scheduler.submit(call, 0.0)
    scheduler.pop(0.0)
    scheduler.on_tokens(call, 15, 1.0)
    assert call.level == 0
    scheduler.on_tokens(call, 1, 1.1)
    assert (call.level, call.quantum_tokens) == (1, 0)
    scheduler.on_tokens(call, 32 + 64, 2.0)
    assert (call.level, call.quantum_tokens) == (3, 0)
    scheduler.on_tokens(call, 10_000, 3.0)
    assert call.level == 4  # QK never demotes further
    assert scheduler.backend_priority(call) == 4
    assert scheduler.demotions_total == 4


def test_a_demoted_queued_call_moves_to_its_new_level() -> None:
    """Drivers that preempt (the step replay) demote calls that are back in the queues."""
    scheduler = MlfqScheduler(SchedulerConfig(boundaries_s=(1.0,), quanta_tokens=(2, 2)))
    demoted, fresh = make_call("a"), make_call("b")
    scheduler.submit(demoted, 0.0)
    scheduler.submit(fresh, 1.0)
    scheduler.on_tokens(demoted, 2, 1.5)
    assert demoted.level == 1
    assert _drain(scheduler, 2.0) == [fresh, demoted]


def test_retained_programs_enter_q1() -> None:
    scheduler = PlasScheduler()
    _serve(scheduler, "long", 40.0)
    scheduler.table.set_retention(K("long"), 100.0)
    hot = make_call("long", 50.0)
    scheduler.submit(hot, 50.0)
    assert hot.level == 0 and hot.retention_boost is True
    cold = make_call("long", 101.0)
    scheduler.submit(cold, 101.0)
    assert cold.level == 4
    off = PlasScheduler(SchedulerConfig(boost_retained=False))
    _serve(off, "long", 40.0)
    off.table.set_retention(K("long"), 100.0)
    call = make_call("long", 50.0)
    off.submit(call, 50.0)
    assert call.level == 4


def test_program_end_forgets_the_program() -> None:
    scheduler = PlasScheduler()
    _serve(scheduler, "p", 50.0)
    scheduler.on_program_end(K("p"), 1.0)
    call = make_call("p", 2.0)
    scheduler.submit(call, 2.0)
    assert call.level == 0  # a re-run with the same id starts afresh


def test_snapshot_is_json_and_ordered() -> None:
    scheduler = PlasScheduler()
    _serve(scheduler, "long", 3.0)
    calls = [make_call("long", 0.0), make_call("fresh", 1.0), make_call("fresh2", 2.0)]
    for call in calls:
        scheduler.submit(call, call.facts.arrival_s)
    snap = scheduler.snapshot(5.0)
    json.dumps(snap)
    assert snap["queued"] == 3
    levels = {q["level"]: [c["call_id"] for c in q["calls"]] for q in snap["queues"]}
    assert levels[0] == [calls[1].facts.call_id, calls[2].facts.call_id]
    assert levels[2] == [calls[0].facts.call_id]
    assert snap["queues"][4]["range_s"] == [32.0, None]
    assert scheduler.level_lengths() == [2, 0, 1, 0, 0]


# --- SRPT ---------------------------------------------------------------------------------------


def test_srpt_orders_by_remaining_program_service() -> None:
    book = OracleBook()
    scheduler = build_scheduler("srpt", oracle=book)
    assert isinstance(scheduler, SrptScheduler)
    big = oracle_call(book, "big", remaining_s=50.0, service_s=1.0)
    small = oracle_call(book, "small", remaining_s=3.0, service_s=2.0)
    tiny = oracle_call(book, "tiny", remaining_s=3.0, service_s=1.0)
    for call in (big, small, tiny):
        scheduler.submit(call, 0.0)
    assert scheduler.backend_priority(big) == 4
    assert _drain(scheduler, 1.0) == [tiny, small, big]


def test_srpt_requeue_rekeys_by_updated_remaining_work() -> None:
    book = OracleBook()
    scheduler = build_scheduler("srpt", oracle=book)
    a = oracle_call(book, "a", remaining_s=5.0)
    b = oracle_call(book, "b", remaining_s=4.0)
    scheduler.submit(a, 0.0)
    scheduler.submit(b, 0.0)
    assert scheduler.pop(0.0) is b
    book.figures[b.facts.call_id] = OracleFigures(None, 6.0)  # its program turned out longer
    scheduler.requeue(b, 1.0)
    assert _drain(scheduler, 1.0) == [a, b]


@pytest.mark.parametrize("remaining", [None, -1.0, math.inf, math.nan])
def test_srpt_rejects_calls_without_oracle_data(remaining: float | None) -> None:
    book = OracleBook()
    scheduler = build_scheduler("srpt", oracle=book)
    with pytest.raises(ConfigError, match="oracle"):
        scheduler.submit(oracle_call(book, "p", remaining_s=remaining), 0.0)
    with pytest.raises(ConfigError, match="oracle"):  # a call the oracle does not know
        scheduler.submit(make_call("q"), 0.0)


def test_srpt_never_promotes() -> None:
    book = OracleBook()
    scheduler = build_scheduler("srpt", SchedulerConfig(starvation_beta=0.1), oracle=book)
    call = oracle_call(book, "p", remaining_s=100.0)
    scheduler.submit(call, 0.0)
    assert isinstance(scheduler, SrptScheduler)
    assert scheduler.promote_starving(1e6) == []
