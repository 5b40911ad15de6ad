"""Several seeds of one comparison: medians and ranges (``agentrt bench sim --seeds 1,2,3``).

One seed is one arrival process; a difference between two policies smaller than the spread
between seeds says nothing. :func:`over_seeds` folds the summaries of the same configurations
run on each seed into one summary per configuration: every number is the **median** over the
seeds, and ``seed_range`` mirrors the numbers' structure with ``[min, max]``; ``seeds`` lists
the seeds. NaN (a metric a seed could not measure) is left out of the median and the range;
all NaN gives NaN. Anything that is not a number (names, flags) is the first seed's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["over_seeds", "parse_seeds"]


def parse_seeds(text: str) -> list[int]:
    """``"1,2,3"`` → ``[1, 2, 3]``. Raises :class:`ValueError` naming the bad item, for an
    empty list or for a seed given twice."""
    seeds: list[int] = []
    for item in text.split(","):
        item = item.strip()
        try:
            seed = int(item)
        except ValueError:
            raise ValueError(f"--seeds takes comma-separated integers, got {item!r}") from None
        if seed in seeds:
            raise ValueError(f"--seeds names seed {seed} twice")
        seeds.append(seed)
    if not seeds:
        raise ValueError("--seeds needs at least one seed")
    return seeds


def over_seeds(
    runs: Sequence[Sequence[Mapping[str, Any]]], seeds: Sequence[int]
) -> list[dict[str, Any]]:
    """One summary per configuration from ``runs[i][j]`` = seed ``seeds[i]``'s summary of
    configuration ``j`` (every seed ran the same configurations in the same order)."""
    if len(runs) != len(seeds) or not runs:
        raise ValueError(f"{len(runs)} runs for {len(seeds)} seeds")
    merged: list[dict[str, Any]] = []
    for per_seed in zip(*runs, strict=True):
        median = _median(per_seed)
        assert isinstance(median, dict)
        median["seeds"] = list(seeds)
        median["seed_range"] = _range(per_seed)
        merged.append(median)
    return merged


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _median(values: Sequence[Any]) -> Any:
    first = values[0]
    if isinstance(first, Mapping):
        return {
            key: _median([v[key] for v in values if isinstance(v, Mapping) and key in v])
            for key in first
        }
    if _is_number(first) and all(_is_number(v) for v in values):
        finite = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
        return statistics.median(finite) if finite else math.nan
    return first


def _range(values: Sequence[Any]) -> Any:
    """``[min, max]`` of each number, in the structure of ``values[0]``; ``None`` elsewhere
    (left out of mappings)."""
    first = values[0]
    if isinstance(first, Mapping):
        out = {}
        for key in first:
            spread = _range([v[key] for v in values if isinstance(v, Mapping) and key in v])
            if spread is not None:
                out[key] = spread
        return out
    if _is_number(first) and all(_is_number(v) for v in values):
        finite = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
        return [min(finite), max(finite)] if finite else [math.nan, math.nan]
    return None
