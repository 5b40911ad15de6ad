"""Two-level scheduling (scheduling/tenancy.py; docs/tenancy.md): weighted fair shares of
charged service between tenants, the inner policy inside each tenant."""

from __future__ import annotations

import json
import math
import random
from collections import deque

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.scheduling.api import BackendView, Scheduler
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.scheduling.multilevel import PlasScheduler
from agentrt_controller.scheduling.srpt import OracleBook
from agentrt_controller.scheduling.tenancy import (
    DEFAULT_TENANT,
    TenancyConfig,
    TenantFairScheduler,
    tenant_of,
)
from tests.controller_policies.helpers import make_call, make_facts

pytestmark = pytest.mark.timeout(60)


def _fair(policy: str = "plas", **weights: float) -> TenantFairScheduler:
    scheduler = build_scheduler(policy, tenancy=TenancyConfig(weights=weights))
    assert isinstance(scheduler, TenantFairScheduler)
    return scheduler


def _run_backlogged(
    scheduler: Scheduler,
    service_s: dict[str, float],
    *,
    slots: int,
    pops: int,
    rotate: frozenset[str] = frozenset(),
) -> dict[str, float]:
    """Every tenant keeps 2 x ``slots`` calls queued; ``slots`` calls run at once, the oldest
    finishes first with its tenant's ``service_s``. Returns the charged service per tenant.
    Tenants in ``rotate`` send every call under a fresh program id; the others keep one."""
    charged = dict.fromkeys(service_s, 0.0)
    running: deque[CallEntry] = deque()
    now = 0.0
    counter = 0

    def top_up() -> None:
        nonlocal counter
        for tenant in service_s:
            queued = sum(1 for c in pending if c.facts.program.tenant == tenant)
            for _ in range(2 * slots - queued):
                counter += 1
                program = f"{tenant}-{counter}" if tenant in rotate else f"{tenant}-long"
                call = make_call(program, now, tenant=tenant)
                pending.append(call)
                scheduler.submit(call, now)

    pending: list[CallEntry] = []
    top_up()
    for _ in range(pops):
        while len(running) < slots:
            call = scheduler.pop(now)
            assert call is not None
            pending.remove(call)
            running.append(call)
        now += 0.01
        done = running.popleft()
        assert done.facts.program.tenant is not None
        scheduler.on_finish(done, service_s[done.facts.program.tenant], now)
        charged[done.facts.program.tenant] += service_s[done.facts.program.tenant]
        if done.facts.program.tenant in rotate:
            scheduler.on_program_end(done.facts.program, now)
        top_up()
    return charged


@pytest.mark.parametrize(
    ("weights", "service_s", "slots"),
    [
        ({"a": 1.0, "b": 1.0}, {"a": 0.2, "b": 0.2}, 1),
        ({"a": 1.0, "b": 1.0}, {"a": 0.1, "b": 1.3}, 4),  # unequal call sizes
        ({"a": 2.0, "b": 1.0}, {"a": 0.5, "b": 0.5}, 8),
        ({"a": 2.0, "b": 1.0}, {"a": 1.0, "b": 0.1}, 16),
        ({"a": 3.0, "b": 1.0, "c": 1.0}, {"a": 0.3, "b": 0.6, "c": 0.9}, 4),
    ],
)
def test_backlogged_shares_converge_to_weights(
    weights: dict[str, float], service_s: dict[str, float], slots: int
) -> None:
    """All tenants backlogged: each tenant's share of charged service is its weight over the
    sum of weights, whatever its call sizes and however many calls run at once."""
    charged = _run_backlogged(_fair(**weights), service_s, slots=slots, pops=3000)
    total = sum(charged.values())
    for tenant, weight in weights.items():
        assert charged[tenant] / total == pytest.approx(weight / sum(weights.values()), abs=0.02)


def test_rotating_ids_take_no_more_than_their_share() -> None:
    """Tenant ``g`` sends every call under a fresh program id (attained service 0, Q1 under
    PLAS); tenant ``w`` runs one long program. Bare PLAS serves ``w`` nothing while ``g`` has
    calls queued; with tenancy ``w`` gets half the charged service."""
    sizes = {"w": 0.5, "g": 0.5}
    rotate = frozenset({"g"})
    bare = _run_backlogged(build_scheduler("plas"), sizes, slots=4, pops=1000, rotate=rotate)
    # only w's first 2 x slots calls, queued in Q1 before w had any attained service
    assert bare["w"] <= 8 * sizes["w"]
    fair = _run_backlogged(_fair(), sizes, slots=4, pops=1000, rotate=rotate)
    assert fair["g"] / sum(fair.values()) == pytest.approx(0.5, abs=0.02)
    weighted = _run_backlogged(_fair(w=3.0), sizes, slots=4, pops=1000, rotate=rotate)
    assert weighted["g"] / sum(weighted.values()) == pytest.approx(0.25, abs=0.02)


