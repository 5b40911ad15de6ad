"""A tolerant reader of the Prometheus text exposition format, for scraping backends.

Only what load estimation needs: sample values by metric name, summed over label sets (one
vLLM server may expose one series per model or engine). Malformed lines are skipped, never
raised: a backend that serves garbage has *unknown* load (docs/backends.md, "When backends
fail").
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["max_samples", "sum_samples"]


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


def _samples(text: str, names: Iterable[str]) -> dict[str, list[float]]:
    wanted = set(names)
    found: dict[str, list[float]] = {}
    for line in text.splitlines():
        sample = _sample(line)
        if sample is None or sample[0] not in wanted:
            continue
        found.setdefault(sample[0], []).append(sample[1])
    return found


def sum_samples(text: str, names: Iterable[str]) -> dict[str, float]:
    """Sum of the samples of each metric in ``names`` found in ``text`` (counts: requests,
    tokens — one series per engine or rank adds up).

    Names absent from the text (or with only garbage samples) are absent from the result.
    """
    return {name: sum(values) for name, values in _samples(text, names).items()}


def max_samples(text: str, names: Iterable[str]) -> dict[str, float]:
    """Largest sample of each metric in ``names`` (fractions such as a KV cache usage: the
    fullest engine or rank is what limits admission; summing fractions would exceed 1)."""
    return {name: max(values) for name, values in _samples(text, names).items()}
