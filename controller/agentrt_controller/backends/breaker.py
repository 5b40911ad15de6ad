"""A circuit breaker per backend: a pure policy object (docs/architecture.md, "Design rules",
rule 1).

It never reads a clock, sleeps or does I/O: the controller's backend pool feeds it outcomes with
``now_s`` (seconds on the controller's monotonic clock) and asks whether calls may go to the
backend. States::

             trip / N consecutive call failures /
             error rate over the last W calls ≥ r
    CLOSED ─────────────────────────────────────────▶ OPEN
      ▲                                                 │ cool-down passed, then a health probe
      │ success_threshold probes in a row succeed       ▼
      └─────────────────────────────────────────── HALF_OPEN ──probe fails──▶ OPEN (longer)

* **closed** — calls flow; call outcomes are counted.
* **open** — no calls. After ``cooldown_s`` the next health probe is a trial.
* **half-open** — still no calls; health probes are trials. ``success_threshold`` successes in
  a row close the circuit (counters reset); one failure opens it again with the cool-down
  multiplied by ``backoff`` (at most ``max_cooldown_s``).

Calls are never sent to a half-open backend: the trial is the health probe, so a backend that
comes back is tested with a cheap GET, not with a user's call. ``trip`` opens the circuit at once
— the pool uses it for evidence that needs no statistics (a failed health probe, a refused
connection). A health probe that merely *runs out of time* is weaker evidence (a busy host, a
long garbage-collection pause): only ``probe_timeouts`` of them in a row open a closed circuit,
as Kubernetes waits for ``failureThreshold`` failed probes; a probe that answers "unhealthy" or
cannot connect opens it at once. A call that completes in between ends the run: a backend that
answers calls is busy, not hung (a loaded vLLM can answer ``/health`` late while it serves).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from agentrt.errors import ConfigError
from agentrt_controller.config_check import SECTION, check_fields, parse_section

__all__ = ["BreakerConfig", "BreakerState", "CircuitBreaker"]


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


def _integral(value: object) -> object:
    """``8.0`` (a TOML / JSON number written with a point) as the integer it is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: A count >= 1.
_Count = Annotated[int, Field(ge=1), BeforeValidator(_integral)]


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """Thresholds of :class:`CircuitBreaker` (the ``breaker`` section); validated on
    construction (:class:`ConfigError`)."""

    __pydantic_config__ = SECTION

    #: Consecutive failed calls that open the circuit.
    failure_threshold: _Count = 5
    #: Failure fraction over the last :attr:`window` calls that opens the circuit, in (0, 1].
    error_rate: Annotated[float, Field(gt=0, le=1)] = 0.5
    #: Calls remembered for the error rate.
    window: _Count = 20
    #: The error rate is judged only once this many calls are in the window.
    min_calls: _Count = 10
    #: Seconds an opened circuit waits before health probes become trials.
    cooldown_s: Annotated[float, Field(ge=0)] = 5.0
    #: Successful trial probes in a row that close a half-open circuit.
    success_threshold: _Count = 1
    #: Cool-down multiplier after a failed trial (≥ 1).
    backoff: Annotated[float, Field(ge=1)] = 2.0
    #: Upper bound of the cool-down after repeated failed trials (seconds).
    max_cooldown_s: float = 30.0
    #: Health probes in a row that run out of time before a closed circuit opens (a probe
    #: that fails outright opens it at once).
    probe_timeouts: _Count = 3

    def __post_init__(self) -> None:
        check_fields(self)
        if self.min_calls > self.window:
            raise ConfigError("breaker min_calls must be <= window")
        if not self.max_cooldown_s >= self.cooldown_s:
            raise ConfigError("breaker needs 0 <= cooldown_s <= max_cooldown_s (seconds)")

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> BreakerConfig:
        """From a config table; unknown keys and wrong types are :class:`ConfigError`."""
        return parse_section(cls, data, "breaker")


