"""Pickers: choose one backend from the weighted totals (see :mod:`.api`)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from agentrt.errors import ConfigError
from agentrt_controller.routing.api import Scored
from agentrt_controller.scheduling.call import CallEntry

__all__ = ["ArgmaxPicker", "WeightedRandomPicker"]

#: Totals closer than this are ties (float noise from weighting must not decide).
_TIE = 1e-9


class ArgmaxPicker:
    """The highest total; ties go to the smallest ``backend_id`` (deterministic)."""

    def pick(self, call: CallEntry, scored: Sequence[Scored], now_s: float) -> str:
        best = max(s.total for s in scored)
        return min(s.backend.backend_id for s in scored if s.total >= best - _TIE)


class WeightedRandomPicker:
    """A backend drawn with probability proportional to its total (uniform when every total
    is 0), from its own ``random.Random(seed)`` — reproducible for a given seed and call order."""

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"the weighted random picker needs an integer seed, got {seed!r}")
        self.seed = seed
        self._rng = random.Random(seed)

    def pick(self, call: CallEntry, scored: Sequence[Scored], now_s: float) -> str:
        ordered = sorted(scored, key=lambda s: s.backend.backend_id)
        weights = [max(0.0, s.total) for s in ordered]
        if sum(weights) <= 0:
            weights = [1.0] * len(ordered)
        return self._rng.choices(ordered, weights=weights)[0].backend.backend_id
