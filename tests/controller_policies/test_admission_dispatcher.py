"""Adaptive admission (AIMD on scraped waiting) and the Dispatcher's extra hooks."""

from __future__ import annotations

import json

import pytest

from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission, AdaptiveWindowConfig
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import build_scheduler
from tests.controller_policies.helpers import make_facts

pytestmark = pytest.mark.timeout(30)

#: A program of the default session.
K = ProgramKey.untagged


def _view(in_flight: int, waiting: int | None, at: float | None, **kw: object) -> BackendView:
    return BackendView("b0", in_flight=in_flight, num_waiting=waiting, metrics_at_s=at, **kw)  # type: ignore[arg-type]


def test_adaptive_window_grows_while_the_engine_keeps_up_and_we_fill_it() -> None:
    config = AdaptiveWindowConfig(initial_window=4, target_waiting=1, slow_start=False)
    policy = AdaptiveWindowAdmission(config)
    assert policy.has_room(_view(3, 0, 1.0), 1.0)
    assert policy.window("b0") == 4  # not full: no reason to grow
    assert not policy.has_room(_view(4, 0, 2.0), 2.0) or policy.window("b0") == 5
    assert policy.window("b0") == 5
    assert policy.has_room(_view(4, 1, 2.0), 2.5)  # same sample: no second update
    assert policy.window("b0") == 5


def test_adaptive_window_shrinks_by_the_excess_at_most_halving() -> None:
    policy = AdaptiveWindowAdmission(AdaptiveWindowConfig(initial_window=16, target_waiting=2))
    assert not policy.has_room(_view(16, 3, 0.5), 0.5)
    assert policy.window("b0") == 15  # one request too many in the engine: one slot less
    policy.has_room(_view(15, 100, 1.0), 1.0)
    assert policy.window("b0") == 7.5  # flooded: halved, not cut to the minimum at once
    policy.has_room(_view(8, 10, 2.0), 2.0)
    policy.has_room(_view(4, 10, 3.0), 3.0)
    policy.has_room(_view(2, 10, 4.0), 4.0)
    policy.has_room(_view(1, 10, 5.0), 5.0)
    assert policy.window("b0") == 1  # min_window
    assert policy.has_room(_view(0, 10, 5.0), 5.0)  # one call always fits


def test_adaptive_window_without_sample_times_updates_at_most_once_per_interval() -> None:
    config = AdaptiveWindowConfig(initial_window=8, update_interval_s=1.0)
    policy = AdaptiveWindowAdmission(config)
    policy.has_room(_view(8, 0, None), 0.0)
    policy.has_room(_view(8, 0, None), 0.5)
    assert policy.window("b0") == 16  # slow start: doubled
    policy.has_room(_view(16, 0, None), 1.0)
    assert policy.window("b0") == 32


def test_adaptive_window_without_metrics_is_a_fixed_window() -> None:
    policy = AdaptiveWindowAdmission(AdaptiveWindowConfig(initial_window=2))
    assert policy.has_room(_view(1, None, None), 0.0)
    assert not policy.has_room(_view(2, None, None), 100.0)
    assert policy.window("b0") == 2
    assert not policy.has_room(_view(0, None, None, healthy=False), 0.0)
    assert json.dumps(policy.snapshot())


def test_adaptive_window_converges_on_a_model_engine() -> None:
    """An engine that runs 8 at once and queues the rest: the window settles near 8 + target."""
    config = AdaptiveWindowConfig(initial_window=1, target_waiting=2)
    policy = AdaptiveWindowAdmission(config)
    windows = []
    for tick in range(200):
        in_flight = int(policy.window("b0"))  # we always fill the window
        waiting = max(0, in_flight - 8)
        policy.has_room(_view(in_flight, waiting, float(tick)), float(tick))
        windows.append(policy.window("b0"))
    tail = windows[-50:]
    assert min(tail) >= 8  # the batch is never starved once converged
    assert max(tail) <= 8 + config.target_waiting + 1


def test_adaptive_window_never_exceeds_the_reported_batch_plus_target() -> None:
    """An engine that reports 4 batch slots and never queues: the window stops at 4 + 2."""
    policy = AdaptiveWindowAdmission(AdaptiveWindowConfig(initial_window=8, target_waiting=2))
    view = _view(0, 0, 0.0, max_num_seqs=4)
    assert policy.bound(view) == 6
    policy.has_room(view, 0.0)
    assert policy.window("b0") == 6  # the initial window is capped too
    for tick in range(1, 50):
        policy.has_room(_view(int(policy.window("b0")), 0, float(tick), max_num_seqs=4), tick)
    assert policy.window("b0") == 6
    assert not policy.has_room(_view(6, 0, 99.0, max_num_seqs=4), 99.0)


