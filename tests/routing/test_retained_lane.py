"""The Dispatcher's retained lane: retained programs' calls go first, for every scheduler, to
the backend holding their KV; the process table's accounting is unchanged."""

from __future__ import annotations

import math

import pytest

from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing import build_router
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import SCHEDULER_NAMES, build_scheduler
from agentrt_controller.scheduling.srpt import OracleBook, OracleFigures
from tests.controller_policies.helpers import make_facts

pytestmark = pytest.mark.timeout(30)

#: A program of the default session.
K = ProgramKey.untagged


#: The oracle every test dispatcher's scheduler reads (srpt): 1 s of service per call and
#: per program unless :func:`_submit` says otherwise.
_BOOK = OracleBook()


def _dispatcher(policy: str, *, lane: bool = True, window: int = 1) -> Dispatcher:
    return Dispatcher(
        build_scheduler(policy, oracle=_BOOK),
        build_router("least_loaded"),
        FixedWindowAdmission(window),
        retained_lane=lane,
    )


def _submit(
    d: Dispatcher,
    program: str,
    now_s: float,
    *,
    remaining_s: float = 1.0,
    retained_backend: str | None = None,
    deadline_s: float = math.inf,
) -> CallEntry:
    """Submit a new call of ``program`` at ``now_s`` (its oracle figures in :data:`_BOOK`)."""
    facts = make_facts(program, now_s, deadline_s=deadline_s)
    _BOOK.figures[facts.call_id] = OracleFigures(1.0, remaining_s)
    return d.submit(facts, now_s, retained_backend=retained_backend)


@pytest.mark.parametrize("policy", SCHEDULER_NAMES)
def test_a_retained_call_is_admitted_before_earlier_queued_calls(policy: str) -> None:
    d = _dispatcher(policy)
    # "long" has run a lot (low PLAS/ATLAS priority); fresh programs queue first.
    _submit(d, "long", 0.0, remaining_s=50.0)
    (first,) = d.admit(0.0, [BackendView("b0", in_flight=0)])
    d.on_finish(first.call, "b0", 40.0, 1.0)
    for i in range(3):
        _submit(d, f"fresh{i}", 1.0)
    d.set_retention(K("long"), 10.0)  # it waits on a tool; its KV is kept until t = 10
    back = _submit(d, "long", 2.0, remaining_s=10.0)
    assert d.queued() == 4
    (admitted,) = d.admit(2.0, [BackendView("b0", in_flight=0)])
    assert admitted.call is back
    assert back.lane == "retained"
    # Accounting as usual: the table knows the call, its service is charged to the program.
    d.on_finish(back, "b0", 2.0, 3.0)
    entry = d.table.get(back.facts.program)
    assert entry is not None and entry.attained_service_s == pytest.approx(42.0)
    assert d.snapshot(3.0)["retained_lane"] == {"enabled": True, "queued": 0, "total": 1}


def test_expired_retention_and_a_disabled_lane_keep_the_scheduler_order() -> None:
    for lane, until in ((True, 1.5), (False, 10.0)):
        d = _dispatcher("fcfs", lane=lane)
        _submit(d, "a", 0.0)
        d.on_program_start(K("b"), 0.0)
        d.set_retention(K("b"), until)
        _submit(d, "b", 2.0)
        (admitted,) = d.admit(2.0, [BackendView("b0", in_flight=0)])
        assert admitted.call.facts.program.program_id == "a"


def test_the_retained_backend_is_used_when_it_has_room_else_failover() -> None:
    d = _dispatcher("plas", window=2)
    d.on_program_start(K("p"), 0.0)
    d.set_retention(K("p"), 10.0)
    views = [BackendView("b0", in_flight=0), BackendView("b1", in_flight=1)]
    held = _submit(d, "p", 0.0, retained_backend="b1")
    (admitted,) = d.admit(0.0, views)
    assert held.lane == "retained"
    assert admitted.backend_id == "b1"  # busier, but it holds the KV
    full = [BackendView("b0", in_flight=0), BackendView("b1", in_flight=2)]
    _submit(d, "p", 1.0, retained_backend="b1")
    (admitted,) = d.admit(1.0, full)
    assert admitted.backend_id == "b0"


def test_lane_calls_can_be_requeued_cancelled_and_expire() -> None:
    d = _dispatcher("atlas")
    d.on_program_start(K("p"), 0.0)
    d.set_retention(K("p"), 100.0)
    call = _submit(d, "p", 0.0, deadline_s=5.0)
    (admitted,) = d.admit(0.0, [BackendView("b0", in_flight=0)])
    d.requeue(admitted.call, 0.5)
    assert d.queued() == 1 and d.retained_queued() == 1
    assert d.drop_expired(6.0) == [call]
    other = _submit(d, "p", 7.0)
    assert d.cancel(other, 7.5)
    assert d.queued() == 0
    _submit(d, "p", 8.0)
    (admitted,) = d.admit(8.0, [BackendView("b0", in_flight=0)])
    d.on_tokens(admitted.call, 3, 8.5)
    assert admitted.call.quantum_tokens == 3
