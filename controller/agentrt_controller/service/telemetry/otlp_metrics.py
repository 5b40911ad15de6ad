"""The controller's Prometheus registry pushed as OpenTelemetry metrics (OTLP).

One registry, two ways out: Prometheus scrapes ``/metrics``; with ``OTEL_METRICS_EXPORTER`` (or
an OTLP endpoint) set, :class:`MetricsPush` reads the same registry every interval and hands it
to OpenTelemetry metric exporters. Nothing is recorded twice on the call path: the conversion
happens at export time, like a scrape. Names, labels (as attributes) and values are those of
``/metrics`` (docs/metrics.md):

* a counter is a cumulative monotonic sum named like its ``_total`` series; its start time is
  the series' ``_created`` timestamp when prometheus_client keeps one;
* a gauge is a gauge;
* a histogram is a cumulative explicit-bucket histogram (Prometheus' cumulative ``le`` buckets
  turned into per-bucket counts; no min / max, Prometheus has none).

Other Prometheus types (summaries, state sets) are not in the controller's registry and are
skipped.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus
from prometheus_client.metrics_core import Metric as PromMetric
from prometheus_client.registry import Collector

from agentrt import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import (
        Metric,
        MetricExporter,
        MetricExportResult,
        MetricsData,
    )
    from opentelemetry.sdk.resources import Resource

__all__ = ["MetricsPush", "registry_metrics"]

_log = logging.getLogger("agentrt.controller")
_SCOPE = "agentrt.controller"
_NANOS = 1_000_000_000

Labels = tuple[tuple[str, str], ...]


def _key(labels: dict[str, str], drop: str = "") -> Labels:
    return tuple(sorted((k, v) for k, v in labels.items() if k != drop))


def _start_ns(created: dict[Labels, float], labels: Labels, default_ns: int) -> int:
    seconds = created.get(labels)
    return int(seconds * _NANOS) if seconds is not None else default_ns


def _counter(family: PromMetric, start_ns: int, now_ns: int) -> Metric:
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Metric,
        NumberDataPoint,
        Sum,
    )

    created = {
        _key(s.labels): s.value for s in family.samples if s.name == family.name + "_created"
    }
    points = [
        NumberDataPoint(
            attributes=dict(s.labels),
            start_time_unix_nano=_start_ns(created, _key(s.labels), start_ns),
            time_unix_nano=now_ns,
            value=s.value,
        )
        for s in family.samples
        if s.name == family.name + "_total"
    ]
    data = Sum(points, AggregationTemporality.CUMULATIVE, is_monotonic=True)
    return Metric(family.name + "_total", family.documentation, family.unit, data)


def _gauge(family: PromMetric, start_ns: int, now_ns: int) -> Metric:
    from opentelemetry.sdk.metrics.export import Gauge, Metric, NumberDataPoint

    points = [
        NumberDataPoint(
            attributes=dict(s.labels),
            start_time_unix_nano=start_ns,
            time_unix_nano=now_ns,
            value=s.value,
        )
        for s in family.samples
        if s.name == family.name
    ]
    return Metric(family.name, family.documentation, family.unit, Gauge(points))


def _histogram(family: PromMetric, start_ns: int, now_ns: int) -> Metric:
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Histogram,
        HistogramDataPoint,
        Metric,
    )

    buckets: dict[Labels, list[tuple[float, float]]] = {}
    counts: dict[Labels, float] = {}
    sums: dict[Labels, float] = {}
    created: dict[Labels, float] = {}
    for sample in family.samples:
        suffix = sample.name[len(family.name) :]
        if suffix == "_bucket":
            bound = float(sample.labels["le"])
            buckets.setdefault(_key(sample.labels, "le"), []).append((bound, sample.value))
        elif suffix == "_count":
            counts[_key(sample.labels)] = sample.value
        elif suffix == "_sum":
            sums[_key(sample.labels)] = sample.value
        elif suffix == "_created":
            created[_key(sample.labels)] = sample.value
    points = []
    for labels, cumulative in buckets.items():
        cumulative.sort()
        bounds = [bound for bound, _ in cumulative if not math.isinf(bound)]
        per_bucket: list[int] = []
        below = 0.0
        for _, total in cumulative:
            per_bucket.append(int(total - below))
            below = total
        if len(per_bucket) == len(bounds):  # no +Inf bucket: the overflow is the rest
            per_bucket.append(int(counts.get(labels, below) - below))
        points.append(
            HistogramDataPoint(
                attributes=dict(labels),
                start_time_unix_nano=_start_ns(created, labels, start_ns),
                time_unix_nano=now_ns,
                count=int(counts.get(labels, below)),
                sum=sums.get(labels, 0.0),
                bucket_counts=per_bucket,
                explicit_bounds=bounds,
                # Prometheus keeps no min / max; None leaves the optional OTLP fields unset.
                min=None,  # type: ignore[arg-type]
                max=None,  # type: ignore[arg-type]
            )
        )
    data = Histogram(points, AggregationTemporality.CUMULATIVE)
    return Metric(family.name, family.documentation, family.unit, data)


_CONVERTERS = {"counter": _counter, "gauge": _gauge, "histogram": _histogram}


def registry_metrics(
    families: Iterable[PromMetric], resource: Resource, *, start_ns: int, now_ns: int
) -> MetricsData:
    """``families`` (a registry's ``collect()``) as OpenTelemetry metrics data of ``resource``.

    ``start_ns`` (Unix nanoseconds) starts every series without a ``_created`` sample (the
    gauges, and counters when prometheus_client keeps no creation time); ``now_ns`` stamps
    every point.
    """
    from opentelemetry.sdk.metrics.export import MetricsData, ResourceMetrics, ScopeMetrics
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    metrics = [
        convert(family, start_ns, now_ns)
        for family in families
        if (convert := _CONVERTERS.get(family.type)) is not None
    ]
    scope = ScopeMetrics(InstrumentationScope(_SCOPE, __version__), metrics, schema_url="")
    return MetricsData([ResourceMetrics(resource, [scope], schema_url="")])


class MetricsPush:
    """Exports a registry every ``interval_s`` seconds (and once more when stopped)."""

    def __init__(
        self,
        exporters: Sequence[MetricExporter],
        resource: Resource,
        *,
        interval_s: float,
        timeout_s: float,
    ) -> None:
        self.exporters = tuple(exporters)
        self.resource = resource
        #: Seconds between two exports, and the most one export may take.
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self._start_ns = time.time_ns()

    async def run(
        self, registry: Collector, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Export ``registry`` every interval until cancelled, then a last time (shielded,
        bounded by ``timeout_s``), so a short-lived controller still reports its figures."""
        task_status.started()
        try:
            while True:
                await anyio.sleep(self.interval_s)
                await self.export(registry)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.timeout_s):
                await self.export(registry)

    async def export(self, registry: Collector) -> None:
        """One export of ``registry``: read on the event loop (its gauges read live state),
        sent from a worker thread (the exporters block). A failure is logged, never raised:
        telemetry must not take the controller down."""
        try:
            data = registry_metrics(
                registry.collect(), self.resource, start_ns=self._start_ns, now_ns=time.time_ns()
            )
        except Exception:
            _log.exception("reading the metrics for export failed")
            return
        for exporter in self.exporters:
            try:
                await anyio.to_thread.run_sync(self._send, exporter, data)
            except Exception as exc:
                _log.warning("metric export to %s failed: %s", type(exporter).__name__, exc)

    def _send(self, exporter: MetricExporter, data: MetricsData) -> MetricExportResult:
        return exporter.export(data, timeout_millis=self.timeout_s * 1000)

    def shutdown(self) -> None:
        """Stop the exporters (after :meth:`run` has ended)."""
        for exporter in self.exporters:
            exporter.shutdown()
