"""Several models (docs/routing.md, "Several models"): the model constraint every router
applies first, the Dispatcher passing a call whose model has no room, affinity and prefix
chains per model. Table-driven, pure: no clock, no I/O."""

from __future__ import annotations

import pytest

from agentrt_controller.backends.api import BackendError
from agentrt_controller.backends.fake import FakeBackend, FakeResponse
from agentrt_controller.routing.factory import ROUTER_NAMES, build_router
from agentrt_controller.routing.filters import ModelFilter, serves
from agentrt_controller.routing.hashing import request_block_hashes
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.candidates import CandidateSet
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.service.core.pool import BackendPool
from tests.controller_policies.helpers import make_call, make_facts

pytestmark = pytest.mark.timeout(30)

A, B = "org/planner", "org/verifier"


def _view(backend_id: str, *models: str, in_flight: int = 0) -> BackendView:
    return BackendView(backend_id, in_flight, models=frozenset(models) if models else None)


@pytest.mark.parametrize(
    ("models", "call_model", "kept"),
    [
        ((A,), A, True),
        ((A,), B, False),
        ((A, B), B, True),
        ((), B, True),  # models unknown: it takes any model
        ((A,), None, True),  # a call naming no model: any backend
    ],
)
def test_serves(models: tuple[str, ...], call_model: str | None, kept: bool) -> None:
    assert serves(_view("x", *models), call_model) is kept
    call = make_call("p", model=call_model)
    assert (ModelFilter().filter(call, [_view("x", *models)], 0.0) != []) is kept


PIPELINE = {
    "filters": [{"type": "healthy"}],
    "scorers": [{"type": "load"}],
    "picker": {"type": "argmax"},
}


@pytest.mark.parametrize("name", ROUTER_NAMES)
def test_every_router_sends_a_call_only_to_a_backend_of_its_model(name: str) -> None:
    router = build_router(name, PIPELINE if name == "pipeline" else None)
    # The backend of B is idle, the one of A busy: a load preference would pick B's.
    views = [_view("a", A, in_flight=7), _view("b", B), _view("ab", A, B, in_flight=9)]
    for i in range(6):
        call = make_call(f"p{i}", model=A, prompt_tokens=4000)
        assert router.route(call, router.eligible(call, views, 0.0), float(i)) in {"a", "ab"}
    only_b = [_view("b", B)]
    assert list(router.eligible(make_call("q", model=A), only_b, 0.0)) == []
    with pytest.raises(ValueError, match="serves the model"):
        router.route(make_call("q", model=A), only_b, 0.0)


def test_a_round_candidate_set_is_passed_on_as_is_when_all_serve() -> None:
    """One model everywhere (the common case): the round's CandidateSet itself, so the
    prefix router's pruned path stays open."""
    router = build_router("prefix")
    room = CandidateSet([_view("a", A), _view("b", A)])
    assert router.eligible(make_call("p", model=A), room, 0.0) is room
    assert router.eligible(make_call("p", model=None), room, 0.0) is room


def test_the_dispatcher_passes_a_call_whose_model_has_no_room() -> None:
    """A's only backend is full: the call for A waits at its place while the calls for B
    behind it are admitted; once A's backend has room, A's call goes first."""
    dispatcher = Dispatcher(
        build_scheduler("fcfs"), build_router("prefix"), FixedWindowAdmission(2)
    )
    first = dispatcher.submit(make_facts("pa", 0.0, model=A), 0.0)
    for i in range(2):
        dispatcher.submit(make_facts(f"pb{i}", 1.0 + i, model=B), 1.0 + i)
    full_a, idle_b = _view("a", A, in_flight=2), _view("b", B)
    admitted = dispatcher.admit(5.0, [full_a, idle_b])
    assert [(x.call.facts.model, x.backend_id) for x in admitted] == [(B, "b"), (B, "b")]
    assert dispatcher.queued() == 1
    later = dispatcher.submit(make_facts("pa2", 6.0, model=A), 6.0)
    admitted = dispatcher.admit(7.0, [_view("a", A, in_flight=1), _view("b", B, in_flight=2)])
    assert [x.call for x in admitted] == [first]  # in its order: before the later A call
    assert dispatcher.queued() == 1 and later.facts.model == A


