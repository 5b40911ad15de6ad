"""A tolerant reader of the Prometheus text exposition format, for scraping backends.

Only what load estimation needs: sample values by metric name, summed over label sets (one
vLLM server may expose one series per model or engine). Malformed lines are skipped, never
raised: a backend that serves garbage has *unknown* load (issue [routing], "Bad input").
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["sum_samples"]


def _sample(line: str) -> tuple[str, float] | None:
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    brace = line.find("{")
    if brace >= 0:
        close = line.rfind("}")
        if close < brace:
            return None
        name, rest = line[:brace], line[close + 1 :]
    else:
        name, _, rest = line.partition(" ")
    parts = rest.split()
    if not name or not parts:
        return None
    try:
        value = float(parts[0])
    except ValueError:
        return None
    if math.isnan(value) or math.isinf(value):
        return None
    return name.strip(), value


def sum_samples(text: str, names: Iterable[str]) -> dict[str, float]:
    """Sum of the samples of each metric in ``names`` found in ``text``.

    Names absent from the text (or with only garbage samples) are absent from the result.
    """
    wanted = set(names)
    totals: dict[str, float] = {}
    for line in text.splitlines():
        sample = _sample(line)
        if sample is None or sample[0] not in wanted:
            continue
        totals[sample[0]] = totals.get(sample[0], 0.0) + sample[1]
    return totals
