"""Tool duration prediction from the per-tool history (pure).

The journal keeps the ``history`` most recent observed durations of each tool (default 32).
The prediction is their **median**: tool durations are heavy-tailed (the agent workloads
Autellix, arXiv 2502.13965, measures are all long-tailed; docs/journal.md, "Tool durations"),
and one 10-second outlier should not move the prediction as it would move a mean or an EWMA.
With no history the prediction is ``None`` (the caller decides what an unknown tool means).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["predict_duration"]


def predict_duration(recent_s: Sequence[float]) -> float | None:
    """Median of the recent durations (seconds), ``None`` for an empty history."""
    if not recent_s:
        return None
    return float(statistics.median(recent_s))
