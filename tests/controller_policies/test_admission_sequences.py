"""The Dispatcher counts sequences, not calls (docs/controller.md, "Sequences, not calls").

Table-driven over fixed and adaptive windows: a call adds its ``CallFacts.sequences`` to a
backend's in-flight figure, is admitted where they all fit or where the backend is idle, and
otherwise keeps its place at the head of the queues.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission, AdaptiveWindowConfig
from agentrt_controller.scheduling.api import AdmissionPolicy, BackendView
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import build_scheduler
from tests.controller_policies.helpers import make_facts

pytestmark = pytest.mark.timeout(30)


def _fixed() -> AdmissionPolicy:
    return FixedWindowAdmission(8)


def _adaptive() -> AdmissionPolicy:
    return AdaptiveWindowAdmission(AdaptiveWindowConfig(initial_window=8, max_window=8))


POLICIES = [pytest.param(_fixed, id="fixed-8"), pytest.param(_adaptive, id="adaptive-8")]


def _admitted(policy: AdmissionPolicy, in_flight: int, sizes: list[int]) -> list[int]:
    """The sizes (sequences) of the calls admitted in one round, FCFS, to one backend with
    ``in_flight`` sequences already."""
    dispatcher = Dispatcher(build_scheduler("fcfs"), RoundRobinRouter(), policy)
    for index, size in enumerate(sizes):
        dispatcher.submit(make_facts(f"p{index}", float(index), sequences=size), float(index))
    admissions = dispatcher.admit(10.0, [BackendView("b0", in_flight=in_flight)])
    return [a.call.facts.sequences for a in admissions]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(
    ("in_flight", "sizes", "admitted"),
    [
        (0, [1] * 10, [1] * 8),  # one sequence per call: the window of calls as before
        (0, [8, 1], [8]),  # one call of 8 fills the window; the next waits
        (0, [4, 4, 1], [4, 4]),
        (3, [5, 1], [5]),  # 3 + 5 = 8 fits exactly
        (4, [5, 1], []),  # 4 + 5 > 8: it waits at the head, the 1 does not overtake it
        (0, [12, 1], [12]),  # larger than the window alone: runs on the idle backend
        (1, [12, 1], []),  # ... but only on an idle one
    ],
)
def test_a_call_holds_its_sequences_of_the_window(
    policy: Callable[[], AdmissionPolicy], in_flight: int, sizes: list[int], admitted: list[int]
) -> None:
    assert _admitted(policy(), in_flight, sizes) == admitted


def test_a_held_call_keeps_its_place_and_goes_first_once_there_is_room() -> None:
    dispatcher = Dispatcher(build_scheduler("fcfs"), RoundRobinRouter(), FixedWindowAdmission(8))
    big = make_facts("big", 0.0, sequences=6)
    small = make_facts("small", 1.0)
    dispatcher.submit(big, 0.0)
    dispatcher.submit(small, 1.0)
    assert dispatcher.admit(2.0, [BackendView("b0", in_flight=4)]) == []
    assert dispatcher.queued() == 2
    order = [a.call.facts.call_id for a in dispatcher.admit(3.0, [BackendView("b0", 2)])]
    assert order == [big.call_id]  # 2 + 6 = 8: the window is full again
    order = [a.call.facts.call_id for a in dispatcher.admit(4.0, [BackendView("b0", 0)])]
    assert order == [small.call_id]


def test_the_adaptive_window_grows_from_a_lone_large_call_the_engine_held() -> None:
    config = AdaptiveWindowConfig(initial_window=8, target_waiting=2, slow_start=False)
    policy = AdaptiveWindowAdmission(config)
    # A call of 12 sequences ran alone on the idle backend; the engine queues none of them.
    assert policy.has_room(BackendView("b0", 12, num_waiting=0, metrics_at_s=1.0), 1.0)
    assert policy.window("b0") == 13  # from the load held, not 8 + 1: a call of 1 fits now
    # The engine queues more than target_waiting: it shrinks as before.
    policy.has_room(BackendView("b0", 13, num_waiting=5, metrics_at_s=2.0), 2.0)
    assert policy.window("b0") == 10
    # With slow start it doubles from there (the load held, 12), to the bound 256.
    policy = AdaptiveWindowAdmission(AdaptiveWindowConfig(initial_window=8, target_waiting=2))
    assert policy.has_room(BackendView("b0", 12, num_waiting=0, metrics_at_s=1.0), 1.0)
    assert policy.window("b0") == 24
