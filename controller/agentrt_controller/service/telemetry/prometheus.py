"""The controller's own ``/metrics`` registry, on ``prometheus_client`` (names: docs/controller.md,
"Metrics").

One :class:`Registry` per service, never the library's global ``REGISTRY`` (STYLE rule 3). It is
a :class:`prometheus_client.CollectorRegistry`, so ``generate_latest(registry)`` and
``registry.collect()`` work on it like on any other (the OTLP bridge reads it that way). Gauges
that mirror live state are filled by :meth:`Registry.on_collect` callbacks, run right before
every collection instead of being updated on every call.

The wrappers keep the call sites short (``counter.inc(1.0, backend)``: label values by position,
in the order the metric declared its label names) and give tests :meth:`Counter.value`. They
keep each series' child once made: ``prometheus_client``'s ``labels()`` validates, converts
and locks on every call, several microseconds each, and a proxied call updates about ten
series.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import prometheus_client
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from agentrt.errors import ConfigError

__all__ = ["CONTENT_TYPE", "Counter", "Gauge", "Histogram", "Registry"]

#: The text exposition format's content type (0.0.4), as Prometheus scrapes it.
CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST

LabelValues = tuple[str, ...]


def _sample_value(metric: prometheus_client.metrics.MetricWrapperBase, suffix: str,
                  labels: LabelValues, names: Sequence[str]) -> float:  # fmt: skip
    wanted = dict(zip(names, labels, strict=True))
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith(suffix) and sample.labels == wanted:
                return float(sample.value)
    return 0.0


class Counter:
    """A monotonically increasing total (its name ends ``_total``)."""

    def __init__(self, registry: CollectorRegistry, name: str, help_text: str,
                 labels: Sequence[str]) -> None:  # fmt: skip
        if not name.endswith("_total"):
            raise ConfigError(f"counter {name} must end in _total")
        self.label_names = tuple(labels)
        self._metric = prometheus_client.Counter(
            name, help_text, self.label_names, registry=registry
        )
        self._children: dict[LabelValues, Any] = {}

    def inc(self, amount: float = 1.0, *labels: str) -> None:
        child = self._children.get(labels)
        if child is None:
            child = self._children[labels] = (
                self._metric.labels(*labels) if labels else self._metric
            )
        child.inc(amount)

    def value(self, *labels: str) -> float:
        return _sample_value(self._metric, "_total", labels, self.label_names)


class Gauge:
    """A value that goes up and down; :meth:`replace` swaps all series at once."""

    def __init__(self, registry: CollectorRegistry, name: str, help_text: str,
                 labels: Sequence[str]) -> None:  # fmt: skip
        self.label_names = tuple(labels)
        self._metric = prometheus_client.Gauge(name, help_text, self.label_names, registry=registry)

    def set(self, value: float, *labels: str) -> None:
        (self._metric.labels(*labels) if labels else self._metric).set(value)

    def replace(self, values: dict[LabelValues, float]) -> None:
        self._metric.clear()
        for labels, value in values.items():
            self.set(value, *labels)

    def value(self, *labels: str) -> float:
        return _sample_value(self._metric, "", labels, self.label_names)


class Histogram:
    """Cumulative buckets (upper bounds in the metric's unit), sum and count."""

    def __init__(self, registry: CollectorRegistry, name: str, help_text: str,
                 buckets: Sequence[float], labels: Sequence[str]) -> None:  # fmt: skip
        self.label_names = tuple(labels)
        self._metric = prometheus_client.Histogram(
            name, help_text, self.label_names, registry=registry, buckets=tuple(buckets)
        )
        self._children: dict[LabelValues, Any] = {}

    def observe(self, value: float, *labels: str) -> None:
        child = self._children.get(labels)
        if child is None:
            child = self._children[labels] = (
                self._metric.labels(*labels) if labels else self._metric
            )
        child.observe(value)

    def count(self, *labels: str) -> int:
        return int(_sample_value(self._metric, "_count", labels, self.label_names))


class Registry(CollectorRegistry):
    """The metrics of one service; ``on_collect`` callbacks refresh gauges before each
    collection (a scrape, or the OTLP bridge's read)."""

    def __init__(self) -> None:
        super().__init__(auto_describe=True)
        self._refreshers: list[Callable[[], None]] = []
        self._refresh_lock = threading.Lock()

    def counter(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(self, name, help_text, labels)

    def gauge(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(self, name, help_text, labels)

    def histogram(
        self, name: str, help_text: str, buckets: Sequence[float], labels: Sequence[str] = ()
    ) -> Histogram:
        return Histogram(self, name, help_text, buckets, labels)

    def info(self, name: str, help_text: str, labels: dict[str, str]) -> None:
        """A constant ``1`` with identifying labels (``agentrt_build_info``)."""
        gauge = prometheus_client.Gauge(name, help_text, tuple(labels), registry=self)
        gauge.labels(**labels).set(1)

    def on_collect(self, refresher: Callable[[], None]) -> None:
        self._refreshers.append(refresher)

    def collect(self) -> Iterable[Metric]:
        with self._refresh_lock:
            for refresh in self._refreshers:
                refresh()
        yield from super().collect()

    def render(self) -> str:
        return prometheus_client.generate_latest(self).decode()