def test_untagged_and_fresh_ids_are_charged_to_their_tenant() -> None:
    """Calls without a tenant are the default tenant's; every program id of a tenant adds to
    that one tenant's virtual time."""
    scheduler = _fair()
    assert tenant_of(make_call("p")) == DEFAULT_TENANT
    for index in range(3):
        call = make_call(f"fresh-{index}", tenant="g")
        scheduler.submit(call, 0.0)
        assert scheduler.pop(0.0) is call
        scheduler.on_finish(call, 0.25, 1.0)
    view = {t["tenant"]: t for t in scheduler.snapshot(1.0)["tenancy"]["tenants"]}
    assert view["g"]["charged_service_s"] == pytest.approx(0.75)
    assert view["g"]["virtual_s"] == pytest.approx(0.75)
    assert view["g"]["finished_calls"] == 3


def test_idle_tenant_banks_no_credit() -> None:
    """``a`` is served alone for 100 s of charged service; ``b`` then becomes backlogged. ``b``
    starts at the current virtual time, so from then on the two alternate instead of ``b``
    taking the next 100 s alone."""
    scheduler = _fair()
    for _ in range(200):
        call = make_call("a-long", tenant="a")
        scheduler.submit(call, 0.0)
        assert scheduler.pop(0.0) is call
        scheduler.on_finish(call, 0.5, 0.0)
    for tenant in ("a", "b"):
        for _ in range(10):
            scheduler.submit(make_call(f"{tenant}-long", tenant=tenant), 1.0)
    order = []
    for _ in range(10):
        call = scheduler.pop(1.0)
        assert call is not None and call.facts.program.tenant is not None
        order.append(call.facts.program.tenant)
        scheduler.on_finish(call, 0.5, 1.0)
    assert order.count("b") == 5
    # b's virtual time started at a's (the system virtual time), not at 0.
    view = {t["tenant"]: t for t in scheduler.snapshot(1.0)["tenancy"]["tenants"]}
    assert view["b"]["virtual_s"] == pytest.approx(view["a"]["virtual_s"], abs=0.5)


def test_returning_tenant_starts_at_system_virtual_time() -> None:
    """A tenant that went idle and comes back is lifted to the system virtual time (the
    start tag of the last call popped); one that kept a backlog is not."""
    scheduler = _fair()
    first = make_call("b-1", tenant="b")
    scheduler.submit(first, 0.0)
    assert scheduler.pop(0.0) is first
    scheduler.on_finish(first, 1.0, 0.0)  # b: v = 1.0, then idle
    for _ in range(20):
        call = make_call("a-long", tenant="a")
        scheduler.submit(call, 0.0)
        assert scheduler.pop(0.0) is call
        scheduler.on_finish(call, 1.0, 0.0)  # a: v = 20.0
    assert scheduler.system_virtual_s == pytest.approx(19.0)
    scheduler.submit(make_call("b-2", tenant="b"), 1.0)
    view = {t["tenant"]: t for t in scheduler.snapshot(1.0)["tenancy"]["tenants"]}
    assert view["b"]["virtual_s"] == pytest.approx(19.0)


@pytest.mark.parametrize("action", ["requeue", "cancel", "drop_expired"])
def test_queue_operations_keep_the_accounting(action: str) -> None:
    """A popped call that is requeued gives its in-flight estimate back; cancelled and
    expired queued calls were never charged; a finished call's estimate is replaced by the
    charged service."""
    scheduler = _fair()
    warm = make_call("a-long", tenant="a")
    scheduler.submit(warm, 0.0)
    assert scheduler.pop(0.0) is warm
    scheduler.on_finish(warm, 0.8, 0.0)  # a's estimate is now 0.8 s per call
    before = scheduler.snapshot(0.0)["tenancy"]["tenants"][0]["virtual_s"]
    call = make_call("a-long", tenant="a", deadline_s=5.0)
    other = make_call("b-long", tenant="b")
    scheduler.submit(call, 1.0)
    scheduler.submit(other, 1.0)
    if action == "requeue":
        # b is lifted to a's 0.8 (a is backlogged); the tie goes to a, seen first
        assert scheduler.pop(1.0) is call
        assert scheduler.pop(1.0) is other
        scheduler.requeue(other, 1.0)
        popped = scheduler.pop(1.0)
        assert popped is other  # same place; its estimate was taken back
        scheduler.on_finish(other, 0.3, 2.0)
        scheduler.on_finish(call, 0.8, 2.0)
        views = {t["tenant"]: t for t in scheduler.snapshot(2.0)["tenancy"]["tenants"]}
        assert views["b"]["in_flight"] == 0
        assert views["b"]["virtual_s"] == pytest.approx(0.8 + 0.3)
        assert views["a"]["virtual_s"] == pytest.approx(0.8 + 0.8)
        assert views["a"]["charged_service_s"] == pytest.approx(1.6)
        assert scheduler.queued() == 0
        return
    if action == "cancel":
        assert scheduler.cancel(call, 2.0)
        assert not scheduler.cancel(call, 2.0)
        dropped = [call]
    else:
        dropped = scheduler.drop_expired(6.0)
        assert dropped == [call]
    views = {t["tenant"]: t for t in scheduler.snapshot(6.0)["tenancy"]["tenants"]}
    assert views["a"]["virtual_s"] == pytest.approx(before)
    assert views["a"]["queued"] == 0 and views["a"]["in_flight"] == 0
    assert scheduler.queued() == 1
    assert scheduler.pop(6.0) is other
    assert scheduler.pop(6.0) is None


