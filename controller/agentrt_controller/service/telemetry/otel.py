"""Telemetry export of ``agentrt controller serve``, configured by the standard ``OTEL_*``
variables (docs/tracing.md, "The controller").

Nothing is exported unless the environment asks for it, so a controller started without any
``OTEL_*`` variable never tries to reach a collector. A signal (traces, metrics) is exported
when

* ``OTEL_{TRACES,METRICS}_EXPORTER`` names exporters (``otlp``, ``console``; a comma-separated
  list; ``none`` for none), or
* that variable is unset and an OTLP endpoint is (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT``): then ``otlp``.

``OTEL_SDK_DISABLED=true`` turns everything off. Which of the variables decide *whether* to
export is read here (:func:`export_plan`, pure); everything else is left to the OpenTelemetry
SDK's own handling of its variables: the OTLP/HTTP exporters read their endpoint, headers,
timeout, compression and certificates; ``Resource.create`` reads ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (``service.name`` defaults to ``agentrt-controller``); the tracer
provider reads ``OTEL_TRACES_SAMPLER``; the batch span processor ``OTEL_BSP_*``. Only OTLP over
HTTP/protobuf ships with the controller: another ``OTEL_EXPORTER_OTLP_PROTOCOL`` is a
:class:`~agentrt.errors.ConfigError`, as is an unknown exporter name.

Metrics are the controller's Prometheus registry (the same names, labels and values as
``/metrics``), pushed every ``OTEL_METRIC_EXPORT_INTERVAL`` ms by
:class:`~agentrt_controller.service.telemetry.otlp_metrics.MetricsPush`. The providers are
built for the CLI's process and handed to the app explicitly; nothing is installed globally.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentrt import __version__
from agentrt.errors import ConfigError
from agentrt_controller.service.telemetry.otlp_metrics import MetricsPush

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["ControllerTelemetry", "ExportPlan", "build_telemetry", "export_plan"]

#: The exporters a signal can name (``none`` aside).
EXPORTERS = ("otlp", "console")
#: ``service.name`` when neither ``OTEL_SERVICE_NAME`` nor ``OTEL_RESOURCE_ATTRIBUTES`` sets one.
DEFAULT_SERVICE_NAME = "agentrt-controller"
_SIGNALS = ("traces", "metrics")


@dataclass(frozen=True, slots=True)
class ExportPlan:
    """Which exporters each signal goes to (empty: not exported)."""

    traces: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    #: ``OTEL_METRIC_EXPORT_INTERVAL``: seconds between two metric exports.
    metric_interval_s: float = 60.0
    #: ``OTEL_METRIC_EXPORT_TIMEOUT``: seconds one metric export may take.
    metric_timeout_s: float = 30.0

    @property
    def exports(self) -> bool:
        """Whether anything is exported."""
        return bool(self.traces or self.metrics)


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _exporters(environ: Mapping[str, str], signal: str) -> tuple[str, ...]:
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    value = environ.get(variable, "").strip()
    if value:
        names = tuple(dict.fromkeys(n.strip().lower() for n in value.split(",") if n.strip()))
        unknown = [n for n in names if n not in EXPORTERS and n != "none"]
        if unknown:
            raise ConfigError(
                f"{variable}={value!r}: unknown exporter {unknown[0]!r} (the controller exports "
                f"to {', '.join(EXPORTERS)} or none)"
            )
        if "none" in names:
            if len(names) > 1:
                raise ConfigError(f"{variable}={value!r}: none cannot be listed with exporters")
            return ()
    else:
        endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
        names = ("otlp",) if any(environ.get(name, "").strip() for name in endpoints) else ()
    if "otlp" in names:
        protocols = (f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
        for name in protocols:
            protocol = environ.get(name, "").strip()
            if protocol:
                if protocol != "http/protobuf":
                    raise ConfigError(
                        f"{name}={protocol!r}: the controller exports OTLP over http/protobuf "
                        "only (point it at the collector's HTTP port, 4318)"
                    )
                break
    return names


def _milliseconds(environ: Mapping[str, str], variable: str, default_ms: float) -> float:
    value = environ.get(variable, "").strip()
    if not value:
        return default_ms / 1000
    try:
        milliseconds = float(value)
    except ValueError:
        milliseconds = -1.0
    if not milliseconds > 0 or milliseconds == float("inf"):
        raise ConfigError(f"{variable}={value!r}: expected a positive number of milliseconds")
    return milliseconds / 1000


def export_plan(environ: Mapping[str, str]) -> ExportPlan:
    """What ``environ`` asks the controller to export. Raises :class:`ConfigError` for an
    unknown exporter, a protocol other than ``http/protobuf`` or a bad interval."""
    if _true(environ.get("OTEL_SDK_DISABLED")):
        return ExportPlan()
    traces, metrics = (_exporters(environ, signal) for signal in _SIGNALS)
    return ExportPlan(
        traces=traces,
        metrics=metrics,
        metric_interval_s=_milliseconds(environ, "OTEL_METRIC_EXPORT_INTERVAL", 60_000),
        metric_timeout_s=_milliseconds(environ, "OTEL_METRIC_EXPORT_TIMEOUT", 30_000),
    )


@dataclass(slots=True)
class ControllerTelemetry:
    """The controller's exporting providers (each None when its signal is not exported)."""

    tracer_provider: TracerProvider | None
    metrics: MetricsPush | None

    def shutdown(self) -> None:
        """Flush the spans still queued and stop the exporters (blocks up to their timeouts)."""
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.metrics is not None:
            self.metrics.shutdown()


def _resource() -> Resource:
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource

    # Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; attributes passed
    # to it would override them, so the default name is merged only when neither set one.
    resource = Resource.create({SERVICE_VERSION: __version__})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


def _span_exporter(name: str) -> SpanExporter:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout...: OTEL_EXPORTER_OTLP_*


def _metric_exporter(name: str) -> MetricExporter:
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()


def build_telemetry(plan: ExportPlan) -> ControllerTelemetry | None:
    """The providers ``plan`` asks for; None when it exports nothing (no SDK is imported)."""
    if not plan.exports:
        return None
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = _resource()
    tracer_provider: TracerProvider | None = None
    if plan.traces:
        tracer_provider = TracerProvider(resource=resource)
        for name in plan.traces:
            tracer_provider.add_span_processor(BatchSpanProcessor(_span_exporter(name)))
    push: MetricsPush | None = None
    if plan.metrics:
        push = MetricsPush(
            [_metric_exporter(name) for name in plan.metrics],
            resource,
            interval_s=plan.metric_interval_s,
            timeout_s=plan.metric_timeout_s,
        )
    return ControllerTelemetry(tracer_provider, push)
