"""The retained lane inside fair shares (scheduling/lane.py; docs/tenancy.md, "The retained
lane"), and which tool waits the process table honours (docs/security.md, "The retention fast
lane")."""

from __future__ import annotations

import pytest

from agentrt_controller.keys import ProgramKey
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.scheduling.multilevel import MultiLevelScheduler
from agentrt_controller.scheduling.tenancy import TenancyConfig, TenantFairScheduler
from tests.controller_policies.helpers import make_facts

pytestmark = pytest.mark.timeout(30)

BACKEND = "engine-0"


def _fair_dispatcher(window: int = 1) -> tuple[Dispatcher, TenantFairScheduler]:
    scheduler = build_scheduler("plas", tenancy=TenancyConfig())
    assert isinstance(scheduler, TenantFairScheduler)
    return Dispatcher(scheduler, RoundRobinRouter(), FixedWindowAdmission(window)), scheduler


def _admit_one(dispatcher: Dispatcher, now_s: float) -> CallEntry:
    (admission,) = dispatcher.admit(now_s, [BackendView(BACKEND, in_flight=0)])
    return admission.call


def _retained(dispatcher: Dispatcher, program: str, tenant: str | None, now_s: float) -> CallEntry:
    facts = make_facts(program, now_s, tenant=tenant)
    dispatcher.table.start(facts.program, now_s)
    dispatcher.set_retention(facts.program, now_s + 100.0)
    call = dispatcher.submit(facts, now_s, retained_backend=BACKEND)
    assert call.lane == "retained"
    return call


def test_retained_calls_take_their_turn_in_the_fair_share_order_and_are_charged() -> None:
    """A tenant whose every call is retained gets its share, not more: the tenants alternate
    (equal weights, equal service), and the retained calls' service is charged to it."""
    dispatcher, scheduler = _fair_dispatcher()
    now = 0.0
    for index in range(6):
        dispatcher.submit(make_facts(f"a-{index}", now, tenant="a"), now)
    served: list[str] = []
    for _ in range(8):
        _retained(dispatcher, f"b-{now}", "b", now)  # b always has a retained call queued
        call = _admit_one(dispatcher, now)
        served.append(call.facts.program.tenant or "")
        now += 1.0
        dispatcher.on_finish(call, BACKEND, 1.0, now)
    assert served.count("a") == 4 and served.count("b") == 4, served
    tenants = scheduler.snapshot(now)["tenancy"]
    assert isinstance(tenants, dict)
    charged = {t["tenant"]: t["charged_service_s"] for t in tenants["tenants"]}
    assert charged == {"a": pytest.approx(4.0), "b": pytest.approx(4.0)}
    assert dispatcher.retained_queued() == 4  # b's calls not served yet wait in b's lane


def test_a_retained_call_overtakes_its_own_tenants_calls_only() -> None:
    dispatcher, _ = _fair_dispatcher()
    dispatcher.submit(make_facts("b-early", 0.0, tenant="b"), 0.0)
    dispatcher.submit(make_facts("a-early", 0.0, tenant="a"), 0.0)
    first = _admit_one(dispatcher, 0.0)  # b was seen first: its turn
    assert first.facts.program.program_id == "b-early"
    dispatcher.on_finish(first, BACKEND, 1.0, 1.0)
    dispatcher.submit(make_facts("b-plain", 1.0, tenant="b"), 1.0)
    kept = _retained(dispatcher, "b-kept", "b", 1.0)
    order = []
    for step in range(3):
        call = _admit_one(dispatcher, 1.0 + step)
        order.append(call.facts.program.program_id)
        dispatcher.on_finish(call, BACKEND, 1.0, 2.0 + step)
    # a is behind its share: first; then b's retained call ahead of b's earlier plain one.
    assert order == ["a-early", kept.facts.program.program_id, "b-plain"]


def test_one_tenant_keeps_the_lane_ahead_of_everything() -> None:
    """Open mode (a bare scheduler): the Dispatcher's lane is served first, as before."""
    dispatcher = Dispatcher(build_scheduler("plas"), RoundRobinRouter(), FixedWindowAdmission(1))
    for index in range(3):
        dispatcher.submit(make_facts(f"p-{index}", 0.0), 0.0)
    kept = _retained(dispatcher, "kept", None, 1.0)
    assert _admit_one(dispatcher, 1.0) is kept
    assert dispatcher.lane_snapshot() == {"enabled": True, "queued": 0, "total": 1}


