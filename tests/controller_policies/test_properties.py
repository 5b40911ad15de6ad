"""Property tests (hypothesis): bounded waits with β, monotone priorities, a non-decreasing
ATLAS scalar, and FCFS inside a level (checked against a shadow model)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.api import Scheduler
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.scheduling.multilevel import AtlasScheduler, PlasScheduler
from tests.controller_policies.helpers import make_call

pytestmark = pytest.mark.timeout(120)

#: A program of the default session.
K = ProgramKey.untagged

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- a one-slot, non-preemptive server (the proxy's view) fed by chain programs ---------------


@dataclass
class Chain:
    arrival: int
    durations: tuple[int, ...]


@dataclass
class Served:
    released: int
    started: int
    attained_before: int  # the program's attained service when the call was released


@dataclass
class Run:
    calls: dict[str, Served] = field(default_factory=dict)
    release_times: list[int] = field(default_factory=list)


def serve_chains(scheduler: Scheduler, chains: list[Chain], horizon: int = 100_000) -> Run:
    """Integer-step simulation; a program's next call is released when its previous finishes."""
    run = Run()
    attained = [0] * len(chains)
    next_index = [0] * len(chains)
    calls: dict[str, tuple[int, int]] = {}  # call id -> (program, duration)
    running: tuple[CallEntry, int] | None = None  # (call, end step)
    arrivals = sorted(range(len(chains)), key=lambda i: chains[i].arrival)
    pointer = 0

    def release(program: int, now: int) -> None:
        index = next_index[program]
        call = make_call(f"p{program}", float(now))
        calls[call.facts.call_id] = (program, chains[program].durations[index])
        run.calls[call.facts.call_id] = Served(now, -1, attained[program])
        run.release_times.append(now)
        scheduler.submit(call, float(now))

    for now in range(horizon):
        if running is not None and running[1] == now:
            call, _ = running
            program, duration = calls[call.facts.call_id]
            scheduler.on_finish(call, float(duration), float(now))
            attained[program] += duration
            next_index[program] += 1
            running = None
            if next_index[program] < len(chains[program].durations):
                release(program, now)
        while pointer < len(arrivals) and chains[arrivals[pointer]].arrival == now:
            release(arrivals[pointer], now)
            pointer += 1
        if running is None:
            popped = scheduler.pop(float(now))
            if popped is not None:
                run.calls[popped.facts.call_id].started = now
                running = (popped, now + calls[popped.facts.call_id][1])
        if running is None and pointer == len(arrivals) and not scheduler.queued():
            return run
    raise AssertionError("did not drain")


chains_strategy = st.lists(
    st.builds(
        Chain,
        arrival=st.integers(0, 150),
        durations=st.lists(st.integers(1, 4), min_size=1, max_size=6).map(tuple),
    ),
    min_size=1,
    max_size=40,
)


@SETTINGS
@given(
    chains=chains_strategy,
    beta=st.sampled_from([0.5, 1.0, 3.0]),
    policy=st.sampled_from(["plas", "atlas", "mlfq"]),
)
def test_with_beta_every_wait_is_bounded(chains: list[Chain], beta: float, policy: str) -> None:
    """A call of a program with attained service S is promoted to Q1 at the first pop after
    waiting β·S; after that only calls released before that moment can be ahead of it. So its
    wait is at most β·S + d + N·d, with d the longest call and N the calls released by then —
    a bound that later arrivals cannot push back."""
    scheduler = build_scheduler(policy, SchedulerConfig(starvation_beta=beta))
    run = serve_chains(scheduler, chains)
    longest = max(max(c.durations) for c in chains)
    for served in run.calls.values():
        promotion_by = served.released + beta * served.attained_before + longest
        released_by_then = sum(1 for t in run.release_times if t <= promotion_by)
        wait = served.started - served.released
        assert wait <= beta * served.attained_before + longest + released_by_then * longest


def test_without_beta_a_long_program_starves_while_fresh_ones_keep_coming() -> None:
    """The contrast: β unset, one slot, a fresh one-step program every step. The long
    program's second call runs only when the stream stops; with β = 3 it is promoted after
    3 × its 40 s of service and then waits behind the Q1 backlog of that moment (the 40 fresh
    calls that queued while its first call ran: arrivals match the service rate)."""
    stream = [Chain(0, (40, 1))] + [Chain(t, (1,)) for t in range(1, 540)]
    starved = serve_chains(build_scheduler("plas"), stream)
    fair = serve_chains(build_scheduler("plas", SchedulerConfig(starvation_beta=3.0)), stream)
    victim = next(iter(starved.calls.values()))
    victim_second = next(s for s in starved.calls.values() if s.attained_before == 40)
    fair_second = next(s for s in fair.calls.values() if s.attained_before == 40)
    assert victim.started == 0
    assert victim_second.started - victim_second.released >= 499
    assert fair_second.started - fair_second.released <= 3 * 40 + 40 + 1


# --- priority is monotone in attained service -----------------------------------------------


@SETTINGS
@given(
    services=st.lists(st.floats(0.0, 50.0), min_size=1, max_size=20),
    policy=st.sampled_from(["plas", "atlas"]),
)
def test_entry_level_never_drops_as_a_chain_program_runs(
    services: list[float], policy: str
) -> None:
    scheduler = build_scheduler(policy)
    level, priority = 0, 0.0
    for now, service in enumerate(services):
        call = make_call("p", float(now))
        scheduler.submit(call, float(now))
        assert call.level >= level and call.priority_s >= priority
        level, priority = call.level, call.priority_s
        assert scheduler.pop(float(now)) is call
        scheduler.on_finish(call, service, float(now) + 0.5)


