"""The process table: accounting, tool waits, expiry, snapshot, and flat memory at scale."""

from __future__ import annotations

import gc
import json
import math
import sys
import tracemalloc

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import build_scheduler
from tests.controller_policies.helpers import make_facts

pytestmark = pytest.mark.timeout(60)

#: A program of the default session.
K = ProgramKey.untagged


def _in(session_id: str, program_id: str) -> ProgramKey:
    """A program of session ``session_id``."""
    return ProgramKey(session_id=session_id, program_id=program_id)


KEY = K("p")


def test_call_lifecycle_accounts_wait_service_and_critical_path() -> None:
    table = ProcessTable()
    call = make_facts("p", 1.0, thread_id="t1")
    entry = table.call_arrived(call, 1.0)
    assert entry.active[call.call_id].state == "queued"
    assert entry.last_arrival_s == 1.0 and entry.threads == {"t1": 1}
    table.call_started(call, 4.0)
    table.bind(call, "engine-0", 4.0)
    assert entry.waiting_s == 3.0 and entry.backends == {"engine-0": 1}
    assert entry.active[call.call_id].backend_id == "engine-0"
    table.call_finished(call, 2.5, 9.0)
    assert entry.active == {}
    assert entry.attained_service_s == 2.5 and entry.critical_path_s == 2.5
    assert entry.calls_finished == 1 and entry.last_completion_s == 9.0


def test_requeue_and_drop_count_every_queued_segment() -> None:
    table = ProcessTable()
    call = make_facts("p", 0.0)
    entry = table.call_arrived(call, 0.0)
    table.call_started(call, 2.0)
    table.call_requeued(call, 2.5)
    table.call_dropped(call, 4.5)
    assert entry.waiting_s == pytest.approx(4.0)
    assert entry.active == {} and entry.attained_service_s == 0.0


def test_events_for_unknown_programs_are_ignored() -> None:
    table = ProcessTable()
    ghost = make_facts("ghost")
    table.call_started(ghost, 1.0)
    table.call_finished(ghost, 1.0, 1.0)
    table.call_dropped(ghost, 1.0)
    table.bind(ghost, "b", 1.0)
    assert table.tool_wait_end(K("ghost"), 1.0, thread_id="t", node_id="n") is None
    assert len(table) == 0


def test_sessions_keep_programs_apart() -> None:
    table = ProcessTable()
    a = make_facts("same", session_id="tenant-a")
    b = make_facts("same", session_id="tenant-b")
    table.call_arrived(a, 0.0)
    table.call_arrived(b, 0.0)
    table.call_finished(a, 3.0, 1.0)
    assert len(table) == 2
    entry_a, entry_b = (
        table.get(_in("tenant-a", "same")),
        table.get(_in("tenant-b", "same")),
    )
    assert entry_a is not None and entry_b is not None
    assert (entry_a.attained_service_s, entry_b.attained_service_s) == (3.0, 0.0)


def test_start_and_end() -> None:
    table = ProcessTable()
    entry = table.start(KEY, 0.0, name="react", deadline_s=30.0)
    assert entry.name == "react" and entry.deadline_s == 30.0
    assert table.end(KEY, 1.0) is entry
    assert table.end(KEY, 1.0) is None
    assert KEY not in table


def test_tool_wait_records_duration() -> None:
    table = ProcessTable()
    table.start(KEY, 0.0)
    wait = table.tool_wait_start(
        KEY, 1.0, thread_id="t", node_id="n", tool_name="search", predicted_duration_s=2.0
    )
    assert wait.tool_name == "search"
    entry = table.get(KEY)
    assert entry is not None and entry.held_until_s() == 3.0
    assert table.tool_wait_end(KEY, 4.0, thread_id="t", node_id="n") is wait
    assert entry.tool_wait_s == 3.0 and entry.tool_waits == {}


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_idle_timeout_must_be_positive_and_finite(bad: float) -> None:
    with pytest.raises(ConfigError):
        ProcessTable(idle_timeout_s=bad)