def test_in_flight_estimate_spreads_one_admission_round() -> None:
    """Popping many calls before any finishes (one admission round filling an engine) still
    alternates tenants: each pop charges the tenant an estimate at once."""
    scheduler = _fair()
    for tenant in ("a", "b"):
        for _ in range(8):
            scheduler.submit(make_call(f"{tenant}-long", tenant=tenant), 0.0)
    popped = [scheduler.pop(0.0) for _ in range(8)]
    assert [c.facts.program.tenant for c in popped if c is not None].count("a") == 4


def test_backend_priority_ranks_tenants_by_virtual_time() -> None:
    """The tenant behind its share gets the engine's first priorities (rank 0 x 5 queues +
    its PLAS level), the one ahead rank 1 x 5 + its level; a call is ranked by its start tag;
    a tenant with nothing queued or in flight does not count; alone, the inner priority."""
    scheduler = _fair("plas", b=2.0)
    for _ in range(3):
        ahead = make_call("a-long", tenant="a")
        scheduler.submit(ahead, 0.0)
        assert scheduler.pop(0.0) is ahead
        scheduler.on_finish(ahead, 1.0, 0.0)
    assert scheduler.backend_priority(ahead) == 2  # alone: PLAS's level for 2 s attained
    behind = make_call("b-long", tenant="b")
    scheduler.submit(behind, 1.0)  # b starts at V = 2 (the last start tag); v_a = 3
    again = make_call("a-long", tenant="a")
    scheduler.submit(again, 1.0)  # a: 3 s attained, PLAS level 2
    assert scheduler.pop(1.0) is behind  # start tag 2; v_b = 2 + 1.0 / 2
    assert scheduler.backend_priority(behind) == 0 * 5 + 0
    assert scheduler.pop(1.0) is again  # start tag 3 > v_b = 2.5
    assert scheduler.backend_priority(again) == 1 * 5 + 2
    scheduler.on_finish(behind, 0.1, 2.0)
    assert scheduler.backend_priority(again) == 2  # b is no longer active


def test_single_tenant_pops_exactly_like_the_inner_policy() -> None:
    """One tenant (named or the default one): the same pop order as bare PLAS on a random
    workload of submits, pops, streamed tokens, finishes, requeues and program ends."""
    for tenant in (None, "acme"):
        rng = random.Random(7)
        bare = PlasScheduler()
        fair = _fair("plas")
        orders: list[list[str]] = [[], []]
        running: list[list[CallEntry]] = [[], []]
        now = 0.0
        for step in range(3000):
            now += rng.random() * 0.05
            roll = rng.random()
            if roll < 0.4:
                program = f"p{rng.randrange(30)}"
                deadline = now + rng.uniform(0.5, 5.0) if rng.random() < 0.1 else math.inf
                for _index, scheduler in enumerate((bare, fair)):
                    call = CallEntry(
                        CallFacts(
                            call_id=f"c{step}",
                            program=ProgramKey.untagged(program, tenant),
                            arrival_s=now,
                            deadline_s=deadline,
                        )
                    )
                    scheduler.submit(call, now)
            elif roll < 0.7:
                for index, scheduler in enumerate((bare, fair)):
                    call = scheduler.pop(now)
                    if call is not None:
                        orders[index].append(call.facts.call_id)
                        running[index].append(call)
            elif roll < 0.75:
                for index, scheduler in enumerate((bare, fair)):
                    if running[index]:
                        scheduler.requeue(running[index].pop(), now)
            elif roll < 0.97:
                pick = rng.randrange(1 << 30)
                tokens = rng.randrange(1, 200)
                service = rng.uniform(0.01, 3.0)
                for index, scheduler in enumerate((bare, fair)):
                    if running[index]:
                        call = running[index].pop(pick % len(running[index]))
                        scheduler.on_tokens(call, tokens, now)
                        scheduler.on_finish(call, service, now)
            else:
                program = f"p{rng.randrange(30)}"
                for index, scheduler in enumerate((bare, fair)):
                    expired = scheduler.drop_expired(now)
                    orders[index] += [f"drop:{c.facts.call_id}" for c in expired]
                    key = ProgramKey(session_id="anonymous", program_id=program, tenant=tenant)
                    if not any(c.facts.program.program_id == program for c in running[index]):
                        scheduler.on_program_end(key, now)
        assert len(orders[0]) > 500
        assert orders[0] == orders[1]
        assert bare.queued() == fair.queued()


