"""Live retentions: TTL expiry, release at the next call and at program end, re-warm times,
and the memory contract — a TTL never holds memory for a program that has ended."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention import RetentionTracker
from agentrt_controller.retention.tracker import pin_id_for

pytestmark = pytest.mark.timeout(60)

#: A program of the default session.
K = ProgramKey.untagged


def _start(tracker: RetentionTracker, program: str, thread: str = "main", **kw: object):  # type: ignore[no-untyped-def]
    values: dict[str, object] = {
        "backend_id": "b0",
        "ttl_s": 5.0,
        "now_s": 0.0,
        "context_tokens": 100,
    }
    values.update(kw)
    return tracker.start(K(program), thread, **values)  # type: ignore[arg-type]


def test_ttl_expiry_releases_once() -> None:
    tracker = RetentionTracker()
    new, replaced = _start(tracker, "p", ttl_s=5.0, now_s=1.0)
    assert new is not None and replaced is None
    assert new.pin_id == pin_id_for(K("p"), "main") and new.until_s == 6.0
    assert new.pin_id.startswith("agentrt-") and pin_id_for(K("p"), "t1") != new.pin_id
    assert tracker.retained_until(K("p")) == 6.0 and tracker.next_expiry_s == 6.0
    assert tracker.expire(5.9) == []
    assert tracker.expire(6.0) == [new]
    assert tracker.expire(7.0) == [] and len(tracker) == 0
    assert tracker.next_expiry_s == math.inf and tracker.retained_until(K("p")) is None


def test_the_next_call_releases_and_a_new_wait_replaces() -> None:
    tracker = RetentionTracker()
    first, _ = _start(tracker, "p")
    second, replaced = _start(tracker, "p", now_s=1.0, ttl_s=2.0)
    assert replaced is first  # the driver unpins the old one
    assert tracker.release_thread(K("p"), "main") is second
    assert tracker.release_thread(K("p"), "main") is None
    assert tracker.expire(100.0) == []  # stale heap entries are skipped
    none, _ = _start(tracker, "p", ttl_s=0.0)
    assert none is None and len(tracker) == 0


def test_program_end_releases_every_thread_and_refuses_late_starts() -> None:
    tracker = RetentionTracker(remember_ended=2)
    _start(tracker, "p", "a")
    _start(tracker, "p", "b", ttl_s=9.0)
    _start(tracker, "q")
    assert tracker.retained_until(K("p")) == 9.0
    assert sorted(r.thread_id for r in tracker.release_program(K("p"))) == [
        "a",
        "b",
    ]
    late, _ = _start(tracker, "p", "a", now_s=1.0)  # a tool event after the end
    assert late is None and tracker.retained_until(K("p")) is None
    tracker.forget_ended(K("p"))  # the id starts a new run
    again, _ = _start(tracker, "p", "a", now_s=2.0)
    assert again is not None
    tracker.release_program(K("x"))
    tracker.release_program(K("y"))
    tracker.release_program(K("z"))  # only the last two ended ids are remembered
    assert _start(tracker, "x")[0] is not None
    assert _start(tracker, "z")[0] is None


def test_rewarm_is_due_once_shortly_before_the_predicted_return() -> None:
    tracker = RetentionTracker(rewarm_lead_s=0.5)
    r, _ = _start(tracker, "p", ttl_s=10.0, now_s=0.0, predicted_return_s=3.0)
    assert r is not None and r.rewarm_at_s == 2.5
    assert tracker.due_rewarms(2.4) == []
    assert tracker.due_rewarms(2.5) == [r] and r.rewarmed
    assert tracker.due_rewarms(3.0) == []
    late, _ = _start(tracker, "q", ttl_s=2.0, predicted_return_s=3.0)  # beyond the TTL
    assert late is not None and late.rewarm_at_s == math.inf
    with pytest.raises(ConfigError):
        RetentionTracker(rewarm_lead_s=-1)


_event = st.tuples(
    st.sampled_from(["start", "call", "end", "tick"]),
    st.sampled_from(["p0", "p1", "p2"]),
    st.sampled_from(["main", "t1"]),
    st.floats(0.0, 20.0),
)


@settings(max_examples=200, deadline=None)
@given(events=st.lists(_event, max_size=60))
def test_memory_contract_under_any_event_order(
    events: list[tuple[str, str, str, float]],
) -> None:
    """Replaying pins on a fake backend: after a program ends nothing of it is pinned, and
    nothing stays pinned past its TTL once the driver expires."""
    tracker = RetentionTracker()
    pinned: dict[str, float] = {}  # pin id -> until
    ended: set[str] = set()
    now = 0.0
    for kind, program, thread, step in events:
        now += step / 10
        for gone in tracker.expire(now):
            pinned.pop(gone.pin_id)
        if kind == "start":
            new, old = _start(tracker, program, thread, ttl_s=step, now_s=now)
            if old is not None:
                pinned.pop(old.pin_id)
            if new is not None:
                assert program not in ended
                pinned[new.pin_id] = new.until_s
        elif kind == "call":
            released = tracker.release_thread(K(program), thread)
            if released is not None:
                pinned.pop(released.pin_id)
        elif kind == "end":
            for released in tracker.release_program(K(program)):
                pinned.pop(released.pin_id)
            ended.add(program)
        owners = {pin_id_for(K(p), t): p for p in ("p0", "p1", "p2") for t in ("main", "t1")}
        assert all(owners[pin] not in ended for pin in pinned)
        assert all(until > now for until in pinned.values())
        assert len(pinned) == len(tracker)
