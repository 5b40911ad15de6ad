"""The one tool-duration predictor: the median of a bounded recent history per name."""

from __future__ import annotations

import math

import pytest

from agentrt.tools.durations import DEFAULT_HISTORY, DurationHistory, predict_duration


def test_the_prediction_is_the_median_of_the_recent_runs() -> None:
    assert predict_duration([]) is None
    assert predict_duration([1.0, 100.0, 2.0]) == 2.0
    history = DurationHistory()
    assert history.predict("search") is None
    for duration_s in (1.0, 1.2, 30.0):  # one heavy-tail outlier does not move it far
        history.record("search", duration_s)
    assert history.predict("search") == 1.2
    assert history.predict("other") is None


def test_the_history_is_bounded_and_ignores_invalid_durations() -> None:
    history = DurationHistory(history=3)
    for duration_s in (9.0, 9.0, 1.0, 2.0, 3.0):
        history.record("t", duration_s)
    assert history.recent("t") == [1.0, 2.0, 3.0]
    history.record("t", -1.0)
    history.record("t", math.nan)
    assert history.predict("t") == 2.0
    assert len(DurationHistory().recent("t")) == 0
    assert DEFAULT_HISTORY == 32
    with pytest.raises(ValueError, match="history must be >= 1"):
        DurationHistory(history=0)
