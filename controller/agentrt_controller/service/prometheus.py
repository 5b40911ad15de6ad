"""A minimal Prometheus registry for the controller's own ``/metrics`` (text format 0.0.4).

Counters, gauges and histograms with fixed label names; no global registry: the service owns
one :class:`Registry`. Gauges that mirror live state are filled by a collect callback at
scrape time instead of being updated on every call.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from agentrt.errors import ConfigError

__all__ = ["Counter", "Gauge", "Histogram", "Registry"]

_M = TypeVar("_M", bound="_Metric")

LabelValues = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: Sequence[str], values: LabelValues, extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.help_text = help_text
        self.label_names = tuple(labels)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help_text}", f"# TYPE {self.name} {self.kind}"]

    def render(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    """A monotonically increasing total."""

    kind = "counter"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        self._values: dict[LabelValues, float] = {}

    def inc(self, amount: float = 1.0, *labels: str) -> None:
        self._values[labels] = self._values.get(labels, 0.0) + amount

    def value(self, *labels: str) -> float:
        return self._values.get(labels, 0.0)

    def render(self) -> list[str]:
        lines = self.header()
        for values, total in sorted(self._values.items()):
            lines.append(f"{self.name}{_labels(self.label_names, values)} {_number(total)}")
        return lines


class Gauge(_Metric):
    """A value that goes up and down; :meth:`replace` swaps all series at once."""

    kind = "gauge"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        self._values: dict[LabelValues, float] = {}

    def set(self, value: float, *labels: str) -> None:
        self._values[labels] = value

    def replace(self, values: dict[LabelValues, float]) -> None:
        self._values = dict(values)

    def value(self, *labels: str) -> float:
        return self._values.get(labels, 0.0)

    def render(self) -> list[str]:
        lines = self.header()
        for values, value in sorted(self._values.items()):
            lines.append(f"{self.name}{_labels(self.label_names, values)} {_number(value)}")
        return lines


class Histogram(_Metric):
    """Cumulative buckets (upper bounds in the metric's unit), sum and count."""

    kind = "histogram"

    def __init__(
        self, name: str, help_text: str, buckets: Sequence[float], labels: Sequence[str] = ()
    ) -> None:
        super().__init__(name, help_text, labels)
        self.bounds = tuple(sorted(buckets))
        self._series: dict[LabelValues, tuple[list[int], list[float]]] = {}

    def observe(self, value: float, *labels: str) -> None:
        series = self._series.get(labels)
        if series is None:
            series = ([0] * (len(self.bounds) + 1), [0.0])
            self._series[labels] = series
        series[0][bisect.bisect_left(self.bounds, value)] += 1
        series[1][0] += value

    def count(self, *labels: str) -> int:
        series = self._series.get(labels)
        return sum(series[0]) if series else 0

    def render(self) -> list[str]:
        lines = self.header()
        for values, (counts, total) in sorted(self._series.items()):
            cumulative = 0
            for bound, count in zip((*self.bounds, math.inf), counts, strict=True):
                cumulative += count
                le = _labels(self.label_names, values, f'le="{_number(bound)}"')
                lines.append(f"{self.name}_bucket{le} {cumulative}")
            plain = _labels(self.label_names, values)
            lines.append(f"{self.name}_sum{plain} {_number(total[0])}")
            lines.append(f"{self.name}_count{plain} {cumulative}")
        return lines


class Registry:
    """The metrics of one service; ``collectors`` refresh gauges right before rendering."""

    def __init__(self) -> None:
        self._metrics: list[_Metric] = []
        self._collectors: list[Callable[[], None]] = []

    def counter(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Counter:
        return self._add(Counter(name, help_text, labels))

    def gauge(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Gauge:
        return self._add(Gauge(name, help_text, labels))

    def histogram(
        self, name: str, help_text: str, buckets: Sequence[float], labels: Sequence[str] = ()
    ) -> Histogram:
        return self._add(Histogram(name, help_text, buckets, labels))

    def on_collect(self, collector: Callable[[], None]) -> None:
        self._collectors.append(collector)

    def _add(self, metric: _M) -> _M:
        if any(m.name == metric.name for m in self._metrics):
            raise ConfigError(f"metric {metric.name} registered twice")
        self._metrics.append(metric)
        return metric

    def render(self) -> str:
        for collect in self._collectors:
            collect()
        lines: list[str] = []
        for metric in self._metrics:
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"
