"""The adaptive window's slow start (docs/scheduling.md, "(b) Admission windows"): it doubles
while the window limits us and the engine's waiting queue is at or below target, up to the
bound, until the first sample shows more waiting; AIMD from then on."""

from __future__ import annotations

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission, AdaptiveWindowConfig
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.factory import build_admission
from agentrt_controller.service import ControllerConfig

pytestmark = pytest.mark.timeout(30)


def _view(in_flight: int, waiting: int, at: float, batch: int | None = None) -> BackendView:
    return BackendView(
        "b0", in_flight=in_flight, num_waiting=waiting, metrics_at_s=at, max_num_seqs=batch
    )


def _full(
    policy: AdaptiveWindowAdmission, waiting: int, at: float, batch: int | None = None
) -> float:
    """One sample with the window full (what limits us); the window after it."""
    policy.has_room(_view(int(policy.window("b0")), waiting, at, batch), at)
    return policy.window("b0")


def test_it_is_on_by_default() -> None:
    assert AdaptiveWindowConfig().slow_start
    assert ControllerConfig().admission.slow_start


def test_the_window_doubles_per_sample_up_to_max_window() -> None:
    """A stock vLLM (no batch size): from 8 to the bound 256 in 5 samples, not 248."""
    policy = AdaptiveWindowAdmission()
    windows = [_full(policy, 0, float(tick)) for tick in range(1, 8)]
    assert windows == [16, 32, 64, 128, 256, 256, 256]


def test_the_doubling_stops_at_the_reported_batch_plus_target() -> None:
    policy = AdaptiveWindowAdmission(AdaptiveWindowConfig(target_waiting=2))
    windows = [_full(policy, 0, float(tick), batch=20) for tick in range(1, 5)]
    assert windows == [16, 22, 22, 22]


def test_it_grows_only_while_the_window_limits_us() -> None:
    policy = AdaptiveWindowAdmission()
    for tick in range(1, 10):
        policy.has_room(_view(7, 0, float(tick)), float(tick))  # 7 < 8: the window is not full
    assert policy.window("b0") == 8
    assert _full(policy, 0, 10.0) == 16  # still in slow start: nothing congested it


def test_waiting_at_target_keeps_doubling_and_the_first_sample_above_ends_it() -> None:
    policy = AdaptiveWindowAdmission(AdaptiveWindowConfig(target_waiting=2))
    assert _full(policy, 2, 1.0) == 16  # at target: not congestion
    assert _full(policy, 0, 2.0) == 32
    assert _full(policy, 10, 3.0) == 24  # 8 over target: shrinks by the excess, as before
    assert [_full(policy, 0, float(tick)) for tick in range(4, 7)] == [25, 26, 27]  # AIMD
    assert _full(policy, 100, 7.0) == 13.5  # flooded: at most halved
    assert _full(policy, 0, 8.0) == 14.5  # no second ramp after a congestion


def test_slow_start_is_per_backend() -> None:
    policy = AdaptiveWindowAdmission()
    policy.has_room(_view(8, 5, 1.0), 1.0)  # b0 congested at its first sample
    other = BackendView("b1", in_flight=8, num_waiting=0, metrics_at_s=1.0)
    policy.has_room(other, 1.0)
    assert policy.window("b0") == 5 and policy.window("b1") == 16


def test_off_is_the_additive_increase() -> None:
    policy = AdaptiveWindowAdmission(AdaptiveWindowConfig(slow_start=False))
    assert [_full(policy, 0, float(tick)) for tick in range(1, 4)] == [9, 10, 11]


def test_an_initial_window_equal_to_the_bound_never_grows() -> None:
    """What tests/real_vllm's adaptive-window test runs: initial = max = 8 makes the ramp moot."""
    config = AdaptiveWindowConfig(initial_window=8, max_window=8, target_waiting=0)
    policy = AdaptiveWindowAdmission(config)
    assert [_full(policy, 0, float(tick)) for tick in range(1, 4)] == [8, 8, 8]
    assert _full(policy, 3, 4.0) == 5


def test_it_converges_on_a_model_engine_like_aimd() -> None:
    """An engine that runs 40 at once and queues the rest: one overshoot (8, 16, 32, 64), then
    the window settles near 40 + target as with the additive ramp — which needs 32 samples
    to first reach 40."""
    target = 2
    policy = AdaptiveWindowAdmission(AdaptiveWindowConfig(target_waiting=target))
    windows = []
    for tick in range(100):
        in_flight = int(policy.window("b0"))
        policy.has_room(_view(in_flight, max(0, in_flight - 40), float(tick)), float(tick))
        windows.append(policy.window("b0"))
    assert windows[:4] == [16, 32, 64, 42]  # 64 - (24 - 2)
    assert min(windows[3:]) >= 40
    assert max(windows[3:]) <= 40 + target + 1


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_slow_start_must_be_a_flag(value: object) -> None:
    with pytest.raises(ConfigError, match=r"admission\.slow_start"):
        build_admission("adaptive", {"slow_start": value})


def test_slow_start_from_a_table() -> None:
    policy = build_admission("adaptive", {"slow_start": False})
    assert isinstance(policy, AdaptiveWindowAdmission) and not policy.config.slow_start
    config = ControllerConfig(admission={"slow_start": False})
    assert not config.admission.slow_start
