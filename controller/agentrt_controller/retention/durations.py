"""Per-tool duration history: quantiles, CDF and E[min(D, T)] for retention TTLs.

Each name keeps its last ``size`` durations (a ring). With fewer than ``min_samples`` of them,
the distribution is assumed exponential with the client's predicted mean (or
``default_mean_s``): a deliberately heavy tail, so that TTLs from a guess are generous only
where memory is cheap. Pure: no clock.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

from agentrt.errors import ConfigError

__all__ = ["DurationModel", "ToolDurations"]


class DurationModel:
    """One distribution of wait durations (seconds): empirical, or exponential with a mean."""

    def __init__(self, samples: list[float] | None = None, mean_s: float | None = None) -> None:
        """Empirical when ``samples`` is non-empty, else exponential with ``mean_s`` (> 0)."""
        self.samples = sorted(samples) if samples else []
        if not self.samples and not (mean_s is not None and mean_s > 0):
            raise ConfigError("a duration model needs samples or a mean > 0")
        self.mean_s = mean_s if not self.samples else sum(self.samples) / len(self.samples)

    @property
    def empirical(self) -> bool:
        return bool(self.samples)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (seconds), ``0 <= q < 1``."""
        if self.samples:
            index = min(len(self.samples) - 1, max(0, math.ceil(q * len(self.samples)) - 1))
            return self.samples[index]
        assert self.mean_s is not None
        return -self.mean_s * math.log(1.0 - q)

    def cdf(self, t_s: float) -> float:
        """P(D <= t_s)."""
        if t_s < 0:
            return 0.0
        if self.samples:
            return bisect.bisect_right(self.samples, t_s) / len(self.samples)
        assert self.mean_s is not None
        return 1.0 - math.exp(-t_s / self.mean_s)

    def expected_min(self, t_s: float) -> float:
        """E[min(D, t_s)] (seconds): how long a pin with TTL ``t_s`` is expected to be held
        (released when the program returns, or at the TTL)."""
        if t_s <= 0:
            return 0.0
        if self.samples:
            return sum(min(d, t_s) for d in self.samples) / len(self.samples)
        assert self.mean_s is not None
        return self.mean_s * (1.0 - math.exp(-t_s / self.mean_s))


class ToolDurations:
    """Recent durations per tool name."""

    def __init__(
        self, *, size: int = 256, min_samples: int = 3, default_mean_s: float = 2.0
    ) -> None:
        if size < 1 or min_samples < 1 or not default_mean_s > 0:
            raise ConfigError("history size and min_samples must be >= 1, default_mean_s > 0")
        self.size = size
        self.min_samples = min_samples
        self.default_mean_s = float(default_mean_s)
        self._history: dict[str, deque[float]] = {}

    def record(self, name: str, duration_s: float) -> None:
        """A wait of ``name`` lasted ``duration_s`` seconds (negative / NaN ignored)."""
        if not duration_s >= 0 or not math.isfinite(duration_s):
            return
        ring = self._history.get(name)
        if ring is None:
            ring = self._history[name] = deque(maxlen=self.size)
        ring.append(float(duration_s))

    def count(self, name: str) -> int:
        return len(self._history.get(name, ()))

    def model(self, name: str, predicted_mean_s: float | None = None) -> DurationModel:
        """The distribution to plan with for ``name`` (module docstring)."""
        ring = self._history.get(name)
        if ring is not None and len(ring) >= self.min_samples:
            return DurationModel(list(ring))
        mean = predicted_mean_s if predicted_mean_s and predicted_mean_s > 0 else None
        return DurationModel(mean_s=mean or self.default_mean_s)
