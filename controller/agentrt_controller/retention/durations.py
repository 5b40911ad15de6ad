"""Per-tool duration history: quantiles, CDF and E[min(D, T)] for retention TTLs.

Durations are learned per **(tenant, tool name)** (:mod:`.learned`: bounded, oldest forgotten),
so one tenant's waits never shape another's TTLs. Each keeps its last ``size`` durations (a
ring). A tenant with fewer than ``min_samples`` of its own for a name plans with the **global
prior**: the durations of that name from the tenants that opted in to sharing
(``sharing``; a non-sharing tenant's own few samples are added to them). With fewer than
``min_samples`` there too, the distribution is assumed exponential with the client's predicted
mean (or ``default_mean_s``): a deliberately heavy tail, so that TTLs from a guess are
generous only where memory is cheap. Pure: no clock.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Collection

from agentrt.errors import ConfigError
from agentrt_controller.retention.learned import (
    MAX_NAMES,
    MAX_NAMES_PER_TENANT,
    BoundedNames,
    TenantTables,
)

__all__ = ["DurationModel", "ToolDurations"]


class DurationModel:
    """One distribution of wait durations (seconds): empirical, or exponential with a mean."""

    def __init__(self, samples: list[float] | None = None, mean_s: float | None = None) -> None:
        """Empirical when ``samples`` is non-empty, else exponential with ``mean_s`` (> 0)."""
        self.samples = sorted(samples) if samples else []
        if not self.samples and not (mean_s is not None and mean_s > 0):
            raise ConfigError("a duration model needs samples or a mean > 0")
        self.mean_s = mean_s if not self.samples else sum(self.samples) / len(self.samples)
        #: Running sums of ``samples`` (left to right), built at the first ``expected_min``.
        self._running_sums: list[float] | None = None

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
        samples = self.samples
        if samples:
            # = sum(min(d, t_s) for d in samples), summed in the same order (samples are
            # sorted: those <= t_s, then t_s for each longer one), without a Python loop.
            held = bisect.bisect_right(samples, t_s)
            if self._running_sums is None:
                self._running_sums = list(itertools.accumulate(samples))
            start = self._running_sums[held - 1] if held else 0.0
            return sum(itertools.repeat(t_s, len(samples) - held), start) / len(samples)
        assert self.mean_s is not None
        return self.mean_s * (1.0 - math.exp(-t_s / self.mean_s))

    def expected_within(self, t_s: float) -> float:
        """E[D | D <= t_s] (seconds): when a program that comes back within ``t_s`` does, on
        average; ``t_s`` when none does."""
        within = self.cdf(t_s)
        if within <= 0:
            return max(0.0, t_s)
        # E[min(D, t)] = F(t)·E[D | D <= t] + (1 − F(t))·t
        return max(0.0, (self.expected_min(t_s) - (1.0 - within) * t_s) / within)


class ToolDurations:
    """Recent durations per (tenant, tool name), and the shared prior per tool name."""

    def __init__(
        self,
        *,
        size: int = 256,
        min_samples: int = 3,
        default_mean_s: float = 2.0,
        sharing: Collection[str] = frozenset(),
        max_names_per_tenant: int = MAX_NAMES_PER_TENANT,
        max_names: int = MAX_NAMES,
    ) -> None:
        """``sharing``: the tenants whose durations feed the global prior (``None``, the
        simulator's one tenant, never does: it has no one to share with)."""
        if size < 1 or min_samples < 1 or not default_mean_s > 0:
            raise ConfigError("history size and min_samples must be >= 1, default_mean_s > 0")
        self.size = size
        self.min_samples = min_samples
        self.default_mean_s = float(default_mean_s)
        self.sharing = frozenset(sharing)
        self._history: TenantTables[deque[float]] = TenantTables(
            self._ring, max_names_per_tenant=max_names_per_tenant, max_names=max_names
        )
        self._shared: BoundedNames[deque[float]] = BoundedNames(self._ring, max_names_per_tenant)

    def _ring(self) -> deque[float]:
        return deque(maxlen=self.size)

    def record(self, name: str, duration_s: float, *, tenant: str | None = None) -> None:
        """A wait of ``name`` by ``tenant`` lasted ``duration_s`` seconds (negative / NaN
        ignored); it feeds the shared prior too when ``tenant`` shares."""
        if not duration_s >= 0 or not math.isfinite(duration_s):
            return
        self._history.write(tenant, name).append(float(duration_s))
        if tenant is not None and tenant in self.sharing:
            self._shared.write(name).append(float(duration_s))

    def count(self, name: str, *, tenant: str | None = None) -> int:
        """``tenant``'s own samples of ``name``."""
        return len(self._history.get(tenant, name) or ())

    def shared_count(self, name: str) -> int:
        """Samples of ``name`` in the shared prior."""
        return len(self._shared.get(name) or ())

    def model(
        self, name: str, predicted_mean_s: float | None = None, *, tenant: str | None = None
    ) -> DurationModel:
        """The distribution ``tenant`` plans with for ``name`` (module docstring)."""
        own = list(self._history.get(tenant, name) or ())
        if len(own) >= self.min_samples:
            return DurationModel(own)
        shares = tenant is not None and tenant in self.sharing
        prior = list(self._shared.get(name) or ()) + ([] if shares else own)
        if len(prior) >= self.min_samples:
            return DurationModel(prior)
        mean = predicted_mean_s if predicted_mean_s and predicted_mean_s > 0 else None
        return DurationModel(mean_s=mean or self.default_mean_s)

    @property
    def learned(self) -> dict[str, int]:
        """Sizes for introspection: tenants, (tenant, name) entries, shared names."""
        return {
            "tenants": self._history.tenants,
            "names": len(self._history),
            "shared_names": len(self._shared),
        }
