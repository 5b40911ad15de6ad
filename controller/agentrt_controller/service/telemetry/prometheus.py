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
series. **Counters are added up in bulk**: :meth:`Counter.inc` adds to a plain float per series
(a dictionary update, no lock: increments come from the event loop's thread), and the
registry moves what was added since into ``prometheus_client``'s counters right before every
collection (a scrape, the OTLP bridge's read, :meth:`Counter.value`) — nine counter updates
per proxied call cost one lock each at the next scrape instead of one each per call.
**Histograms too** (:class:`Histogram`): three observations per proxied call, each a lock and
a walk of the buckets in ``prometheus_client``, are one binary search each.
"""

from __future__ import annotations

import bisect
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

    def __init__(self, registry: Registry, name: str, help_text: str,
                 labels: Sequence[str]) -> None:  # fmt: skip
        if not name.endswith("_total"):
            raise ConfigError(f"counter {name} must end in _total")
        self.name = name
        self.label_names = tuple(labels)
        self._metric = prometheus_client.Counter(
            name, help_text, self.label_names, registry=registry
        )
        self._flush_lock = threading.Lock()
        #: Each series' child (made at its first increment, so its ``_created`` is right).
        self._children: dict[LabelValues, Any] = {}
        #: Each series' total so far; written by :meth:`inc` only (the event loop's thread).
        self._totals: dict[LabelValues, float] = {}
        #: The part of each total already in its child; written by :meth:`flush` only.
        self._flushed: dict[LabelValues, float] = {}
        registry.flush_before_collect(self)

    def inc(self, amount: float = 1.0, *labels: str) -> None:
        """Add ``amount`` (≥ 0) to the series of ``labels``; the registry's next collection
        carries it. Raises :class:`ValueError` for a negative amount, as Prometheus does."""
        totals = self._totals
        total = totals.get(labels)
        if total is None:
            if len(labels) != len(self.label_names):
                raise ValueError(
                    f"{self.name}: label values {labels!r} do not match {self.label_names!r}"
                )
            self._children[labels] = self._metric.labels(*labels) if labels else self._metric
            total = 0.0
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        totals[labels] = total + amount

    def flush(self) -> None:
        """Move what was added since the last flush into ``prometheus_client``'s children
        (from any thread; one flush at a time)."""
        with self._flush_lock:
            # A copy taken in one C call, while the event loop may add a series meanwhile.
            for labels, total in tuple(self._totals.items()):
                added = total - self._flushed.get(labels, 0.0)
                if added > 0:
                    self._children[labels].inc(added)
                    self._flushed[labels] = total

    def value(self, *labels: str) -> float:
        self.flush()
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
    """Cumulative buckets (upper bounds in the metric's unit), sum and count.

    Observations are added up in bulk, like :class:`Counter`'s increments: :meth:`observe`
    counts into a plain list per series (one binary search, no lock; observations come from
    the event loop's thread), and :meth:`flush` sets ``prometheus_client``'s child to it
    right before every collection. The child's buckets and sum
    are ``prometheus_client``'s own values (``_buckets``, ``_sum``: what its ``observe``
    increments), so ``/metrics`` reads exactly as if each observation had gone there."""

    def __init__(self, registry: Registry, name: str, help_text: str,
                 buckets: Sequence[float], labels: Sequence[str]) -> None:  # fmt: skip
        self.name = name
        self.label_names = tuple(labels)
        self._metric = prometheus_client.Histogram(
            name, help_text, self.label_names, registry=registry, buckets=tuple(buckets)
        )
        #: The upper bounds as ``prometheus_client`` keeps them (``+Inf`` last).
        self._bounds: tuple[float, ...] = tuple(self._metric._upper_bounds)
        self._flush_lock = threading.Lock()
        #: Each series' child (made at its first observation, so its ``_created`` is right).
        self._children: dict[LabelValues, Any] = {}
        #: Each series' observations so far: per bucket (not cumulative), then the sum;
        #: written by :meth:`observe` only (the event loop's thread).
        self._totals: dict[LabelValues, list[float]] = {}
        registry.flush_before_collect(self)

    def observe(self, value: float, *labels: str) -> None:
        """One observation of ``value`` in the series of ``labels`` (the registry's next
        collection carries it). ``NaN`` counts in no bucket, as ``prometheus_client`` does."""
        totals = self._totals.get(labels)
        if totals is None:
            if len(labels) != len(self.label_names):
                raise ValueError(
                    f"{self.name}: label values {labels!r} do not match {self.label_names!r}"
                )
            self._children[labels] = self._metric.labels(*labels) if labels else self._metric
            totals = self._totals[labels] = [0.0] * (len(self._bounds) + 1)
        if value == value:  # not NaN: the first bucket whose bound is >= value
            totals[bisect.bisect_left(self._bounds, value)] += 1.0
        totals[-1] += value

    def flush(self) -> None:
        """Set ``prometheus_client``'s children to what was observed so far (from any thread;
        one flush at a time). Set, not added to: the sum is then the same float as
        ``prometheus_client``'s own, the observations added one by one in the same order."""
        with self._flush_lock:
            for labels, totals in tuple(self._totals.items()):
                now = totals[:]  # one copy (C): the event loop may observe meanwhile
                child = self._children[labels]
                for bucket, count in zip(child._buckets, now, strict=False):
                    bucket.set(count)
                child._sum.set(now[-1])

    def count(self, *labels: str) -> int:
        self.flush()
        return int(_sample_value(self._metric, "_count", labels, self.label_names))


class Registry(CollectorRegistry):
    """The metrics of one service; ``on_collect`` callbacks refresh gauges before each
    collection (a scrape, or the OTLP bridge's read)."""

    def __init__(self) -> None:
        super().__init__(auto_describe=True)
        self._refreshers: list[Callable[[], None]] = []
        self._refresh_lock = threading.Lock()
        self._bulk: list[Counter | Histogram] = []

    def flush_before_collect(self, metric: Counter | Histogram) -> None:
        """Have ``metric``'s increments or observations moved in before each collection."""
        self._bulk.append(metric)

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
            for metric in self._bulk:
                metric.flush()
            for refresh in self._refreshers:
                refresh()
        yield from super().collect()

    def render(self) -> str:
        return prometheus_client.generate_latest(self).decode()