def test_adaptive_window_shrinks_when_the_batch_size_appears_and_is_unbounded_without() -> None:
    policy = AdaptiveWindowAdmission(AdaptiveWindowConfig(initial_window=20, max_window=64))
    assert policy.bound(_view(0, 0, 0.0)) == 64  # unknown batch size (a stock vLLM)
    for tick in range(60):
        policy.has_room(_view(int(policy.window("b0")), 0, float(tick)), tick)
    assert policy.window("b0") == 64  # grows while the engine's waiting queue stays empty
    policy.has_room(_view(64, 0, 100.0, max_num_seqs=2), 100.0)  # first scrape naming it
    assert policy.window("b0") == 4
    assert policy.bound(_view(0, 0, 0.0, max_num_seqs=0)) == 64  # garbage: ignored


# --- Dispatcher ----------------------------------------------------------------------------------


def _dispatcher(policy: str = "plas", window: int = 2) -> Dispatcher:
    return Dispatcher(build_scheduler(policy), RoundRobinRouter(), FixedWindowAdmission(window))


def test_admit_binds_and_sends_priority_only_to_backends_that_take_it() -> None:
    dispatcher = _dispatcher(window=1)
    long_call = dispatcher.submit(make_facts("long"), 0.0)
    (first,) = dispatcher.admit(0.0, [BackendView("a", 0, supports_priority=True)])
    dispatcher.on_finish(long_call, first.backend_id, 10.0, 1.0)
    calls = [dispatcher.submit(make_facts(p, 2.0), 2.0) for p in ("long", "fresh")]
    backends = [BackendView("a", 0, supports_priority=True), BackendView("b", 0)]
    admissions = dispatcher.admit(2.0, backends)
    assert [a.call for a in admissions] == [calls[1], calls[0]]
    # Round robin sends the fresh call to b (no priority field: FCFS-only server) and the
    # long program's call (10 s attained: queue index 3) to a, with priority 3.
    assert {a.backend_id: a.backend_priority for a in admissions} == {"b": None, "a": 3}
    entry = dispatcher.table.get(K("long"))
    assert entry is not None and sum(entry.backends.values()) == 2


def test_requeue_and_cancel_through_the_dispatcher() -> None:
    dispatcher = _dispatcher()
    a, b = (dispatcher.submit(make_facts(p), 0.0) for p in ("a", "b"))
    admissions = dispatcher.admit(0.0, [BackendView("x", 1)])
    assert [adm.call for adm in admissions] == [a]
    dispatcher.requeue(a, 1.0)  # backend failed before streaming
    assert dispatcher.cancel(b, 1.0) is True
    assert [adm.call for adm in dispatcher.admit(2.0, [BackendView("y", 0)])] == [a]


def test_program_and_tool_events_reach_the_table_and_expire_clears_it() -> None:
    dispatcher = _dispatcher()
    dispatcher.table.idle_timeout_s = 10.0
    key = ProgramKey(session_id="s", program_id="p")
    dispatcher.on_program_start(key, 0.0, name="react", deadline_s=60.0)
    wait = dispatcher.on_tool_wait_start(
        key,
        1.0,
        thread_id="main",
        node_id="t1",
        tool_name="search",
        predicted_duration_s=2.0,
    )
    assert wait.predicted_duration_s == 2.0
    dispatcher.set_retention(key, 20.0)
    snapshot = dispatcher.snapshot(2.0)
    json.dumps(snapshot)
    (entry,) = snapshot["process_table"]["entries"]
    assert entry["name"] == "react" and entry["tool_waits"][0]["tool_name"] == "search"
    ended = dispatcher.on_tool_wait_end(key, 3.0, thread_id="main", node_id="t1")
    assert ended is wait
    assert dispatcher.expire(25.0) == []
    assert dispatcher.expire(40.0) == [key]


def test_program_end_with_a_session() -> None:
    dispatcher = _dispatcher()
    call = dispatcher.submit(make_facts("p", session_id="s"), 0.0)
    (admission,) = dispatcher.admit(0.0, [BackendView("x", 0)])
    dispatcher.on_finish(call, admission.backend_id, 1.0, 1.0)
    dispatcher.on_program_end(call.facts.program, 1.0)
    assert len(dispatcher.table) == 0