class CircuitBreaker:
    """The state of one backend's circuit. Not thread-safe (event loop only)."""

    def __init__(self, config: BreakerConfig | None = None) -> None:
        self.config = config or BreakerConfig()
        self.state = BreakerState.CLOSED
        #: When the circuit last opened (controller clock, seconds); ``None`` = never.
        self.opened_at_s: float | None = None
        #: Current cool-down (seconds): grows with failed trials, reset on close.
        self.cooldown_s = self.config.cooldown_s
        #: Why it last opened (for introspection; no prompt content).
        self.reason = ""
        #: Times the circuit opened since start.
        self.opened_total = 0
        self._consecutive_failures = 0
        self._consecutive_probe_timeouts = 0
        self._trial_successes = 0
        self._outcomes: deque[bool] = deque(maxlen=self.config.window)

    # --- questions -------------------------------------------------------------------------

    def allows_calls(self) -> bool:
        """True when calls may be routed to the backend (closed circuit)."""
        return self.state is BreakerState.CLOSED

    def error_fraction(self) -> float:
        """Failed fraction of the remembered calls, 0.0 when none."""
        if not self._outcomes:
            return 0.0
        return sum(1 for ok in self._outcomes if not ok) / len(self._outcomes)

    def retry_at_s(self) -> float | None:
        """When an open circuit starts accepting trial probes; ``None`` when not open."""
        if self.state is not BreakerState.OPEN or self.opened_at_s is None:
            return None
        return self.opened_at_s + self.cooldown_s

    # --- call outcomes ---------------------------------------------------------------------

    def record_success(self, now_s: float) -> None:
        """A call to the backend completed (any answer that is not a server failure); it also
        ends a run of timed-out probes (the backend is busy, not hung)."""
        if self.state is not BreakerState.CLOSED:
            return  # a call admitted before the circuit opened; trials are probes only
        self._consecutive_failures = 0
        self._consecutive_probe_timeouts = 0
        self._outcomes.append(True)

    def record_failure(self, now_s: float, reason: str = "call failed") -> None:
        """A call failed because of the backend (broken connection, 5xx, timeout)."""
        if self.state is not BreakerState.CLOSED:
            return
        self._consecutive_failures += 1
        self._outcomes.append(False)
        config = self.config
        if self._consecutive_failures >= config.failure_threshold:
            self._open(now_s, f"{self._consecutive_failures} consecutive failures ({reason})")
        elif len(self._outcomes) >= config.min_calls and self.error_fraction() >= config.error_rate:
            self._open(now_s, f"error rate {self.error_fraction():.2f} ({reason})")

    def trip(self, now_s: float, reason: str) -> None:
        """Open now (evidence that needs no statistics). A no-op when already open."""
        if self.state is BreakerState.HALF_OPEN:
            self._fail_trial(now_s, reason)
        elif self.state is BreakerState.CLOSED:
            self._open(now_s, reason)

    # --- health probes ---------------------------------------------------------------------

    def record_probe(
        self,
        ok: bool,
        now_s: float,
        reason: str = "health probe failed",
        *,
        timed_out: bool = False,
    ) -> None:
        """A health probe's verdict. Closed: a failure trips, a time-out (``timed_out``) only
        the ``probe_timeouts``-th in a row. Open: ignored until the cool-down passed, then the
        circuit is half-open and this probe is a trial (any failure, a time-out too, fails it)."""
        if self.state is BreakerState.CLOSED:
            if ok:
                self._consecutive_probe_timeouts = 0
            elif timed_out:
                self._consecutive_probe_timeouts += 1
                if self._consecutive_probe_timeouts >= self.config.probe_timeouts:
                    self._open(now_s, f"{reason} {self._consecutive_probe_timeouts} times in a row")
            else:
                self._open(now_s, reason)
            return
        if self.state is BreakerState.OPEN:
            retry_at = self.retry_at_s()
            if retry_at is not None and now_s < retry_at:
                return
            self.state = BreakerState.HALF_OPEN
            self._trial_successes = 0
        if not ok:
            self._fail_trial(now_s, reason)
            return
        self._trial_successes += 1
        if self._trial_successes >= self.config.success_threshold:
            self._close()

    # --- transitions -----------------------------------------------------------------------

    def _open(self, now_s: float, reason: str) -> None:
        self.state = BreakerState.OPEN
        self.opened_at_s = now_s
        self.reason = reason
        self.opened_total += 1

    def _fail_trial(self, now_s: float, reason: str) -> None:
        self.cooldown_s = min(self.config.max_cooldown_s, self.cooldown_s * self.config.backoff)
        self._open(now_s, reason)

    def _close(self) -> None:
        self.state = BreakerState.CLOSED
        self.cooldown_s = self.config.cooldown_s
        self.reason = ""
        self._consecutive_failures = 0
        self._consecutive_probe_timeouts = 0
        self._trial_successes = 0
        self._outcomes.clear()

    def snapshot(self, now_s: float) -> dict[str, Any]:
        """For introspection endpoints (plain JSON types)."""
        retry_at = self.retry_at_s()
        return {
            "state": self.state.value,
            "reason": self.reason,
            "opened_total": self.opened_total,
            "consecutive_failures": self._consecutive_failures,
            "error_fraction": round(self.error_fraction(), 4),
            "cooldown_s": self.cooldown_s,
            "trial_in_s": None if retry_at is None else max(0.0, retry_at - now_s),
        }
