"""The pure retention driver: pin vs re-warm vs window from the backend's traits, re-warm timing,
release points and their reasons (no clock, no I/O: every step takes ``now_s``)."""

from __future__ import annotations

import math

import pytest

from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention import RetentionDecision, WaitInfo
from agentrt_controller.retention.driver import (
    BackendTraits,
    ReleaseReason,
    RetentionDriver,
    ThreadContext,
    ToolWait,
)
from agentrt_controller.retention.tracker import Retention, pin_id_for

pytestmark = pytest.mark.timeout(10)

KEY = ProgramKey(session_id="s", program_id="p")
PIN = pin_id_for(KEY, "main")


class Fixed:
    """Retain every wait for ``ttl_s``, holding the KV when ``pin``."""

    name = "fixed"

    def __init__(self, ttl_s: float, pin: bool = True) -> None:
        self.decision = RetentionDecision(ttl_s=ttl_s, pin=pin, reason="pin" if pin else "retain")
        self.arrived: list[tuple[str, float]] = []
        self.told: list[WaitInfo] = []

    def on_wait_start(self, facts: WaitInfo, now_s: float) -> RetentionDecision:
        self.told.append(facts)
        return self.decision

    def on_wait_end(
        self, program: ProgramKey, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        return None

    def on_call_arrived(self, program: ProgramKey, thread_id: str, now_s: float) -> None:
        self.arrived.append((thread_id, now_s))

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        return None


class Harness:
    def __init__(self, traits: BackendTraits | None, policy: Fixed) -> None:
        self.traits = traits
        self.windows: list[tuple[str, float | None]] = []
        self.releases: list[tuple[ReleaseReason, float]] = []
        self.driver = RetentionDriver(
            policy,
            lambda backend_id: self.traits if backend_id == "b0" else None,
            lambda key, until: self.windows.append((key.program_id, until)),
            rewarm_lead_s=0.5,
            rewarm_max_in_flight=4,
        )
        self.driver.on_release = self._released

    def _released(self, retention: Retention, reason: ReleaseReason, at_s: float) -> None:
        self.releases.append((reason, at_s))

    def wait(self, now_s: float, predicted_s: float | None = None) -> list[tuple[str, str]]:
        self.driver.on_finish(KEY, "main", ThreadContext("b0", 500, payload={"messages": []}))
        wait = ToolWait(KEY, "main", "t", "tool", "search", predicted_s)
        actions = self.driver.on_tool_start(wait, now_s)
        return [(a.kind, a.pin_id) for a in actions]


PINS = BackendTraits(pins=True)
REWARM = BackendTraits(rewarm=True)
PLAIN = BackendTraits()


@pytest.mark.parametrize(
    ("traits", "pin", "expected"),
    [
        (PINS, True, [("pin", PIN)]),  # a native pin
        (REWARM, True, []),  # a re-warm later, from tick()
        (PLAIN, True, []),  # the window only
        (PINS, False, []),  # the decision holds no KV: the window only
    ],
)
def test_the_backend_traits_choose_pin_rewarm_or_window(
    traits: BackendTraits, pin: bool, expected: list[tuple[str, str]]
) -> None:
    harness = Harness(traits, Fixed(10.0, pin))
    assert harness.wait(1.0, predicted_s=3.0) == expected
    assert harness.windows == [("p", 11.0)]
    retention = harness.driver.tracker.get(KEY, "main")
    assert retention is not None
    assert retention.rewarm_at_s == (3.5 if traits is REWARM and pin else math.inf)


def test_a_rewarm_comes_lead_before_the_predicted_return_and_only_with_room() -> None:
    harness = Harness(REWARM, Fixed(10.0))
    harness.wait(1.0, predicted_s=3.0)
    assert harness.driver.next_wake_s == 3.5  # 1 + 3 - 0.5
    assert harness.driver.tick(3.4) == []
    assert [(a.kind, a.backend_id) for a in harness.driver.tick(3.5)] == [("rewarm", "b0")]
    assert harness.driver.tick(3.6) == []  # once

    busy = Harness(BackendTraits(rewarm=True, in_flight=4), Fixed(10.0))
    busy.wait(1.0, predicted_s=3.0)
    assert busy.driver.tick(3.5) == []  # no room: skipped, not retried
    full = Harness(BackendTraits(rewarm=True, kv_cache_usage=0.95), Fixed(10.0))
    full.wait(1.0, predicted_s=3.0)
    assert full.driver.tick(3.5) == []


def test_released_at_the_next_admission_not_at_the_call() -> None:
    harness = Harness(PINS, Fixed(10.0))
    harness.wait(1.0)
    assert harness.driver.on_call(KEY, "main", 2.0) == "b0"  # tagged, still held
    assert harness.driver.on_call(KEY, "other", 2.0) is None
    actions = harness.driver.on_admitted(KEY, "main", 2.5)
    assert [(a.kind, a.pin_id, a.reason) for a in actions] == [("unpin", PIN, "admitted")]
    assert harness.releases == [("admitted", 2.5)]
    assert harness.windows[-1] == ("p", None)
    assert harness.driver.on_admitted(KEY, "main", 3.0) == []  # nothing left


def test_a_new_wait_replaces_and_the_ttl_ends_without_a_backend_call() -> None:
    harness = Harness(PINS, Fixed(2.0))
    harness.wait(1.0)
    assert harness.wait(1.5) == [("unpin", PIN), ("pin", PIN)]
    assert harness.releases == [("replaced", 1.5)]
    assert harness.driver.tick(3.5) == []  # the backend expires its pin itself
    assert harness.releases[-1] == ("ttl", 3.5)
    assert harness.windows[-1] == ("p", None)
    assert harness.driver.on_call(KEY, "main", 4.0) is None  # came back too late


def test_a_program_end_releases_everything_and_refuses_late_waits() -> None:
    harness = Harness(PINS, Fixed(10.0))
    harness.wait(1.0)
    actions = harness.driver.on_program_end(KEY, 2.0)
    assert [(a.kind, a.reason) for a in actions] == [("unpin", "program_end")]
    assert harness.windows[-1] == ("p", None)
    assert harness.wait(3.0) == []  # a late tool event retains nothing
    assert len(harness.driver) == 0
    harness.driver.on_program_start(KEY)  # the id starts anew
    assert harness.wait(4.0) == [("pin", PIN)]


def test_the_policy_is_told_no_backend_when_it_is_unhealthy_or_unknown() -> None:
    healthy = Fixed(10.0)
    Harness(BackendTraits(kv_cache_usage=0.3, kv_capacity_tokens=1000), healthy).wait(1.0)
    (facts,) = healthy.told
    assert (facts.backend_id, facts.context_tokens, facts.kv_cache_usage) == ("b0", 500, 0.3)
    unhealthy = Fixed(10.0)
    Harness(BackendTraits(healthy=False), unhealthy).wait(1.0)
    assert unhealthy.told[0].backend_id is None  # a policy answers no_backend to this
    unknown = Harness(None, Fixed(10.0))
    assert unknown.wait(1.0) == [] and unknown.windows == []  # nothing to hold it on


def test_a_program_end_tells_the_scheduler_only_of_a_window_it_held() -> None:
    harness = Harness(PINS, Fixed(ttl_s=10.0))
    other = ProgramKey(session_id="s", program_id="never-waited")
    harness.driver.on_finish(other, "main", ThreadContext("b0", 300))
    assert harness.driver.on_program_end(other, 1.0) == []
    assert harness.windows == []  # it never held one: nothing to end
    harness.wait(2.0)
    harness.driver.on_program_end(KEY, 3.0)
    assert harness.windows == [("p", 12.0), ("p", None)]
    harness.driver.on_program_end(KEY, 4.0)  # ended already: its window was ended once
    assert harness.windows == [("p", 12.0), ("p", None)]
