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


# --- the deadlock guard -----------------------------------------------------------------------


def test_the_guard_unpins_the_most_recent_pins_until_the_waiting_call_fits() -> None:
    traits = BackendTraits(pins=True, kv_capacity_tokens=100_000, kv_cache_usage=0.5)
    driver = driver_for(Fixed(30.0), traits)
    released: list[tuple[str, str]] = []
    driver.on_release = lambda r, reason, at: released.append((r.program.program_id, reason))
    c = ProgramKey(session_id="s", program_id="c")
    for key, at in ((A, 1.0), (B, 2.0), (c, 3.0)):
        wait(driver, key, at, tokens=20_000)
    actions = driver.relieve("b0", 4.0, need_tokens=30_000)  # two pins, newest first
    assert [(a.kind, a.retention.program, a.reason) for a in actions] == [
        ("unpin", c, "guard"),
        ("unpin", B, "guard"),
    ]
    assert [p.program for p in driver.pinned("b0")] == [A]
    assert released == [("c", "guard"), ("b", "guard")]
    assert driver.on_call(B, "main", 4.5) is None  # its window ended with the pin
    assert driver.guard_releases == 2
    assert [a.retention.program for a in driver.relieve("b0", 5.0)] == [A]  # need unknown: one
    assert driver.relieve("b0", 5.0) == [] and len(driver) == 0


@pytest.mark.parametrize(
    ("gauges", "guarded"),
    [
        ({"num_waiting": 2, "num_running": 0, "kv_cache_usage": 0.95}, True),  # all held
        ({"num_waiting": 2, "num_running": 0, "kv_cache_usage": 0.3}, False),  # just handed in
        ({"num_waiting": 0, "num_running": 0, "kv_cache_usage": 0.95}, False),  # nobody waits
        ({"num_waiting": 1, "kv_cache_usage": 0.9, "waiting_need_tokens": 15_000}, True),
        ({"num_waiting": 1, "kv_cache_usage": 0.9, "waiting_need_tokens": 5_000}, False),
        ({"num_waiting": 3, "kv_cache_usage": None, "num_running": 0}, False),  # unknown
    ],
)
def test_tick_guards_a_backend_whose_waiting_calls_cannot_start(
    gauges: dict[str, object], guarded: bool
) -> None:
    scrape = {"b0": BackendTraits(pins=True, kv_capacity_tokens=100_000)}
    driver = RetentionDriver(Fixed(30.0), scrape.get, lambda *_: None)
    wait(driver, A, 1.0, tokens=20_000)
    # the gauges of the next scrape
    scrape["b0"] = BackendTraits(pins=True, kv_capacity_tokens=100_000, **gauges)  # type: ignore[arg-type]
    actions = driver.tick(2.0)
    assert [(a.kind, a.reason) for a in actions] == ([("unpin", "guard")] if guarded else [])


def test_a_pin_of_a_program_that_died_ends_at_its_ttl_and_nothing_is_left() -> None:
    """A program that never sends its end (its client died): the TTL releases the pin and the
    window, the driver forgets it; only its context (bounded per tenant) stays until its end."""
    driver = driver_for(Fixed(30.0), BackendTraits(pins=True))
    wait(driver, A, 1.0)
    assert driver.tick(30.9) == [] and len(driver.pinned("b0")) == 1
    assert driver.tick(31.0) == []  # the backend expires its own pin: no unpin call
    assert driver.pinned("b0") == [] and len(driver) == 0 and driver.next_wake_s == float("inf")


def test_the_policy_is_told_the_tier_the_queue_and_what_is_pinned_already() -> None:
    told: list[WaitInfo] = []

    class Telling(Fixed):
        def on_wait_start(self, facts: WaitInfo, now_s: float) -> RetentionDecision:
            told.append(facts)
            return self.decision

    traits = BackendTraits(
        pins=True,
        kv_capacity_tokens=470_000,
        reload_s_per_token=5e-6,
        cpu_kv_capacity_tokens=500_000,
        queue_wait_s=12.0,
    )
    driver = driver_for(Telling(30.0), traits)
    wait(driver, A, 1.0, tokens=80_000)
    wait(driver, B, 2.0, tokens=70_000)
    first, second = told
    assert (second.reload_s_per_token, second.cpu_kv_capacity_tokens) == (5e-6, 500_000)  # type: ignore[attr-defined]
    assert second.queue_wait_s == 12.0  # type: ignore[attr-defined]
    assert (first.pinned_tokens, second.pinned_tokens) == (0, 80_000)  # type: ignore[attr-defined]


def test_a_pin_holds_on_after_the_return_until_the_call_is_admitted() -> None:
    """Back within the TTL, the call may wait in the queues: the pin is extended by the
    decision's ``hold_after_return_s`` (a ``pin`` with the later end) and the admission
    releases it; the extended end replaces the first one in the expiry order."""

    class Holding(Fixed):
        def __init__(self) -> None:
            super().__init__(10.0)
            self.decision = RetentionDecision(
                ttl_s=10.0, pin=True, reason="pin", hold_after_return_s=30.0
            )

    driver = driver_for(Holding(), BackendTraits(pins=True))
    wait(driver, A, 1.0)
    backend, actions = driver.on_return(A, "main", 9.0)
    assert backend == "b0"
    assert [(a.kind, a.retention.until_s) for a in actions] == [("pin", 39.0)]
    assert driver.tick(11.0) == [] and driver.pinned("b0")[0].until_s == 39.0  # not at 11 s
    assert driver.next_wake_s == 39.0
    assert [(a.kind, a.reason) for a in driver.on_admitted(A, "main", 20.0)] == [
        ("unpin", "admitted")
    ]
    assert driver.pinned("b0") == [] and len(driver) == 0
    # a window-only retention, or a return after the TTL, holds nothing on
    late = driver_for(Holding(), BackendTraits(pins=True))
    wait(late, A, 1.0)
    assert late.on_return(A, "main", 11.5) == (None, [])
    plain = driver_for(Fixed(10.0, pin=False), BackendTraits(pins=True))
    wait(plain, A, 1.0)
    assert plain.on_return(A, "main", 5.0) == ("b0", [])


def test_the_ttl_policy_holds_a_returned_pin_at_most_to_the_break_even_time() -> None:
    from agentrt_controller.retention import RetentionConfig, ToolWaitFacts, TtlRetentionPolicy

    policy = TtlRetentionPolicy(RetentionConfig(kv_capacity_tokens=470_000, queue_weight=0.0))
    for i in range(21):
        policy.durations.record("search", 2.0 + i * 0.2)
    facts = ToolWaitFacts(A, "main", "t", "tool", "search", None, 80_000, "b0", 0.97)
    decision = policy.decide(facts)
    assert decision.pin
    # recompute 1e-4 s * 80 K = 8 s; holding 80 K of 470 K costs 0.17 s per second: 47 s
    assert decision.hold_after_return_s == pytest.approx(8.0 / (80_000 / 470_000))