@pytest.mark.parametrize("name", ["prefix", "autellix"])
def test_affinity_is_per_model(name: str) -> None:
    """A program whose planner runs on one backend and its verifier on another keeps both
    bindings: each model's next call goes back to its own backend."""
    router = build_router(name)
    views = [_view("a", A, B), _view("b", A, B)]
    plan = make_call("p", model=A, prompt_tokens=4000)
    router.route(plan, [views[0]], 0.0)
    verify = make_call("p", model=B, prompt_tokens=4000)
    router.route(verify, [views[1]], 1.0)
    assert router.route(make_call("p", model=A, prompt_tokens=4000), views, 2.0) == "a"
    assert router.route(make_call("p", model=B, prompt_tokens=4000), views, 3.0) == "b"
    router.on_program_end(plan.facts.program, 4.0)


@pytest.mark.parametrize("salt", [None, "tenant-salt"])
def test_prefix_chains_differ_across_models(salt: str | None) -> None:
    """The same prompt for two models never matches in the prefix index (with or without a
    tenant's cache salt): one model's cache is no use to the other's call."""
    messages = [{"role": "user", "content": "the same long prompt " * 50}]
    extra = {"cache_salt": salt} if salt else {}
    one = request_block_hashes({"model": A, "messages": messages, **extra})
    two = request_block_hashes({"model": B, "messages": messages, **extra})
    assert one and two and not set(one) & set(two)
    same = request_block_hashes({"model": A, "messages": messages, **extra})
    assert same == one


@pytest.mark.anyio
async def test_the_pool_reads_models_at_every_probe_and_keeps_them_when_a_read_fails() -> None:
    """A backend restarted with another model is routed by its new list after one probe; a
    failed read keeps the last list; one that never listed any takes any model."""

    async def answer(request: object) -> FakeResponse:
        raise AssertionError("no request is sent here")

    listed = FakeBackend("listed", answer, models=[{"id": A}])
    silent = FakeBackend("silent", answer, models=[])
    pool = BackendPool([listed, silent], on_change=lambda: None, clock=lambda: 0.0)
    await pool.refresh()
    views = {v.backend_id: v for v in pool.views()}
    assert views["listed"].models == frozenset({A}) and views["silent"].models is None
    assert pool.known_model_ids() == {A} and pool.any_healthy(B) is True  # "silent" may
    listed.model_list = [{"id": B}]
    await pool.refresh()
    assert pool.views()[0].models == frozenset({B})
    assert [m["id"] for m in pool.model_list()] == [B]

    async def refuse() -> list[dict[str, object]]:
        raise BackendError("model list: HTTP 500")

    listed.models = refuse  # type: ignore[method-assign]
    await pool.refresh()
    assert pool.views()[0].models == frozenset({B})


def test_a_round_pops_nothing_when_no_queued_call_could_go_where_there_is_room() -> None:
    """A's backend is full, B's idle, only calls for A queued: the round ends without popping
    (and putting back) every one of them; a call for B behind them is admitted."""
    scheduler = build_scheduler("plas")
    pops: list[str] = []
    pop = scheduler.pop

    def counted(now_s: float) -> object:
        call = pop(now_s)
        if call is not None:
            pops.append(call.facts.call_id)
        return call

    scheduler.pop = counted  # type: ignore[method-assign,assignment]
    dispatcher = Dispatcher(scheduler, build_router("prefix"), FixedWindowAdmission(2))
    for i in range(50):
        dispatcher.submit(make_facts(f"pa{i}", float(i), model=A), float(i))
    views = [_view("a", A, in_flight=2), _view("b", B)]
    assert dispatcher.admit(60.0, views) == [] and pops == []
    late = dispatcher.submit(make_facts("pb", 61.0, model=B), 61.0)
    assert [x.call for x in dispatcher.admit(62.0, views)] == [late]
    assert dispatcher.queued() == 50
    pops.clear()
    assert dispatcher.admit(63.0, views) == [] and pops == []  # B's call left: A's alone again