def test_expire_removes_only_idle_programs() -> None:
    table = ProcessTable(idle_timeout_s=10.0)
    table.start(_in("s", "idle"), 0.0)
    busy = make_facts("busy", session_id="s")
    table.call_arrived(busy, 0.0)
    table.start(_in("s", "tool"), 0.0)
    table.tool_wait_start(
        _in("s", "tool"),
        0.0,
        thread_id="t",
        node_id="n",
        tool_name="slow",
        predicted_duration_s=30.0,
    )
    table.start(_in("s", "retained"), 0.0)
    table.set_retention(_in("s", "retained"), 15.0)
    table.start(_in("s", "fresh"), 5.0)
    assert table.expire(9.9) == []
    assert table.expire(10.0) == [_in("s", "idle")]
    assert table.expire(15.0) == [_in("s", "fresh")]
    assert table.expire(25.0) == [_in("s", "retained")]
    # The tool wait is predicted to end at 30: not removed before 30 + 10, and a held entry is
    # re-checked once per timeout, so it is gone at most one timeout later.
    assert table.expire(39.9) == []
    assert table.expire(50.0) == [_in("s", "tool")]
    assert table.keys() == [_in("s", "busy")]  # an active call is never expired
    table.call_finished(busy, 1.0, 51.0)
    assert table.expire(60.9) == []
    assert table.expire(61.0) == [_in("s", "busy")]
    assert len(table) == 0


def test_snapshot_is_json() -> None:
    table = ProcessTable()
    call = make_facts("p", thread_id="worker-1")
    table.call_arrived(call, 0.0)
    table.tool_wait_start(KEY, 0.5, thread_id="main", node_id="t1", tool_name="search")
    snap = table.snapshot(2.0)
    json.dumps(snap)
    (entry,) = snap["entries"]
    assert entry["program_id"] == "p" and entry["threads"] == {"worker-1": 1}
    assert entry["active_calls"][0]["wait_s"] == 2.0
    assert entry["tool_waits"][0]["tool_name"] == "search"
    assert table.snapshot(2.0, limit=0)["entries"] == []


# --- 100,000 short programs: the table empties and memory stays flat -------------------------

BACKENDS = [BackendView("engine-0", in_flight=0)]


def _run_programs(dispatcher: Dispatcher, start: int, count: int, *, end_events: bool) -> float:
    now = float(start)
    for i in range(start, start + count):
        now = float(i)
        program = f"p{i}"
        if end_events:
            dispatcher.on_program_start(K(program), now, name="short")
        call = dispatcher.submit(make_facts(program, now, call_id=f"c{i}", node_id="n0"), now)
        (admission,) = dispatcher.admit(now, BACKENDS)
        dispatcher.on_tokens(call, 8, now + 0.5)
        dispatcher.on_finish(call, admission.backend_id, 0.01, now + 0.5)
        if end_events:
            dispatcher.on_program_end(K(program), now + 0.5)
        elif i % 100 == 0:
            dispatcher.expire(now)
    return now


@pytest.mark.parametrize(
    ("policy", "end_events"),
    [("plas", True), ("atlas", False)],
    ids=["plas-program-end", "atlas-idle-expiry"],
)
def test_100k_programs_leave_the_table_empty_and_memory_flat(policy: str, end_events: bool) -> None:
    """100,000 programs go start -> call -> finish -> end (or only idle expiry). Memory is
    compared twice: live allocator blocks across all 100k programs (cheap), and tracemalloc
    across the last 20k (tracing slows Python several-fold, so not across all of them)."""
    table = ProcessTable(idle_timeout_s=5.0)
    scheduler = build_scheduler(policy, table=table)
    dispatcher = Dispatcher(scheduler, RoundRobinRouter(), FixedWindowAdmission(4))
    now = _run_programs(dispatcher, 0, 2_000, end_events=end_events)  # warm caches up
    dispatcher.expire(now + 100.0)
    gc.collect()
    blocks_before = sys.getallocatedblocks()
    start = 10_000
    now = _run_programs(dispatcher, start, 80_000, end_events=end_events)
    tracemalloc.start()
    try:
        traced_before, _ = tracemalloc.get_traced_memory()
        now = _run_programs(dispatcher, start + 80_000, 20_000, end_events=end_events)
        removed = dispatcher.expire(now + 100.0)
        gc.collect()
        traced_after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    gc.collect()
    blocks_after = sys.getallocatedblocks()
    assert len(table) == 0
    assert scheduler.queued() == 0
    if not end_events:
        assert removed  # the tail of the run left only through expiry
    # Flat: what stays allocated does not grow with the number of programs.
    assert traced_after - traced_before < 64 * 1024, f"traced +{traced_after - traced_before} B"
    assert blocks_after - blocks_before < 1_000, f"+{blocks_after - blocks_before} blocks"
