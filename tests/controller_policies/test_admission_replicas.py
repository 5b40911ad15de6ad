"""Adaptive admission with other clients on the backend: ``count_other_load`` (several controller
replicas sharing one engine; docs/simulator.md, "Controller replicas")."""

from __future__ import annotations

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission, AdaptiveWindowConfig
from agentrt_controller.scheduling.api import BackendView

pytestmark = pytest.mark.timeout(60)

BATCH = 8
TARGET = 2


def _view(in_flight: int, running: int, waiting: int, at: float) -> BackendView:
    return BackendView(
        "b0",
        in_flight=in_flight,
        num_running=running,
        num_waiting=waiting,
        metrics_at_s=at,
        max_num_seqs=BATCH,
    )


def _policy(
    count_other_load: bool, initial_window: float = 8.0, slow_start: bool = False
) -> AdaptiveWindowAdmission:
    """AIMD alone unless ``slow_start`` (its ramp is tests/controller_policies/
    test_admission_slow_start.py's)."""
    return AdaptiveWindowAdmission(
        AdaptiveWindowConfig(
            initial_window=initial_window,
            target_waiting=TARGET,
            count_other_load=count_other_load,
            slow_start=slow_start,
        )
    )


def test_other_clients_requests_count_against_the_window() -> None:
    """The window (8 here) bounds the engine's total load: 5 calls of others leave us 3; 8 or
    more leave us the one call ``min_window`` guarantees. Without the option the window is ours
    alone."""
    counting, blind = _policy(True), _policy(False)
    assert counting.has_room(_view(0, 5, 0, 1.0), 1.0)  # others: 5 + 0 - 0
    assert counting.has_room(_view(2, 5, 0, 1.0), 1.0)  # same sample: 2 + 5 < 8
    assert not counting.has_room(_view(3, 5, 0, 1.0), 1.0)
    assert blind.has_room(_view(7, 5, 0, 1.0), 1.0)
    crowded = _policy(True)
    assert crowded.has_room(_view(0, 8, 2, 1.0), 1.0)  # others hold 10: min_window's one call
    assert not crowded.has_room(_view(1, 8, 2, 1.0), 1.0)


def test_other_load_is_read_once_per_sample() -> None:
    """Calls we admit after a scrape are not yet in its gauges: the others' load measured at a
    sample stays until the next one, instead of shrinking as our in_flight grows."""
    policy = _policy(True)
    assert policy.has_room(_view(0, 5, 0, 1.0), 1.0)  # others: 5
    assert not policy.has_room(_view(3, 5, 0, 1.0), 1.0)  # 3 + 5: full
    assert policy.has_room(_view(3, 6, 0, 2.0), 2.0)  # next sample: others 6 - 3 = 3
    assert policy.has_room(_view(4, 6, 0, 2.0), 2.0)
    assert not policy.has_room(_view(5, 6, 0, 2.0), 2.0)


def test_the_window_grows_when_the_total_load_fills_it() -> None:
    """With others counted, "the window is what limits us" means the total load reaches it:
    the window grows although our own calls are few — once, since 8 < 9 then leaves room."""
    policy = _policy(True)
    for tick in range(1, 20):
        policy.has_room(_view(2, 8, 0, float(tick)), float(tick))  # 2 ours + 6 others = 8
    assert policy.window("b0") == 9
    for tick in range(20, 40):  # the others keep filling what we leave: up to the bound
        total = int(policy.window("b0"))
        policy.has_room(_view(2, min(8, total), max(0, total - 8), float(tick)), float(tick))
    assert policy.window("b0") == 8 + TARGET  # batch 8 + target 2, never more
    blind = _policy(False)
    for tick in range(1, 20):
        blind.has_room(_view(2, 8, 0, float(tick)), float(tick))
    assert blind.window("b0") == 8  # 2 of 8: not what limits


def test_alone_on_the_backend_the_option_changes_nothing() -> None:
    """One controller on a model engine (8 slots, the rest waits): running + waiting equals our
    in_flight, so every decision and window is the same with and without the option."""
    counting, blind = _policy(True, initial_window=1), _policy(False, initial_window=1)
    for tick in range(120):
        now = float(tick)
        decisions = []
        for policy in (counting, blind):
            in_flight = max(0, int(policy.window("b0")) - tick % 3)  # sometimes not full
            running = min(BATCH, in_flight)
            view = _view(in_flight, running, in_flight - running, now)
            decisions.append(policy.has_room(view, now))
        assert decisions[0] == decisions[1]
        assert counting.window("b0") == blind.window("b0")


def _two_replicas_on_one_engine(count_other_load: bool, slow_start: bool = False) -> list[int]:
    """Two replicas fill their windows greedily, taking turns, on an engine of 8 slots; each
    tick one running call of each replica finishes. Returns the engine's load per tick."""
    replicas = [
        _policy(count_other_load, slow_start=slow_start),
        _policy(count_other_load, slow_start=slow_start),
    ]
    in_flight = [0, 0]
    loads = []
    for tick in range(200):
        now = float(tick)
        for me, policy in enumerate(replicas):
            total = sum(in_flight)
            running = min(BATCH, total)
            # The scrape at this instant: the gauges count both replicas' calls.
            view = _view(in_flight[me], running, total - running, now)
            while policy.has_room(view, now):
                in_flight[me] += 1
                view = _view(in_flight[me], running, total - running, now)
        loads.append(sum(in_flight))
        for me in range(2):
            in_flight[me] = max(0, in_flight[me] - 1)
    return loads


def test_two_replicas_counting_each_other_keep_the_engine_at_its_bound() -> None:
    """Counting each other, the replicas' windows add up to the batch plus target_waiting once
    both have seen a sample; each one alone sees the shared waiting queue only after the fact
    and admits up to its own bound, so together they overshoot."""
    counting = _two_replicas_on_one_engine(True)
    blind = _two_replicas_on_one_engine(False)
    assert max(counting[1:]) <= BATCH + TARGET
    assert min(counting[10:]) >= BATCH  # the batch is never starved
    assert max(blind) > BATCH + TARGET
    # With slow start each window jumps to the bound at once; the scrapes here never see more
    # than target_waiting (two calls finish before each), so it never ends, and the staleness of
    # the others' load lets one call more in: the load stays one above the batch + target.
    ramped = _two_replicas_on_one_engine(True, slow_start=True)
    assert max(ramped[1:]) <= BATCH + TARGET + 1
    assert min(ramped[10:]) >= BATCH


def test_count_other_load_comes_from_a_config_table() -> None:
    config = AdaptiveWindowConfig.from_mapping({"count_other_load": True, "target_waiting": 4})
    assert config.count_other_load and config.target_waiting == 4
    with pytest.raises(ConfigError, match="count_other_loads"):
        AdaptiveWindowConfig.from_mapping({"count_other_loads": True})