# --- which waits are honoured ------------------------------------------------------------------

KEY = ProgramKey.untagged("agent")


def _wait(table: ProcessTable, node: str, now_s: float, thread: str = "main") -> bool:
    wait = table.tool_wait_start(
        KEY, now_s, thread_id=thread, node_id=node, tool_name="search", predicted_duration_s=5.0
    )
    return wait.honoured


def _call(table: ProcessTable, now_s: float, thread: str = "main") -> None:
    facts = make_facts("agent", now_s, thread_id=thread)
    table.call_arrived(facts, now_s)
    table.call_started(facts, now_s)
    table.call_finished(facts, 0.1, now_s + 0.1)


@pytest.mark.parametrize(
    ("events", "honoured"),
    [
        # (a call of the thread finished, then a wait): honoured.
        (["call", "wait:t1"], [True]),
        # No call finished on the thread yet.
        (["wait:t1"], [False]),
        # One honoured wait per finished call; a second node right after is not honoured.
        (["call", "wait:t1", "wait:t2"], [True, False]),
        # A node is honoured once, even after another call.
        (["call", "wait:t1", "call", "wait:t1", "wait:t2"], [True, False, True]),
        # Another thread's call does not make this thread's wait honoured.
        (["call:other", "wait:t1"], [False]),
        # The thread's last call has not finished (it is queued): not honoured.
        (["call", "arrive", "wait:t1"], [False]),
    ],
)
def test_a_wait_is_honoured_after_a_finished_call_of_its_thread_once_per_node(
    events: list[str], honoured: list[bool]
) -> None:
    table = ProcessTable()
    seen: list[bool] = []
    now = 0.0
    for event in events:
        now += 1.0
        kind, _, arg = event.partition(":")
        if kind == "call":
            _call(table, now, thread=arg or "main")
        elif kind == "arrive":
            table.call_arrived(make_facts("agent", now, thread_id="main"), now)
        else:
            seen.append(_wait(table, arg, now))
    assert seen == honoured


def test_a_thread_with_a_call_still_active_does_not_get_its_wait_honoured() -> None:
    table = ProcessTable()
    first, second = make_facts("agent", 0.0), make_facts("agent", 0.0)
    for facts in (first, second):
        table.call_arrived(facts, 0.0)
    table.call_finished(first, 0.1, 1.0)
    assert not _wait(table, "t1", 1.5)  # the thread's other call is still queued
    table.call_dropped(second, 2.0)  # it left unserved: no finished call after the first
    assert not _wait(table, "t2", 2.5)
    _call(table, 3.0)
    assert _wait(table, "t3", 4.0)
    entry = table.get(KEY)
    assert entry is not None and entry.active_per_thread == {}


def test_streamed_tokens_reach_the_queue_each_call_waited_in() -> None:
    """Tokens streamed for a call outside the retained lane go to the scheduler (MLFQ demotes
    it past its quantum); a lane call's go to the lane, which demotes nothing."""
    scheduler = build_scheduler("mlfq")
    assert isinstance(scheduler, MultiLevelScheduler)
    dispatcher = Dispatcher(scheduler, RoundRobinRouter(), FixedWindowAdmission(2))
    plain_facts = make_facts("plain", 0.0)
    dispatcher.table.start(plain_facts.program, 0.0)
    dispatcher.submit(plain_facts, 0.0)
    plain = _admit_one(dispatcher, 0.0)
    kept = _retained(dispatcher, "kept", None, 0.0)
    assert _admit_one(dispatcher, 0.0) is kept
    quantum = scheduler.config.quantum(0)
    for call in (plain, kept):
        for _ in range(quantum):
            dispatcher.on_tokens(call, 1, 1.0)
    assert (plain.level, plain.quantum_tokens, plain.level_entered_s) == (1, 0, 1.0)
    assert (kept.level, kept.quantum_tokens) == (0, quantum)
