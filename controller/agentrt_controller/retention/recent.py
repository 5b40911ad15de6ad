"""Recent means per key: an exponentially weighted mean of observations, per observation.

Used for the recent queueing delay per backend, the ``T`` of the retention policy's eviction
cost (:mod:`.policy`; Continuum arXiv 2511.02230 weighs a pin against the queueing delay an
evicted program sees again): each driver feeds it what it observes — the controller service
the wait of each call from its arrival to its admission on a backend, the simulator the time
each finished call spent neither in engine steps nor in a tool (controller queue, engine
queue, preempted) — and reads a smoothed value per backend into
:class:`~agentrt_controller.retention.driver.BackendTraits`. And for the controller's prompt
size estimate (``service/http/prompt_size.py``: reported tokens and estimates per model).
Pure: no clock; a mean per observation, not per second.
"""

from __future__ import annotations

import math

from agentrt.errors import ConfigError

__all__ = ["RecentMeans"]

#: Keys remembered at most (a controller has a few backends and models; a bound against a
#: churn of ids or names).
_MAX_KEYS = 4096


class RecentMeans:
    """An exponentially weighted mean of observed values per key (a backend, a model)."""

    def __init__(self, *, weight: float = 0.1) -> None:
        """``weight``: the share of each new observation in the mean, in (0, 1]."""
        if not 0 < weight <= 1:
            raise ConfigError(f"weight must be in (0, 1], got {weight!r}")
        self.weight = float(weight)
        self._mean: dict[str, float] = {}

    def observe(self, key: str, value: float) -> None:
        """One observation of ``key`` (negative or NaN ignored: a wait, a count)."""
        if not value >= 0 or not math.isfinite(value):
            return
        mean = self._mean.get(key)
        if mean is None:
            if len(self._mean) >= _MAX_KEYS:
                self._mean.pop(next(iter(self._mean)))
            self._mean[key] = value
        else:
            self._mean[key] = mean + self.weight * (value - mean)

    def get(self, key: str) -> float | None:
        """The recent mean of ``key``; ``None`` = nothing observed."""
        return self._mean.get(key)

    def forget(self, key: str) -> None:
        self._mean.pop(key, None)