def test_through_the_dispatcher() -> None:
    """The Dispatcher drives the tenancy scheduler unchanged: with a fixed window of 4 on one
    backend, a rotating tenant and a one-program tenant share the window's admissions."""
    scheduler = _fair()
    dispatcher = Dispatcher(scheduler, RoundRobinRouter(), FixedWindowAdmission(4))
    for index in range(40):
        dispatcher.submit(make_facts(f"g-{index}", tenant="g"), 0.0)
        dispatcher.submit(make_facts("w-long", tenant="w"), 0.0)
    admitted = {"g": 0, "w": 0}
    in_flight: list[CallEntry] = []
    now = 0.0
    for _ in range(30):
        view = BackendView(backend_id="engine-0", in_flight=len(in_flight))
        for admission in dispatcher.admit(now, [view]):
            assert admission.call.facts.program.tenant is not None
            admitted[admission.call.facts.program.tenant] += 1
            in_flight.append(admission.call)
        now += 1.0
        done = in_flight.pop(0)
        dispatcher.on_finish(done, "engine-0", 0.4, now)
    assert abs(admitted["g"] - admitted["w"]) <= 2


def test_snapshot_shows_tenants_and_merged_queues() -> None:
    scheduler = _fair("plas", a=2.0)
    for tenant in ("a", "b", "b"):
        scheduler.submit(make_call(f"{tenant}-1", tenant=tenant), 0.0)
    call = scheduler.pop(0.0)
    assert call is not None
    scheduler.on_finish(call, 1.0, 0.5)
    snapshot = scheduler.snapshot(1.0)
    json.dumps(snapshot)
    assert snapshot["policy"] == "plas+tenancy"
    assert snapshot["inner_policy"] == "plas"
    assert snapshot["queued"] == 2
    assert sum(q["length"] for q in snapshot["queues"]) == 2
    assert all("tenant" in c for q in snapshot["queues"] for c in q["calls"])
    tenants = {t["tenant"]: t for t in snapshot["tenancy"]["tenants"]}
    assert tenants["a"]["weight"] == 2.0 and tenants["b"]["weight"] == 1.0
    assert tenants["a"]["share"] == pytest.approx(1.0)
    assert tenants["a"]["virtual_s"] == pytest.approx(0.5)
    assert tenants["b"]["queued"] == 2


@pytest.mark.parametrize(
    ("tenancy", "message"),
    [
        ({"weights": {"a": 0}}, r"tenancy\.weights\.a: must be"),
        ({"weights": {"a": -1.0}}, r"tenancy\.weights\.a: must be"),
        ({"weights": {"": 1.0}}, "non-empty"),
        ({"weights": {"a": True}}, r"tenancy\.weights\.a: must be"),
        ({"default_weight": math.inf}, "default_weight"),
        ({"initial_call_charge_s": 0}, "initial_call_charge_s"),
        ({"enabled": "yes"}, "enabled"),
        ({"weigths": {}}, "tenancy.weigths: unknown key"),
        ("on", "must be a table"),
    ],
)
def test_bad_tenancy_config_is_rejected(tenancy: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_scheduler("plas", tenancy=tenancy)  # type: ignore[arg-type]


def test_factory_wiring() -> None:
    """A mapping works like a TenancyConfig; ``enabled=False`` builds the bare policy; the
    inner policy's name and parameters are checked before any tenant exists."""
    fair = build_scheduler("atlas", {"starvation_beta": 3.0}, tenancy={"weights": {"a": 2}})
    assert isinstance(fair, TenantFairScheduler) and fair.inner_name == "atlas"
    assert build_scheduler("plas", tenancy={"enabled": False}).name == "plas"
    with pytest.raises(ConfigError, match="unknown scheduling policy"):
        build_scheduler("lottery", tenancy=TenancyConfig())
    with pytest.raises(ConfigError, match="srpt is clairvoyant"):
        build_scheduler("srpt", tenancy=TenancyConfig())
    assert (
        build_scheduler("srpt", oracle=OracleBook(), tenancy=TenancyConfig()).name == "srpt+tenancy"
    )
