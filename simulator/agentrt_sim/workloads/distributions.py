"""Heavy-tailed samplers whose *mean* is exact by construction.

Agent workloads are long-tailed (Autellix arXiv 2502.13965 gives means, a few maxima;
docs/simulator.md §3). We use clipped lognormals: a shape ``sigma`` (how heavy the tail is) and
bounds ``[low, high]`` are chosen as documented assumptions, and the location ``mu`` is solved
numerically so that the mean *after* clipping (and, for counts, after rounding to integers) equals
the target. Sampling only needs ``random.Random``, so a seed fixes every draw.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from agentrt.errors import ConfigError

__all__ = ["ClippedLogNormal", "DiscreteLogNormal"]

_SQRT2 = math.sqrt(2.0)


def _phi(x: float) -> float:
    """Standard normal CDF."""
    return 0.5 * (1.0 + math.erf(x / _SQRT2))


def _lognormal_cdf(x: float, mu: float, sigma: float) -> float:
    if x <= 0:
        return 0.0
    if math.isinf(x):
        return 1.0
    return _phi((math.log(x) - mu) / sigma)


def _clipped_mean(mu: float, sigma: float, low: float, high: float) -> float:
    """E[min(max(X, low), high)] for X ~ LogNormal(mu, sigma)."""
    below = _lognormal_cdf(low, mu, sigma)
    above = 1.0 - _lognormal_cdf(high, mu, sigma)
    # Partial expectation of X over (low, high).
    scale = math.exp(mu + sigma * sigma / 2.0)
    upper = 1.0 if math.isinf(high) else _phi((math.log(high) - mu - sigma * sigma) / sigma)
    lower = 0.0 if low <= 0 else _phi((math.log(low) - mu - sigma * sigma) / sigma)
    inside = scale * (upper - lower)
    return low * below + (0.0 if math.isinf(high) else high * above) + inside


def _solve_mu(mean_of_mu: Callable[[float], float], target: float) -> float:
    """Bisection on mu; every mean function here is increasing in mu."""
    lo = hi = math.log(target)
    step = 1.0
    while mean_of_mu(lo) > target:
        lo -= step
        step *= 2.0
    step = 1.0
    while mean_of_mu(hi) < target:
        hi += step
        step *= 2.0
    for _ in range(80):
        mid = (lo + hi) / 2.0
        if mean_of_mu(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def _check_shape(mean: float, sigma: float, low: float, high: float) -> None:
    """Raise :class:`ConfigError` unless ``0 <= low <= mean <= high`` and ``sigma > 0``."""
    if not (low <= mean <= high) or sigma <= 0 or low < 0:
        raise ConfigError(
            f"need 0 <= low <= mean <= high and sigma > 0, got low={low}, "
            f"mean={mean}, high={high}, sigma={sigma}"
        )


def _is_fixed(mean: float, low: float, high: float) -> bool:
    """Whether the bounds leave one value only: every draw is ``mean`` (no randomness used)."""
    return low == high or mean in (low, high)


@dataclass(frozen=True)
class ClippedLogNormal:
    """A lognormal clipped to ``[low, high]`` with the given mean after clipping.

    Used for durations (seconds) and, through :meth:`sample_int`, for token counts.
    """

    #: Target mean after clipping (same unit as the samples).
    mean: float
    #: Shape of the underlying lognormal; larger = heavier tail.
    sigma: float = 1.0
    #: Lower clip (>= 0).
    low: float = 0.0
    #: Upper clip; ``math.inf`` = unbounded.
    high: float = math.inf
    _mu: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_shape(self.mean, self.sigma, self.low, self.high)
        if _is_fixed(self.mean, self.low, self.high):
            mu = math.log(self.mean) if self.mean > 0 else -math.inf
        else:
            sigma, low, high = self.sigma, self.low, self.high
            mu = _solve_mu(lambda m: _clipped_mean(m, sigma, low, high), self.mean)
        object.__setattr__(self, "_mu", mu)

    def sample(self, rng: random.Random) -> float:
        """One draw (same unit as ``mean``)."""
        if _is_fixed(self.mean, self.low, self.high):
            return self.mean
        value = rng.lognormvariate(self._mu, self.sigma)
        return min(max(value, self.low), self.high)

    def sample_int(self, rng: random.Random) -> int:
        """One draw rounded to an integer by unbiased random rounding (mean preserved)."""
        value = self.sample(rng)
        whole = math.floor(value)
        return whole + (1 if rng.random() < value - whole else 0)


@dataclass(frozen=True)
class DiscreteLogNormal:
    """An integer count in ``[low, high]``: round(LogNormal), clipped, with an exact mean.

    Used for calls per program and iterations per tree search, which are small integers where
    rounding matters, so the mean is solved over the exact probability mass function.
    """

    mean: float
    sigma: float = 1.0
    low: int = 1
    high: int = 10_000
    _mu: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_shape(self.mean, self.sigma, self.low, self.high)
        if _is_fixed(self.mean, self.low, self.high):
            object.__setattr__(self, "_mu", math.log(max(self.mean, 1e-9)))
            return
        sigma, low, high = self.sigma, self.low, self.high
        mu = _solve_mu(lambda m: _discrete_mean(m, sigma, low, high), self.mean)
        object.__setattr__(self, "_mu", mu)

    def sample(self, rng: random.Random) -> int:
        """One draw."""
        if _is_fixed(self.mean, self.low, self.high):
            return round(self.mean)
        value = rng.lognormvariate(self._mu, self.sigma)
        return int(min(max(math.floor(value + 0.5), self.low), self.high))

    def expectation(self, f: Callable[[int], float]) -> float:
        """E[f(N)] over the exact probability mass function of the draws (no sampling)."""
        if _is_fixed(self.mean, self.low, self.high):
            return f(round(self.mean))
        total = 0.0
        below = 0.0  # P(draw < k), i.e. P(X < k - 0.5), clipped at low
        for k in range(self.low, self.high + 1):
            upper = 1.0 if k == self.high else _lognormal_cdf(k + 0.5, self._mu, self.sigma)
            mass = upper - below
            total += mass * f(k)
            below = upper
            if 1.0 - below < 1e-15:
                break
        return total


def _discrete_mean(mu: float, sigma: float, low: int, high: int) -> float:
    """E[clip(floor(X + 0.5), low, high)] for X ~ LogNormal(mu, sigma)."""
    # P(value >= k) for k in (low, high]: floor(X + .5) >= k  <=>  X >= k - .5.
    total = float(low)
    for k in range(low + 1, high + 1):
        tail = 1.0 - _lognormal_cdf(k - 0.5, mu, sigma)
        total += tail
        if tail < 1e-12:
            break
    return total
