"""A tolerant reader of the Prometheus text exposition format, for scraping backends.

Only what load estimation needs: sample values by metric name, summed over label sets (one
vLLM server may expose one series per model or engine). Malformed lines are skipped, never
raised: a backend that serves garbage has *unknown* load (docs/backends.md, "When backends
fail").
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["labelled_samples", "max_samples", "min_samples", "sum_samples"]


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


def _labels(text: str) -> dict[str, str] | None:
    """``a="x",b="y"`` (the part between braces) as a dict; ``None`` when malformed. Label
    values may hold escaped quotes, backslashes and newlines (the exposition format's)."""
    labels: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        if i >= n:
            break
        eq = text.find("=", i)
        if eq < 0 or eq + 1 >= n or text[eq + 1] != '"':
            return None
        name, i = text[i:eq].strip(), eq + 2
        value: list[str] = []
        while i < n and text[i] != '"':
            if text[i] == "\\" and i + 1 < n:
                i += 1
                value.append("\n" if text[i] == "n" else text[i])
            else:
                value.append(text[i])
            i += 1
        if i >= n or not name:
            return None
        labels[name] = "".join(value)
        i += 1
    return labels


def labelled_samples(text: str, name: str) -> list[dict[str, str]]:
    """The label sets of the samples of ``name`` (an *info* metric such as vLLM's
    ``vllm:cache_config_info``, whose value is always 1 and whose facts are its labels), one
    per series; malformed lines are skipped."""
    found: list[dict[str, str]] = []
    prefix = name + "{"
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith(prefix):
            continue
        close = line.rfind("}")
        labels = _labels(line[len(prefix) : close]) if close > len(prefix) - 1 else None
        if labels is not None:
            found.append(labels)
    return found


def min_samples(text: str, names: Iterable[str]) -> dict[str, float]:
    """Smallest sample of each metric in ``names`` (a per-engine capacity: one engine or rank
    holds a call's KV, so the smallest is what a context's share is measured against)."""
    return {name: min(values) for name, values in _samples(text, names).items()}
