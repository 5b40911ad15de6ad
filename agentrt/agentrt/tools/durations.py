"""Tool duration prediction: the median of a bounded recent history per name (pure, no clock).

The one predictor of the project: the runtime's in-memory history (``DurationHistory``), the
journal's durable one (``agentrt.journal``: it stores the durations, then predicts with
``predict_duration``) and the replay runner's all predict this way.

Why the median: tool durations are heavy-tailed (the agent workloads Autellix, arXiv
2502.13965, measures are all long-tailed; docs/journal.md, "Tool durations"), and one
10-second outlier should not move the prediction as it would move a mean or an EWMA. Why a
bounded history: a tool's speed drifts (a cache warms, a provider slows down), so only the
``DEFAULT_HISTORY`` most recent runs count. With no history the prediction is ``None``: the
caller decides what an unknown tool means.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence

__all__ = ["DEFAULT_HISTORY", "DurationHistory", "predict_duration"]

#: Observed durations kept per name (the journal's ``duration_history`` default too).
DEFAULT_HISTORY = 32


def predict_duration(recent_s: Sequence[float]) -> float | None:
    """Median of the recent durations (seconds), ``None`` for an empty history."""
    if not recent_s:
        return None
    return float(statistics.median(recent_s))


class DurationHistory:
    """The ``history`` most recent durations (seconds) per name, in memory; predicts their
    median. Negative and NaN durations are ignored, as the journal ignores them."""

    def __init__(self, history: int = DEFAULT_HISTORY) -> None:
        if history < 1:
            raise ValueError(f"history must be >= 1, got {history}")
        self._history = history
        self._recent_s: dict[str, deque[float]] = {}

    def record(self, name: str, duration_s: float) -> None:
        """Add one observed duration (seconds) of ``name``; the oldest beyond the bound go."""
        if math.isnan(duration_s) or duration_s < 0:
            return
        recent = self._recent_s.get(name)
        if recent is None:
            recent = self._recent_s[name] = deque(maxlen=self._history)
        recent.append(duration_s)

    def predict(self, name: str) -> float | None:
        """Predicted duration (seconds) of the next run of ``name``; None without history."""
        return predict_duration(self._recent_s.get(name, ()))

    def recent(self, name: str) -> list[float]:
        """The kept durations of ``name`` (seconds), oldest first."""
        return list(self._recent_s.get(name, ()))
