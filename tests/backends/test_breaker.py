"""The circuit breaker is a pure policy: outcomes and probes in, state out (no clock)."""

from __future__ import annotations

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.backends.breaker import BreakerConfig, BreakerState, CircuitBreaker

CLOSED, OPEN, HALF = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN


def _run(breaker: CircuitBreaker, events: list[tuple[float, str]]) -> list[BreakerState]:
    """Feed ``(now_s, event)``: ``ok``/``fail`` calls, ``probe+``/``probe-``, ``probe?`` (a
    probe that ran out of time), ``trip``."""
    states = []
    for now, event in events:
        if event == "ok":
            breaker.record_success(now)
        elif event == "fail":
            breaker.record_failure(now)
        elif event == "probe+":
            breaker.record_probe(True, now)
        elif event == "probe-":
            breaker.record_probe(False, now)
        elif event == "probe?":
            breaker.record_probe(False, now, "health probe timed out", timed_out=True)
        elif event == "trip":
            breaker.trip(now, "refused")
        states.append(breaker.state)
    return states


@pytest.mark.parametrize(
    ("config", "events", "expected"),
    [
        # N consecutive call failures open; a success in between resets the run.
        (BreakerConfig(failure_threshold=3, min_calls=10),
         [(0, "fail"), (1, "fail"), (2, "ok"), (3, "fail"), (4, "fail"), (5, "fail")],
         [CLOSED, CLOSED, CLOSED, CLOSED, CLOSED, OPEN]),
        # Error rate over the window: 2 failures out of 4 calls with rate 0.5, min_calls 4.
        (BreakerConfig(failure_threshold=9, error_rate=0.5, window=4, min_calls=4),
         [(0, "fail"), (1, "ok"), (2, "ok"), (3, "fail")],
         [CLOSED, CLOSED, CLOSED, OPEN]),
        # Below min_calls the rate is not judged.
        (BreakerConfig(failure_threshold=9, error_rate=0.5, window=4, min_calls=4),
         [(0, "fail"), (1, "ok"), (2, "fail")],
         [CLOSED, CLOSED, CLOSED]),
        # A failed health probe or a refused connection opens at once.
        (BreakerConfig(), [(0, "probe-")], [OPEN]),
        (BreakerConfig(), [(0, "trip")], [OPEN]),
        # A probe that only ran out of time opens after probe_timeouts of them in a row; an
        # answered probe in between resets the run.
        (BreakerConfig(probe_timeouts=3),
         [(0, "probe?"), (1, "probe?"), (2, "probe+"), (3, "probe?"), (4, "probe?"), (5, "probe?")],
         [CLOSED, CLOSED, CLOSED, CLOSED, CLOSED, OPEN]),
        (BreakerConfig(probe_timeouts=1), [(0, "probe?")], [OPEN]),
        # A call completed between timed-out probes: the backend is busy, not hung — the run
        # starts again; with no call between them the third opens.
        (BreakerConfig(probe_timeouts=3),
         [(0, "probe?"), (1, "probe?"), (1.5, "ok"), (2, "probe?"), (3, "probe?"), (4, "probe?")],
         [CLOSED, CLOSED, CLOSED, CLOSED, CLOSED, OPEN]),
        # A failed call does not end the run.
        (BreakerConfig(probe_timeouts=3, failure_threshold=9, min_calls=10),
         [(0, "probe?"), (1, "probe?"), (1.5, "fail"), (2, "probe?")],
         [CLOSED, CLOSED, CLOSED, OPEN]),
        # Half-open: a trial that times out fails like any other.
        (BreakerConfig(cooldown_s=1, success_threshold=2),
         [(0, "trip"), (1, "probe+"), (1.5, "probe?")],
         [OPEN, HALF, OPEN]),
        # Open: probes inside the cool-down are ignored; after it, a good probe closes.
        (BreakerConfig(cooldown_s=5),
         [(0, "trip"), (2, "probe+"), (4.9, "probe+"), (5, "probe+")],
         [OPEN, OPEN, OPEN, CLOSED]),
        # Two successes needed: the first trial leaves it half-open.
        (BreakerConfig(cooldown_s=1, success_threshold=2),
         [(0, "trip"), (1, "probe+"), (2, "probe+")],
         [OPEN, HALF, CLOSED]),
        # A failed trial re-opens with a longer cool-down (backoff 2: 1 s -> 2 s).
        (BreakerConfig(cooldown_s=1, backoff=2, success_threshold=2),
         [(0, "trip"), (1, "probe+"), (1.5, "probe-"), (3, "probe+"), (3.5, "probe+"),
          (3.6, "probe+")],
         [OPEN, HALF, OPEN, OPEN, HALF, CLOSED]),
        # Calls finishing while open (admitted before it opened) change nothing.
        (BreakerConfig(cooldown_s=1), [(0, "trip"), (0.5, "ok"), (0.6, "fail"), (1, "probe+")],
         [OPEN, OPEN, OPEN, CLOSED]),
    ],
)  # fmt: skip
def test_breaker_transitions(
    config: BreakerConfig, events: list[tuple[float, str]], expected: list[BreakerState]
) -> None:
    assert _run(CircuitBreaker(config), events) == expected


def test_only_a_closed_circuit_takes_calls_and_closing_resets_the_counters() -> None:
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=2, cooldown_s=1, min_calls=10))
    breaker.record_failure(0)
    assert breaker.allows_calls()
    breaker.record_failure(0)
    assert not breaker.allows_calls() and breaker.retry_at_s() == 1
    assert breaker.snapshot(0.25)["trial_in_s"] == 0.75
    breaker.record_probe(True, 1.0)
    assert breaker.allows_calls() and breaker.error_fraction() == 0.0
    breaker.record_failure(2)  # one failure after closing does not re-open (run was reset)
    assert breaker.allows_calls()
    assert breaker.opened_total == 1


def test_cooldown_backoff_is_capped() -> None:
    breaker = CircuitBreaker(BreakerConfig(cooldown_s=1, backoff=10, max_cooldown_s=3))
    breaker.trip(0, "down")
    breaker.record_probe(False, 1)
    assert breaker.cooldown_s == 3
    breaker.record_probe(False, 4)
    assert breaker.cooldown_s == 3
    breaker.record_probe(True, 7)
    assert breaker.allows_calls() and breaker.cooldown_s == 1


@pytest.mark.parametrize(
    "options",
    [
        {"failure_threshold": 0},
        {"error_rate": 0},
        {"error_rate": 1.5},
        {"window": 5, "min_calls": 6},
        {"cooldown_s": -1},
        {"cooldown_s": 10, "max_cooldown_s": 5},
        {"backoff": 0.5},
        {"colldown_s": 1},
        {"window": 2.5},
        {"window": "3"},
        {"error_rate": True},
        {"probe_timeouts": 0},
    ],
)
def test_bad_breaker_options_are_config_errors(options: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        BreakerConfig.from_mapping(options)


def test_breaker_options_from_a_table() -> None:
    config = BreakerConfig.from_mapping(
        {"failure_threshold": 2, "cooldown_s": 0.5, "window": 8.0, "min_calls": 4}
    )
    assert (config.failure_threshold, config.cooldown_s, config.window) == (2, 0.5, 8)
