"""The Dispatcher's retained lane: retained programs' calls go first, for every scheduler, to
the backend holding their KV; the process table's accounting is unchanged."""

from __future__ import annotations

import pytest

from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing import build_router
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import SCHEDULER_NAMES, build_scheduler
from tests.controller_policies.helpers import make_call

pytestmark = pytest.mark.timeout(30)

#: A program of the default session.
K = ProgramKey.untagged


def _dispatcher(policy: str, *, lane: bool = True, window: int = 1) -> Dispatcher:
    return Dispatcher(
        build_scheduler(policy, oracle=True),
        build_router("least_loaded"),
        FixedWindowAdmission(window),
        retained_lane=lane,
    )


def _oracle(**kw: object) -> dict[str, object]:
    return {"oracle_service_s": 1.0, "oracle_program_remaining_s": 1.0, **kw}


@pytest.mark.parametrize("policy", SCHEDULER_NAMES)
def test_a_retained_call_is_admitted_before_earlier_queued_calls(policy: str) -> None:
    d = _dispatcher(policy)
    # "long" has run a lot (low PLAS/ATLAS priority); fresh programs queue first.
    old = make_call("long", 0.0, **_oracle(oracle_program_remaining_s=50.0))
    d.submit(old, 0.0)
    (first,) = d.admit(0.0, [BackendView("b0", in_flight=0)])
    d.on_finish(first.call, "b0", 40.0, 1.0)
    for i in range(3):
        d.submit(make_call(f"fresh{i}", 1.0, **_oracle()), 1.0)
    d.set_retention(K("long"), 10.0)  # it waits on a tool; its KV is kept until t = 10
    back = make_call("long", 2.0, **_oracle(oracle_program_remaining_s=10.0))
    d.submit(back, 2.0)
    assert d.queued() == 4
    (admitted,) = d.admit(2.0, [BackendView("b0", in_flight=0)])
    assert admitted.call is back
    assert back.lane == "retained"
    # Accounting as usual: the table knows the call, its service is charged to the program.
    d.on_finish(back, "b0", 2.0, 3.0)
    entry = d.table.get(back.program_key)
    assert entry is not None and entry.attained_service_s == pytest.approx(42.0)
    assert d.snapshot(3.0)["retained_lane"] == {"enabled": True, "queued": 0, "total": 1}


def test_expired_retention_and_a_disabled_lane_keep_the_scheduler_order() -> None:
    for lane, until in ((True, 1.5), (False, 10.0)):
        d = _dispatcher("fcfs", lane=lane)
        d.submit(make_call("a", 0.0), 0.0)
        d.on_program_start(K("b"), 0.0)
        d.set_retention(K("b"), until)
        d.submit(make_call("b", 2.0), 2.0)
        (admitted,) = d.admit(2.0, [BackendView("b0", in_flight=0)])
        assert admitted.call.program_id == "a"


def test_the_retained_backend_is_used_when_it_has_room_else_failover() -> None:
    d = _dispatcher("plas", window=2)
    d.on_program_start(K("p"), 0.0)
    d.set_retention(K("p"), 10.0)
    views = [BackendView("b0", in_flight=0), BackendView("b1", in_flight=1)]
    held = make_call("p", 0.0, retained_backend="b1")
    d.submit(held, 0.0)
    (admitted,) = d.admit(0.0, views)
    assert held.lane == "retained"
    assert admitted.backend_id == "b1"  # busier, but it holds the KV
    full = [BackendView("b0", in_flight=0), BackendView("b1", in_flight=2)]
    again = make_call("p", 1.0, retained_backend="b1")
    d.submit(again, 1.0)
    (admitted,) = d.admit(1.0, full)
    assert admitted.backend_id == "b0"


def test_lane_calls_can_be_requeued_cancelled_and_expire() -> None:
    d = _dispatcher("atlas")
    d.on_program_start(K("p"), 0.0)
    d.set_retention(K("p"), 100.0)
    call = make_call("p", 0.0, deadline_s=5.0)
    d.submit(call, 0.0)
    (admitted,) = d.admit(0.0, [BackendView("b0", in_flight=0)])
    d.requeue(admitted.call, 0.5)
    assert d.queued() == 1 and d.lane is not None and d.lane.queued() == 1
    assert d.drop_expired(6.0) == [call]
    other = make_call("p", 7.0)
    d.submit(other, 7.0)
    assert d.cancel(other, 7.5)
    assert d.queued() == 0
    d.submit(make_call("p", 8.0), 8.0)
    (admitted,) = d.admit(8.0, [BackendView("b0", in_flight=0)])
    d.on_tokens(admitted.call, 3, 8.5)
    assert admitted.call.quantum_tokens == 3
