"""``BackendPool.views`` hands the dispatcher the same view object while a backend is unchanged,
so ``Dispatcher.admit`` asks the admission policy only about backends whose view changed
(docs/routing.md, "Cost at many backends")."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentrt_controller.backends.api import BackendLoad
from agentrt_controller.backends.fake import FakeBackend, FakeResponse
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.routing.routers import prefix_router
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.service.core.pool import BackendPool
from tests.controller_policies.helpers import make_facts

pytestmark = pytest.mark.timeout(30)


async def _answer(request: object) -> FakeResponse:
    raise AssertionError("no request is sent here")


def _pool(n: int) -> BackendPool:
    backends = [FakeBackend(f"b{i}", _answer) for i in range(n)]
    return BackendPool(backends, on_change=lambda: None, clock=lambda: 0.0)


def test_an_unchanged_backend_keeps_its_view_object_and_a_changed_one_gets_a_new_one() -> None:
    pool = _pool(3)
    first = pool.views()
    again = pool.views()
    assert all(a is b for a, b in zip(first, again, strict=True))
    pool.acquire("b1")  # one call of one sequence admitted there
    pool.states["b2"].load = BackendLoad(num_waiting=3, kv_cache_usage=0.5)
    pool.states["b2"].load_at_s = 4.0
    changed = pool.views()
    assert changed[0] is first[0]
    assert changed[1] is not first[1] and changed[1].in_flight == 1
    assert (changed[2].num_waiting, changed[2].kv_cache_usage, changed[2].metrics_at_s) == (
        3,
        0.5,
        4.0,
    )
    del pool.states["b0"]
    assert [v.backend_id for v in pool.views()] == ["b1", "b2"]


def test_the_dispatcher_asks_again_only_about_backends_whose_view_changed() -> None:
    admission = AdaptiveWindowAdmission()
    asked: list[str] = []
    has_room = admission.has_room

    def counting(backend: BackendView, now_s: float) -> bool:
        asked.append(backend.backend_id)
        return has_room(backend, now_s)

    admission.has_room = counting  # type: ignore[method-assign]  # count the real policy
    table = ProcessTable()
    dispatcher = Dispatcher(build_scheduler("plas", table=table), prefix_router(), admission)
    views = [BackendView(f"b{i:02d}", 0, num_waiting=0, metrics_at_s=1.0) for i in range(20)]
    dispatcher.submit(make_facts("p1", call_id="c1", prompt_tokens=16), 1.0)
    (first,) = dispatcher.admit(1.0, views)
    # Every backend once; the round's only call leaves nothing to place, so the chosen
    # backend with one more call is not asked about (Dispatcher.admit).
    assert len(asked) == 20
    # The driver's next views: the chosen backend's is new, every other one the same object.
    views = [replace(v, in_flight=1) if v.backend_id == first.backend_id else v for v in views]
    del asked[:]
    dispatcher.submit(make_facts("p2", call_id="c2", prompt_tokens=16), 1.5)
    (second,) = dispatcher.admit(1.5, views)
    assert asked == [first.backend_id]
    # Two calls in one round: the backend that took the first is asked again with it.
    views = [replace(v, in_flight=1) if v.backend_id == second.backend_id else v for v in views]
    del asked[:]
    for name in ("p4", "p5"):
        dispatcher.submit(make_facts(name, call_id=f"c-{name}", prompt_tokens=16), 1.8)
    third, _fourth = dispatcher.admit(1.8, views)
    assert asked == [second.backend_id, third.backend_id]
    # Without a scrape time the adaptive window reacts on the clock: asked every time.
    views = [replace(v, metrics_at_s=None) for v in views]
    for now in (2.0, 2.5):
        del asked[:]
        dispatcher.submit(make_facts("p3", call_id=f"c{now}", prompt_tokens=16), now)
        dispatcher.admit(now, views)
        assert len(asked) == 20


def test_the_dispatcher_forgets_answers_about_backends_the_driver_dropped() -> None:
    dispatcher = Dispatcher(
        build_scheduler("plas", table=ProcessTable()), prefix_router(), AdaptiveWindowAdmission()
    )
    for generation in range(3):  # a fleet replaced twice over
        views = [BackendView(f"g{generation}-{i}", 0, metrics_at_s=1.0) for i in range(40)]
        dispatcher.submit(make_facts("p1", call_id=f"c{generation}", prompt_tokens=16), 1.0)
        assert len(dispatcher.admit(1.0, views)) == 1
    assert len(dispatcher._asked) <= 2 * 40 + 16
    assert all(backend_id.startswith("g2-") for backend_id in dispatcher._asked)