@SETTINGS
@given(
    attained=st.lists(st.floats(0.0, 100.0), min_size=2, max_size=12),
    order=st.randoms(use_true_random=False),
)
def test_less_attained_service_is_served_no_later(attained: list[float], order: object) -> None:
    """Programs with random attained service each queue one call at the same time (in random
    order): the pop order never puts a program in a lower queue before one in a higher."""
    scheduler = PlasScheduler()
    for i, service in enumerate(attained):
        first = make_call(f"p{i}")
        scheduler.submit(first, 0.0)
        scheduler.pop(0.0)
        scheduler.on_finish(first, service, 0.0)
    calls = [make_call(f"p{i}", 1.0) for i in range(len(attained))]
    order.shuffle(calls)  # type: ignore[attr-defined]
    for call in calls:
        scheduler.submit(call, 1.0)
    popped = [scheduler.pop(2.0) for _ in calls]
    services = [attained[int(c.facts.program.program_id[1:])] for c in popped if c is not None]
    levels = [scheduler.config.level_for(s) for s in services]
    assert levels == sorted(levels)


# --- the ATLAS scalar never decreases ---------------------------------------------------------


@SETTINGS
@given(
    rounds=st.lists(
        st.tuples(
            st.integers(1, 5),
            st.lists(st.floats(0.0, 20.0), min_size=5, max_size=5),
            st.randoms(use_true_random=False),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_atlas_scalar_never_decreases(rounds: list[tuple[int, list[float], object]]) -> None:
    """Fan-out rounds of parallel calls finishing in random order with random service."""
    scheduler = AtlasScheduler()
    key = K("p")
    scalar, now = 0.0, 0.0
    for width, services, rng in rounds:
        calls = [make_call("p", now, thread_id=f"t{i}") for i in range(width)]
        for call in calls:
            scheduler.submit(call, now)
            assert call.priority_s == scalar  # parallel calls share one priority
        running = [scheduler.pop(now) for _ in calls]
        rng.shuffle(running)  # type: ignore[attr-defined]
        for popped, service in zip(running, services, strict=False):
            assert popped is not None
            now += 1.0
            scheduler.on_finish(popped, service, now)
            entry = scheduler.table.get(key)
            assert entry is not None
            assert entry.critical_path_s >= scalar
            assert entry.critical_path_s <= entry.attained_service_s + 1e-9
            scalar = entry.critical_path_s


# --- FCFS inside a level, against a shadow model ---------------------------------------------

op_strategy = st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 5), st.sampled_from([math.inf, 5.0, 9.0])),
    st.tuples(st.just("pop"), st.just(0), st.just(0.0)),
    st.tuples(st.just("requeue"), st.just(0), st.just(0.0)),
    st.tuples(st.just("cancel"), st.integers(0, 30), st.just(0.0)),
    st.tuples(st.just("drop"), st.just(0), st.just(0.0)),
    st.tuples(st.just("advance"), st.integers(1, 3), st.just(0.0)),
)


@SETTINGS
@given(ops=st.lists(op_strategy, max_size=80), policy=st.sampled_from(["plas", "atlas", "mlfq"]))
def test_pop_order_is_level_then_fcfs_then_deadline(
    ops: list[tuple[str, int, float]], policy: str
) -> None:
    """Every pop returns the first call of the highest non-empty level, where "first" is the
    earliest entry into the level, then the earliest deadline, then submission order; requeue
    keeps a call's place; cancel and deadline drops remove exactly their calls."""
    scheduler = build_scheduler(policy)
    for program in range(6):  # programs 0..5 with 0, 1, 4, 10, 20, 40 s of attained service
        first = make_call(f"p{program}")
        scheduler.submit(first, 0.0)
        scheduler.pop(0.0)
        scheduler.on_finish(first, [0.0, 1.0, 4.0, 10.0, 20.0, 40.0][program], 0.0)
    shadow: list[CallEntry] = []
    submitted: list[CallEntry] = []
    last_popped: CallEntry | None = None
    now = 1.0
    for op, arg, deadline in ops:
        if op == "submit":
            call = make_call(f"p{arg}", now, deadline_s=now + deadline)
            scheduler.submit(call, now)
            shadow.append(call)
            submitted.append(call)
        elif op == "pop":
            expected = min(
                shadow,
                default=None,
                key=lambda c: (c.level, c.level_entered_s, c.facts.deadline_s, c.seq),
            )
            popped = scheduler.pop(now)
            assert popped is expected
            if popped is not None:
                shadow.remove(popped)
            last_popped = popped
        elif op == "requeue" and last_popped is not None:
            scheduler.requeue(last_popped, now)
            shadow.append(last_popped)
            last_popped = None
        elif op == "cancel" and submitted:
            call = submitted[arg % len(submitted)]
            assert scheduler.cancel(call, now) is (call in shadow)
            if call in shadow:
                shadow.remove(call)
        elif op == "drop":
            dropped = scheduler.drop_expired(now)
            expired = [c for c in shadow if c.facts.deadline_s <= now]
            assert sorted(c.seq for c in dropped) == sorted(c.seq for c in expired)
            for call in expired:
                shadow.remove(call)
        elif op == "advance":
            now += arg
        assert scheduler.queued() == len(shadow)
