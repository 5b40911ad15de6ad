"""Recent queueing delay per backend: the ``T`` of the retention policy's eviction cost
(:mod:`.policy`; Continuum arXiv 2511.02230 weighs a pin against the queueing delay an evicted
program sees again).

Each driver feeds it what it observes — the controller service the wait of each call from its
arrival to its admission on a backend, the simulator the time each finished call spent
neither in engine steps nor in a tool (controller queue, engine queue, preempted) — and reads
a smoothed value per backend into :class:`~agentrt_controller.retention.driver.BackendTraits`.
Pure: no clock; an exponentially weighted mean per observation, not per second.
"""

from __future__ import annotations

import math

from agentrt.errors import ConfigError

__all__ = ["RecentWaits"]

#: Backends remembered at most (a controller has a few; a bound against a removed-and-added
#: churn of ids).
_MAX_BACKENDS = 4096


class RecentWaits:
    """An exponentially weighted mean of observed waits (seconds) per backend."""

    def __init__(self, *, weight: float = 0.1) -> None:
        """``weight``: the share of each new observation in the mean, in (0, 1]."""
        if not 0 < weight <= 1:
            raise ConfigError(f"weight must be in (0, 1], got {weight!r}")
        self.weight = float(weight)
        self._mean: dict[str, float] = {}

    def observe(self, backend_id: str, wait_s: float) -> None:
        """A call on ``backend_id`` waited ``wait_s`` seconds (negative or NaN ignored)."""
        if not wait_s >= 0 or not math.isfinite(wait_s):
            return
        mean = self._mean.get(backend_id)
        if mean is None:
            if len(self._mean) >= _MAX_BACKENDS:
                self._mean.pop(next(iter(self._mean)))
            self._mean[backend_id] = wait_s
        else:
            self._mean[backend_id] = mean + self.weight * (wait_s - mean)

    def get(self, backend_id: str) -> float | None:
        """The recent mean wait on ``backend_id`` (seconds); ``None`` = nothing observed."""
        return self._mean.get(backend_id)

    def forget(self, backend_id: str) -> None:
        self._mean.pop(backend_id, None)
