"""The driver's view of what each backend holds pinned (``RetentionDriver.pinned``): what an
admission policy must not evict, with when each thread is expected back."""

from __future__ import annotations

import pytest

from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention import PinnedContext, RetentionDecision, WaitInfo
from agentrt_controller.retention.driver import (
    BackendTraits,
    RetentionDriver,
    ThreadContext,
    ToolWait,
)

pytestmark = pytest.mark.timeout(10)

A = ProgramKey(session_id="s", program_id="a")
B = ProgramKey(session_id="s", program_id="b")


class Fixed:
    """Retain every wait for ``ttl_s``; pin when ``pin``; expected back after ``back_s``."""

    name = "fixed"

    def __init__(self, ttl_s: float, *, pin: bool = True, back_s: float | None = None) -> None:
        self.decision = RetentionDecision(
            ttl_s=ttl_s, pin=pin, reason="pin" if pin else "retain", expected_return_s=back_s
        )

    def on_wait_start(self, facts: WaitInfo, now_s: float) -> RetentionDecision:
        return self.decision

    def on_wait_end(
        self, program: ProgramKey, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        return None

    def on_call_arrived(self, program: ProgramKey, thread_id: str, now_s: float) -> None:
        return None

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        return None


def driver_for(policy: Fixed, traits: BackendTraits) -> RetentionDriver:
    return RetentionDriver(
        policy, lambda backend_id: traits if backend_id in {"b0", "b1"} else None, lambda *_: None
    )


def wait(
    driver: RetentionDriver,
    key: ProgramKey,
    now_s: float,
    *,
    backend: str = "b0",
    tokens: int = 1000,
    predicted_s: float | None = None,
) -> None:
    driver.on_finish(key, "main", ThreadContext(backend, tokens, payload=[1, 2, 3]))
    driver.on_tool_start(ToolWait(key, "main", "t", "tool", "test", predicted_s), now_s)


def test_pinned_lists_native_pins_per_backend_oldest_first_with_their_due_time() -> None:
    driver = driver_for(Fixed(30.0, back_s=4.0), BackendTraits(pins=True))
    wait(driver, A, 1.0, tokens=80_000)
    wait(driver, B, 2.0, tokens=5_000, backend="b1")
    assert driver.pinned("b0") == [PinnedContext(A, 80_000, 5.0, 31.0, "main", 1.0)]
    ((program, tokens, due_s, *_),) = driver.pinned("b1")
    assert (program, tokens, due_s) == (B, 5_000, 6.0)
    assert driver.pinned_tokens("b0") == 80_000 and driver.pinned("b9") == []


@pytest.mark.parametrize(
    ("back_s", "predicted_s", "due_s"),
    [
        (4.0, 9.0, 5.0),  # the policy's expectation first
        (None, 9.0, 10.0),  # else the client's prediction
        (None, None, 31.0),  # else the TTL's end
        (None, 99.0, 31.0),  # never after the TTL's end
    ],
)
def test_the_due_time_falls_back_to_the_prediction_then_the_ttl(
    back_s: float | None, predicted_s: float | None, due_s: float
) -> None:
    driver = driver_for(Fixed(30.0, back_s=back_s), BackendTraits(pins=True))
    wait(driver, A, 1.0, predicted_s=predicted_s)
    assert [p.due_s for p in driver.pinned("b0")] == [due_s]


def test_only_native_pins_count() -> None:
    window_only = driver_for(Fixed(30.0, pin=False), BackendTraits(pins=True))
    wait(window_only, A, 1.0)
    rewarmed = driver_for(Fixed(30.0), BackendTraits(rewarm=True))
    wait(rewarmed, A, 1.0, predicted_s=3.0)
    assert window_only.pinned("b0") == [] and rewarmed.pinned("b0") == []
    assert len(window_only) == len(rewarmed) == 1  # retained, but nothing held


@pytest.mark.parametrize("how", ["admitted", "replaced", "program_end", "ttl"])
def test_every_release_point_takes_the_pin_off_the_view(how: str) -> None:
    driver = driver_for(Fixed(30.0), BackendTraits(pins=True))
    wait(driver, A, 1.0)
    wait(driver, B, 1.5)
    if how == "admitted":
        driver.on_admitted(A, "main", 2.0)
    elif how == "replaced":
        wait(driver, A, 2.0)  # a new pin of the same thread: listed once, newest last
        assert [(p.program, p.pinned_s) for p in driver.pinned("b0")] == [(B, 1.5), (A, 2.0)]
        return
    elif how == "program_end":
        driver.on_program_end(A, 2.0)
    else:
        driver.tick(31.0)  # A's TTL is over (B's ends at 31.5)
    assert [p.program for p in driver.pinned("b0")] == [B]
    driver.on_program_end(B, 40.0)
    assert driver.pinned("b0") == [] and driver.pinned_tokens("b0") == 0


def test_the_ttl_policy_says_when_a_pinned_program_is_expected_back() -> None:
    from agentrt_controller.retention.durations import DurationModel

    model = DurationModel([1.0, 2.0, 3.0, 100.0])
    assert model.expected_within(3.5) == pytest.approx(2.0)  # mean of those within 3.5 s
    assert model.expected_within(0.5) == 0.5  # none within: the bound itself
    exponential = DurationModel(mean_s=2.0)
    assert 0 < exponential.expected_within(10.0) < 2.0
