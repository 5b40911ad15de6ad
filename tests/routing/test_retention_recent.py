"""The recent queueing delay per backend (the ``T`` of the retention policy's eviction cost)."""

from __future__ import annotations

import math

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.retention.recent import RecentMeans

pytestmark = pytest.mark.timeout(10)


def test_an_exponentially_weighted_mean_per_backend() -> None:
    waits = RecentMeans(weight=0.5)
    assert waits.get("b0") is None  # nothing observed: the policy's fallback
    waits.observe("b0", 10.0)
    waits.observe("b0", 20.0)
    waits.observe("b1", 3.0)
    assert (waits.get("b0"), waits.get("b1")) == (15.0, 3.0)
    for bad in (-1.0, math.nan, math.inf):
        waits.observe("b0", bad)  # ignored
    assert waits.get("b0") == 15.0
    waits.forget("b0")
    assert waits.get("b0") is None


@pytest.mark.parametrize("weight", [0.0, 1.5, math.nan])
def test_a_bad_weight_is_refused(weight: float) -> None:
    with pytest.raises(ConfigError, match="weight"):
        RecentMeans(weight=weight)
