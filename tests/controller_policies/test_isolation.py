"""Per-tenant caps on calls in flight (scheduling/isolation.py; docs/tenancy.md, "Isolation
of the batch"): a tenant above its share of a backend's window is held while another tenant is
active; one tenant alone is never held."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.errors import ConfigError
from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.scheduling.isolation import IsolationConfig, TenantIsolation
from agentrt_controller.scheduling.tenancy import TenancyConfig, TenantFairScheduler
from tests.controller_policies.helpers import make_facts

pytestmark = pytest.mark.timeout(60)

BACKEND = "engine-0"


def _isolation(
    reservation_s: float = 10.0, surplus_share: float | None = None, **weights: float
) -> TenantIsolation:
    """Max-min caps only by default (``surplus_share=None``)."""
    config = IsolationConfig(reservation_s=reservation_s, surplus_share=surplus_share)
    return TenantIsolation(config, lambda t: weights.get(t, 1.0))


def _fill(isolation: TenantIsolation, tenant: str, calls: int, now_s: float = 0.0) -> None:
    for index in range(calls):
        isolation.on_admit(f"{tenant}-{index}", tenant, BACKEND, now_s)


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"reservation_s": -1}, "reservation_s"),
        ({"reservation_s": math.inf}, "reservation_s"),
        ({"reservation_s": True}, "reservation_s"),
        ({"surplus_share": 0}, "surplus_share"),
        ({"surplus_share": 1.5}, "surplus_share"),
        ({"surplus_share": True}, "surplus_share"),
        ({"backlog_s": -0.5}, "backlog_s"),
        ({"backlog_s": "5"}, "backlog_s"),
        ({"enabled": "yes"}, "enabled"),
        ({"window": 4}, "tenant_isolation.window: unknown key"),
    ],
)
def test_bad_config_is_refused(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        IsolationConfig.from_mapping(values)


def test_tenancy_config_takes_a_table_or_a_flag() -> None:
    table = TenancyConfig.from_mapping({"isolation": {"surplus_share": 0.5}})
    assert table.isolation == IsolationConfig(surplus_share=0.5)
    assert TenancyConfig.from_mapping({"isolation": False}).isolation.enabled is False
    assert TenancyConfig.from_mapping({"isolation": True}).isolation.enabled is True
    with pytest.raises(ConfigError, match="isolation"):
        TenancyConfig.from_mapping({"isolation": 3})
    with pytest.raises(ConfigError, match=r"tenancy\.isolation\.windows: unknown key"):
        TenancyConfig.from_mapping({"isolation": {"windows": 3}})


# --- the policy -------------------------------------------------------------------------------


def test_one_tenant_alone_is_never_held() -> None:
    isolation = _isolation()
    _fill(isolation, "greedy", 100)
    assert isolation.allows("greedy", BACKEND, 8, 0.0, {"greedy": 5})
    assert isolation.caps(8, 0.0, {"greedy": 5}) == {}


def test_a_tenant_above_its_share_is_held_while_another_waits() -> None:
    isolation = _isolation()
    _fill(isolation, "greedy", 7)
    queued = {"greedy": 20, "well": 1}
    # Max-min over demands: well asks for 1 call, greedy gets the rest of the window.
    assert isolation.caps(8, 0.0, queued) == {"greedy": 7, "well": 1}
    assert not isolation.allows("greedy", BACKEND, 8, 0.0, queued)
    assert isolation.allows("well", BACKEND, 8, 0.0, queued)
    # A burst of well's: its demand (6) is above half the window, so each gets half.
    burst = {"greedy": 20, "well": 6}
    assert isolation.caps(8, 0.0, burst) == {"greedy": 4, "well": 4}
    assert isolation.allows("well", BACKEND, 8, 0.0, burst)
    assert isolation.held_total == 1


def test_weights_and_the_contended_window_set_the_caps() -> None:
    weights = {"paid": 3.0, "free": 1.0, "well": 1.0}
    isolation = TenantIsolation(IsolationConfig(surplus_share=0.5), weights.__getitem__)
    greedy = {"paid": 100, "free": 100}
    isolation.observe(0.0, greedy)
    # Nobody within its share: no surplus bound, the window is split by weight.
    assert isolation.caps(8, 0.0, greedy) == {"paid": 6, "free": 2}
    assert isolation.caps(8, 6.0, greedy) == {"paid": 6, "free": 2}
    # Backlogged for 6 s, while a tenant within its share is active: together they hold
    # half the window.
    assert isolation.caps(16, 6.0, {**greedy, "well": 1}) == {"paid": 6, "free": 2, "well": 1}
    # At 4.9 s the backlog is shorter than backlog_s: max-min over the demands only.
    assert isolation.caps(16, 4.9, {**greedy, "well": 1}) == {"paid": 11, "free": 3, "well": 1}
    # Every active tenant gets at least one call, however small its share.
    assert isolation.caps(2, 6.0, {**greedy, "well": 1}) == {"paid": 1, "free": 1, "well": 1}


def test_the_surplus_share_keeps_the_batch_light_for_a_tenant_within_its_share() -> None:
    isolation = _isolation(surplus_share=0.25)
    _fill(isolation, "greedy", 64)
    isolation.observe(0.0, {"greedy": 500})
    queued = {"greedy": 500, "well": 10}
    # Max-min alone would give greedy 246 of 256; a quarter of the window is its bound.
    assert isolation.backlogged("greedy", 6.0) and not isolation.backlogged("well", 6.0)
    assert isolation.caps(256, 6.0, queued) == {"greedy": 64, "well": 10}
    assert not isolation.allows("greedy", BACKEND, 256, 6.0, queued)
    assert isolation.allows("well", BACKEND, 256, 6.0, queued)
    # The tenants within their share come first: greedy gets what their demand leaves.
    assert isolation.caps(256, 6.0, {"greedy": 500, "well": 250}) == {"greedy": 6, "well": 250}
    # Its queue emptied once: the backlog starts again.
    isolation.observe(7.0, {})
    isolation.observe(7.5, {"greedy": 3})
    assert not isolation.backlogged("greedy", 12.0)


def test_the_reservation_keeps_room_for_a_tenant_between_calls() -> None:
    isolation = _isolation(reservation_s=10.0)
    isolation.on_submit("well", 0.0)
    isolation.on_admit("w-1", "well", BACKEND, 0.0)
    isolation.on_release("w-1", 2.0)  # well is in a tool wait now: nothing queued or running
    _fill(isolation, "greedy", 7, now_s=2.0)
    queued = {"greedy": 10}
    assert not isolation.allows("greedy", BACKEND, 8, 11.9, queued)
    assert isolation.active(11.9, queued) == {"greedy", "well"}
    assert isolation.allows("greedy", BACKEND, 8, 12.1, queued)
    assert isolation.active(12.1, queued) == {"greedy"}


def test_the_reservation_keeps_a_recent_burst() -> None:
    """A tenant that had 3 calls queued a moment ago keeps room for 3 during its
    reservation, not just for one."""
    isolation = _isolation(reservation_s=10.0)
    isolation.on_submit("well", 0.0)
    isolation.observe(0.0, {"well": 3})
    _fill(isolation, "greedy", 5, now_s=1.0)
    assert isolation.demand("well", 5.0, {}) == 3
    assert isolation.caps(8, 5.0, {"greedy": 10}) == {"well": 3, "greedy": 5}
    assert not isolation.allows("greedy", BACKEND, 8, 5.0, {"greedy": 10})
    assert isolation.demand("well", 10.5, {}) == 0  # the peak is older than the reservation


def test_release_forgets_the_call_once() -> None:
    isolation = _isolation()
    _fill(isolation, "a", 2)
    isolation.on_release("a-0", 1.0)
    isolation.on_release("a-0", 1.0)
    isolation.on_release("unknown", 1.0)
    assert isolation.in_flight("a") == 1 and isolation.in_flight("a", BACKEND) == 1
    assert isolation.snapshot(1.0, {})["in_flight"] == [
        {"tenant": "a", "backend": BACKEND, "calls": 1}
    ]


# --- through the Dispatcher -------------------------------------------------------------------


def _dispatcher(window: int = 8, **isolation: object) -> Dispatcher:
    config = TenancyConfig(isolation=IsolationConfig(**isolation))  # type: ignore[arg-type]
    scheduler = build_scheduler("plas", tenancy=config)
    assert isinstance(scheduler, TenantFairScheduler)
    return Dispatcher(scheduler, RoundRobinRouter(), FixedWindowAdmission(window))


def _admit(dispatcher: Dispatcher, in_flight: list[CallEntry], now_s: float) -> list[CallEntry]:
    view = BackendView(backend_id=BACKEND, in_flight=len(in_flight))
    admitted = [a.call for a in dispatcher.admit(now_s, [view])]
    in_flight += admitted
    return admitted


def _finish(
    dispatcher: Dispatcher, in_flight: list[CallEntry], tenant: str, n: int, now: float
) -> None:
    for call in [c for c in in_flight if c.facts.program.tenant == tenant][:n]:
        in_flight.remove(call)
        dispatcher.on_finish(call, BACKEND, 0.1, now)


def test_dispatcher_holds_the_tenant_above_its_share() -> None:
    dispatcher = _dispatcher(surplus_share=0.25)
    for index in range(20):
        dispatcher.submit(make_facts(f"g-{index}", tenant="greedy"), 0.0)
    in_flight: list[CallEntry] = []
    assert len(_admit(dispatcher, in_flight, 0.0)) == 8  # alone: the whole window
    _finish(dispatcher, in_flight, "greedy", 6, 6.0)
    dispatcher.submit(make_facts("w", tenant="well"), 6.0)
    # Greedy has been backlogged for 6 s: a quarter of the window (2) while well is active,
    # although 5 slots stay free.
    assert [c.facts.program.tenant for c in _admit(dispatcher, in_flight, 6.0)] == ["well"]
    assert _admit(dispatcher, in_flight, 6.1) == []
    snapshot = dispatcher.snapshot(6.1)
    assert snapshot["isolation"]["active_tenants"] == ["greedy", "well"]
    assert snapshot["isolation"]["above_share"] == ["greedy"]


def test_dispatcher_is_work_conserving_for_a_tenant_alone() -> None:
    dispatcher = _dispatcher()
    for index in range(20):
        dispatcher.submit(make_facts(f"g-{index}", tenant="greedy"), 0.0)
    in_flight: list[CallEntry] = []
    assert len(_admit(dispatcher, in_flight, 0.0)) == 8


def test_dispatcher_frees_room_for_a_tenant_that_arrives_late() -> None:
    """Greedy filled the window alone; when well arrives, greedy's finishing calls are not
    replaced until greedy is back at its share, and well's next call finds room during its
    reservation."""
    dispatcher = _dispatcher(reservation_s=10.0, surplus_share=None)
    for index in range(40):
        dispatcher.submit(make_facts(f"g-{index}", tenant="greedy"), 0.0)
    in_flight: list[CallEntry] = []
    assert len(_admit(dispatcher, in_flight, 0.0)) == 8
    dispatcher.submit(make_facts("w-1", tenant="well"), 1.0)
    now = 1.0
    for _ in range(4):  # well's call takes the first free slot, greedy keeps the rest
        now += 0.1
        done = next(c for c in in_flight if c.facts.program.tenant == "greedy")
        in_flight.remove(done)
        dispatcher.on_finish(done, BACKEND, 0.1, now)
        _admit(dispatcher, in_flight, now)
    assert sorted(c.facts.program.tenant or "" for c in in_flight) == ["greedy"] * 7 + ["well"]
    well = next(c for c in in_flight if c.facts.program.tenant == "well")
    in_flight.remove(well)
    dispatcher.on_finish(well, BACKEND, 0.1, now)  # well goes into a tool wait
    assert _admit(dispatcher, in_flight, now) == []  # its slot stays free for it
    assert _admit(dispatcher, in_flight, now + 5.0) == []
    dispatcher.submit(make_facts("w-1", tenant="well"), now + 6.0)
    assert [c.facts.program.tenant for c in _admit(dispatcher, in_flight, now + 6.0)] == ["well"]
    well = in_flight.pop()
    dispatcher.on_finish(well, BACKEND, 0.1, now + 6.5)
    # The reservation ends 10 s after well's last call: greedy may fill the window again.
    assert _admit(dispatcher, in_flight, now + 16.4) == []
    assert [c.facts.program.tenant for c in _admit(dispatcher, in_flight, now + 16.6)] == ["greedy"]


def test_retained_lane_calls_are_held_by_the_caps_and_go_first_within_their_tenant() -> None:
    """A retained call is capped like any call of its tenant (docs/tenancy.md, "The retained
    lane"); once its tenant may run again it overtakes its tenant's queued calls only."""
    dispatcher = _dispatcher(window=6, surplus_share=0.5)
    for index in range(10):
        dispatcher.submit(make_facts(f"g-{index}", tenant="greedy"), 0.0)
    in_flight: list[CallEntry] = []
    assert len(_admit(dispatcher, in_flight, 0.0)) == 6
    _finish(dispatcher, in_flight, "greedy", 4, 6.0)
    dispatcher.submit(make_facts("w", tenant="well"), 6.0)
    assert sorted(c.facts.program.tenant or "" for c in _admit(dispatcher, in_flight, 6.0)) == [
        "greedy",
        "well",
    ]
    retained = make_facts("g-kept", tenant="greedy")
    dispatcher.table.start(retained.program, 6.0)
    dispatcher.set_retention(retained.program, 100.0)
    kept = dispatcher.submit(retained, 6.0)
    assert kept.lane == "retained" and dispatcher.retained_queued() == 1
    assert _admit(dispatcher, in_flight, 6.0) == []  # greedy is at its cap of 3: held
    assert dispatcher.isolation is not None
    assert dispatcher.isolation.in_flight("greedy") == 3
    _finish(dispatcher, in_flight, "greedy", 1, 7.0)
    # Room for one greedy call: the retained one, ahead of greedy's earlier calls.
    assert [c.facts.call_id for c in _admit(dispatcher, in_flight, 7.0)] == [retained.call_id]
    assert dispatcher.isolation.in_flight("greedy") == 3


def test_adaptive_window_caps_follow_its_bound_not_its_current_size() -> None:
    """Shares of the adaptive window's bound (batch size here): a window the caps keep from
    filling would never grow."""
    config = TenancyConfig(isolation=IsolationConfig())
    scheduler = build_scheduler("plas", tenancy=config)
    dispatcher = Dispatcher(scheduler, RoundRobinRouter(), AdaptiveWindowAdmission())
    for index in range(40):
        dispatcher.submit(make_facts(f"g-{index}", tenant="greedy"), 0.0)
    dispatcher.submit(make_facts("w", tenant="well"), 0.0)
    view = BackendView(backend_id=BACKEND, in_flight=0, max_num_seqs=32, num_waiting=0)
    admitted = [a.call.facts.program.tenant for a in dispatcher.admit(0.0, [view])]
    # The initial window (8) limits the round; greedy's cap (16 of 32) does not bind yet.
    assert admitted.count("greedy") == 7 and admitted.count("well") == 1


def test_isolation_off_keeps_the_work_conserving_dispatcher() -> None:
    dispatcher = _dispatcher(enabled=False)
    assert dispatcher.isolation is None
    for index in range(20):
        dispatcher.submit(make_facts(f"g-{index}", tenant="greedy"), 0.0)
    dispatcher.submit(make_facts("w", tenant="well"), 0.0)
    assert len(_admit(dispatcher, [], 0.0)) == 8
    assert dispatcher.snapshot(0.0)["isolation"] == {"enabled": False}


# --- property: nobody below its share is held; one tenant alone fills the window --------------

_STEPS = st.lists(
    st.tuples(st.sampled_from(["submit", "finish", "tick"]), st.integers(0, 2), st.integers(1, 4)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_STEPS, window=st.integers(1, 10), tenants=st.integers(1, 3))
def test_caps_never_waste_a_share(
    steps: list[tuple[str, int, int]], window: int, tenants: int
) -> None:
    dispatcher = _dispatcher(window=window, reservation_s=2.0)
    isolation = dispatcher.isolation
    assert isolation is not None and dispatcher._fair is not None
    names = [f"t{i}" for i in range(tenants)]
    in_flight: list[CallEntry] = []
    now = 0.0
    for action, who, count in steps:
        tenant = names[who % tenants]
        now += 0.5
        if action == "submit":
            for _ in range(count):
                dispatcher.submit(make_facts(f"{tenant}-p", now, tenant=tenant), now)
        elif action == "finish":
            for call in [c for c in in_flight if c.facts.program.tenant == tenant][:count]:
                in_flight.remove(call)
                dispatcher.on_finish(call, BACKEND, 0.2, now)
        _admit(dispatcher, in_flight, now)
        assert len(in_flight) <= window
        queued = dispatcher._fair.queued_by_tenant()
        if len(in_flight) == window:
            continue
        caps = isolation.caps(window, now, queued)
        for name in queued:
            # Held only at or above its guaranteed share (and only with company).
            assert caps, "a tenant alone was held below a full window"
            assert isolation.in_flight(name, BACKEND) >= caps[name]


def test_recent_service_marks_the_tenant_above_its_share_when_nothing_queues() -> None:
    """On a large batch nothing queues at the controller: the tenant taking more than its
    share of recent charged service is the one held (by more than the 10 % margin)."""
    isolation = _isolation(surplus_share=0.25)
    for index in range(3):
        isolation.on_admit(f"g-{index}", "greedy", BACKEND, 0.0)
        isolation.on_release(f"g-{index}", 1.0, service_s=2.0)
    isolation.on_admit("w-0", "well", BACKEND, 0.0)
    isolation.on_release("w-0", 1.0, service_s=2.0)
    assert isolation.recent_service_s("greedy", 1.0) == pytest.approx(6.0)
    assert isolation.recent_service_s("greedy", 31.0) == pytest.approx(3.0)  # one half-life
    assert isolation.above_share(1.0, {"greedy", "well"}) == {"greedy"}
    assert isolation.caps(256, 1.0, {"greedy": 1, "well": 1}) == {"greedy": 64, "well": 1}
    # Equal service within the margin: nobody is held beyond max-min fairness.
    isolation.on_admit("w-1", "well", BACKEND, 1.0)
    isolation.on_release("w-1", 1.0, service_s=3.5)
    assert isolation.above_share(1.0, {"greedy", "well"}) == set()


def test_caps_are_per_backend_and_route_the_call_where_its_tenant_has_room() -> None:
    dispatcher = _dispatcher(window=4, surplus_share=0.25)
    for index in range(12):
        dispatcher.submit(make_facts(f"g-{index}", tenant="greedy"), 0.0)
    flights: dict[str, list[CallEntry]] = {"e0": [], "e1": []}

    def admit(now: float) -> list[tuple[str | None, str]]:
        views = [BackendView(backend_id=b, in_flight=len(c)) for b, c in flights.items()]
        out = []
        for admission in dispatcher.admit(now, views):
            flights[admission.backend_id].append(admission.call)
            out.append((admission.call.facts.program.tenant, admission.backend_id))
        return out

    assert len(admit(0.0)) == 8  # alone: both windows
    for backend, calls in flights.items():  # e0 keeps one greedy call, e1 none
        for call in calls[: 3 if backend == "e0" else 4]:
            dispatcher.on_finish(call, backend, 0.1, 6.0)
        del calls[: 3 if backend == "e0" else 4]
    dispatcher.submit(make_facts("w", tenant="well"), 6.0)
    admitted = admit(6.0)
    # Greedy (backlogged 6 s) may hold one call per backend while well is active: its next
    # call can only go to e1; well's call goes wherever the router sends it.
    assert sorted(t for t, _ in admitted) == ["greedy", "well"]
    assert ("greedy", "e1") in admitted
    assert dispatcher.isolation is not None
    assert [dispatcher.isolation.in_flight("greedy", b) for b in ("e0", "e1")] == [1, 1]
    assert admit(6.1) == []
