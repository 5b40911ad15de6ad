"""OpenTelemetry instruments of one runtime (the OpenTelemetry GenAI semantic conventions).

Which providers a runtime uses (docs/tracing.md, "Which providers the SDK uses"):

1. the ones passed in ``RuntimeConfig(tracer_provider=..., meter_provider=...)``, always;
2. otherwise the globally configured ones (``opentelemetry.trace.set_tracer_provider`` /
   ``metrics.set_meter_provider``, as Logfire, Langfuse and ``opentelemetry-instrument`` do).
   A global tracer provider counts when it is set before the runtime is built; the global
   meter provider is the API's proxy, so one set later still receives the SDK's metrics;
3. otherwise none: every instrument is a no-op.

Nothing is ever installed globally. Trace context (``traceparent``, ``tracestate``,
``baggage``) goes on the wire through the globally configured propagator
(``opentelemetry.propagate``; W3C trace context + baggage unless ``OTEL_PROPAGATORS`` says
otherwise), never formatted by hand.

Span names and attributes follow the GenAI conventions (development status):
``invoke_workflow {name}`` per program, ``chat {model}`` per LLM call, ``execute_tool {name}``
per tool call, plus our ``agentrt.*`` ids (docs/sdk.md, docs/tracing.md).

Only ``opentelemetry-api`` is a dependency of the SDK. :func:`make_telemetry`, for users who
want the SDK to export, needs the OpenTelemetry SDK (``pip install 'agentrt[otel]'``) and, for
OTLP, its exporter (``pip install 'agentrt[otlp]'``); it is imported only there. It also writes
span files, OTLP/JSON lines (``make_telemetry("file:PATH")``, :mod:`agentrt.runtime.span_file`),
and reads the standard ``OTEL_*`` variables when no exporter is named.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.metrics import Histogram, MeterProvider
from opentelemetry.trace import (
    NoOpTracerProvider,
    ProxyTracerProvider,
    Span,
    Tracer,
    TracerProvider,
)

from agentrt.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

__all__ = [
    "ATTR_NODE_ID",
    "ATTR_NODE_PARENT_IDS",
    "ATTR_PROGRAM_ID",
    "ATTR_SESSION_ID",
    "ATTR_THREAD_ID",
    "Instruments",
    "Telemetry",
    "global_tracer_provider",
    "inject_trace_context",
    "make_telemetry",
]

ATTR_SESSION_ID = "agentrt.session.id"
ATTR_PROGRAM_ID = "agentrt.program.id"
ATTR_THREAD_ID = "agentrt.thread.id"
ATTR_NODE_ID = "agentrt.node.id"
#: The node's DAG parents (``Node.parent_ids``, a list of node ids; empty for a root node) on
#: ``chat`` and ``execute_tool`` spans, so the DAG can be rebuilt from spans alone.
ATTR_NODE_PARENT_IDS = "agentrt.node.parent_ids"

#: Bucket boundaries (seconds) for durations from a few ms to many minutes.
_DURATION_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
    163.84,
    327.68,
)
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)


class Instruments:
    """Tracer and metric instruments, built once per runtime."""

    def __init__(
        self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None
    ) -> None:
        tp = tracer_provider if tracer_provider is not None else global_tracer_provider()
        #: False without a tracer provider: callers skip building span attributes.
        self.tracing = tp is not None
        if tp is None:
            tp = NoOpTracerProvider()
        # The global meter provider is a proxy until one is set: no-op until then.
        mp = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        self.tracer: Tracer = tp.get_tracer("agentrt")
        meter = mp.get_meter("agentrt")
        #: GenAI: duration of one client operation (LLM call), seconds.
        self.operation_duration: Histogram = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        #: GenAI: tokens per call, split by gen_ai.token.type (input / output).
        self.token_usage: Histogram = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        #: Program end-to-end latency, seconds.
        self.program_duration: Histogram = meter.create_histogram(
            "agentrt.program.duration",
            unit="s",
            description="End-to-end latency of a program",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        #: Per-program time by phase (agentrt.phase = llm_wait, llm_execution, tool, human),
        #: summed over the program's nodes (parallel nodes add up), seconds.
        self.program_phase: Histogram = meter.create_histogram(
            "agentrt.program.phase.duration",
            unit="s",
            description="Time a program spent per phase, summed over its nodes",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._chat_attrs: dict[tuple[str, str, str | None, str | None], _ChatAttrs] = {}
        #: Tool call duration, seconds (attribute gen_ai.tool.name).
        self.tool_duration: Histogram = meter.create_histogram(
            "agentrt.tool.duration",
            unit="s",
            description="Duration of a tool call",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )

    def chat_attrs(
        self, provider: str, model: str, response_model: str | None, error_type: str | None
    ) -> _ChatAttrs:
        """Metric attribute sets of a chat call (cached: built once per distinct key)."""
        key = (provider, model, response_model, error_type)
        found = self._chat_attrs.get(key)
        if found is None:
            base: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider,
                "gen_ai.request.model": model,
            }
            if response_model:
                base["gen_ai.response.model"] = response_model
            if error_type:
                base["error.type"] = error_type
            found = _ChatAttrs(
                base,
                {**base, "gen_ai.token.type": "input"},
                {**base, "gen_ai.token.type": "output"},
            )
            if len(self._chat_attrs) < 4096:  # bounded: model names come from callers
                self._chat_attrs[key] = found
        return found


@dataclass(frozen=True, slots=True)
class _ChatAttrs:
    operation: dict[str, Any]
    input_tokens: dict[str, Any]
    output_tokens: dict[str, Any]


def global_tracer_provider() -> TracerProvider | None:
    """The globally configured tracer provider; None when none was set (the API's default
    proxy, or an explicit no-op provider)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, ProxyTracerProvider | NoOpTracerProvider):
        return None
    return provider


def inject_trace_context(carrier: MutableMapping[str, str], span: Span) -> None:
    """Write the trace context of ``span`` into ``carrier`` (HTTP headers) through the global
    propagator: ``traceparent`` and ``tracestate`` of ``span`` and the current context's
    ``baggage``. An invalid (no-op) ``span`` leaves the current span in charge, so a caller's
    own span still reaches the server; with neither, only baggage (if any) is written."""
    context = trace.set_span_in_context(span) if span.get_span_context().is_valid else None
    propagate.inject(carrier, context=context)


@dataclass(slots=True)
class Telemetry:
    """SDK providers made by :func:`make_telemetry`; pass them to ``RuntimeConfig``."""

    tracer_provider: SdkTracerProvider
    meter_provider: SdkMeterProvider

    def shutdown(self) -> None:
        """Flush and stop the exporters."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


#: The exporters :func:`make_telemetry` knows by name (``file:PATH`` besides).
_NAMED_EXPORTERS = ("console", "otlp", "none")


def make_telemetry(
    exporter: str | None = None,
    *,
    endpoint: str | None = None,
    service_name: str | None = None,
    export_interval_s: float | None = None,
) -> Telemetry:
    """Build SDK tracer and meter providers that export spans and metrics.

    ``exporter``: ``console`` (stdout, the SDK's own text format), ``otlp`` (OTLP/HTTP to a
    collector), ``file:PATH`` (spans appended to ``PATH`` as OTLP/JSON lines, the OpenTelemetry
    file exporter's format, readable by ``agentrt trace export`` and ``agentrt timeline``;
    ``file:///abs/path`` too; :mod:`agentrt.runtime.span_file`) or ``none``. ``None`` = the
    standard environment variables (docs/tracing.md, "Span files"): ``OTEL_TRACES_EXPORTER``
    (its first entry; ``file:PATH`` there too), else ``console``. Metrics go where
    ``OTEL_METRICS_EXPORTER`` says (``console``, ``otlp``, ``none``), else with the spans for
    ``console`` and ``otlp``, else nowhere (a span file holds spans only).

    ``endpoint``: the collector's base URL for ``otlp``; ``None`` = the OTLP exporter's own
    environment (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` ...),
    else ``http://localhost:4318``. ``service_name``: ``None`` = ``OTEL_SERVICE_NAME``, else
    ``agentrt`` (``OTEL_RESOURCE_ATTRIBUTES`` is read too). ``export_interval_s``: seconds
    between metric exports; ``None`` = ``OTEL_METRIC_EXPORT_INTERVAL`` (milliseconds), else 10.

    Needs the OpenTelemetry SDK (``pip install 'agentrt[otel]'``); ``otlp`` also needs its
    exporter (``pip install 'agentrt[otlp]'``). The providers are returned, never installed
    globally. Raises ``ConfigError`` for an unknown exporter (naming the variable it came
    from), a span file that cannot be opened, or a missing extra.
    """
    try:
        from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            MetricExporter,
            MetricReader,
            PeriodicExportingMetricReader,
        )
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError as exc:
        raise ConfigError(
            "exporting telemetry needs the OpenTelemetry SDK: pip install 'agentrt[otel]'"
        ) from exc

    traces = _exporter_choice(exporter, "OTEL_TRACES_EXPORTER", default="console")
    metrics_default = traces if traces in ("console", "otlp") else "none"
    metrics_choice = _exporter_choice(None, "OTEL_METRICS_EXPORTER", default=metrics_default)
    if metrics_choice.startswith("file:"):
        raise ConfigError("OTEL_METRICS_EXPORTER must be console, otlp or none (no metric file)")
    span_exporter: SpanExporter | None = None
    metric_exporter: MetricExporter | None = None
    if traces == "console":
        span_exporter = ConsoleSpanExporter()
    elif traces.startswith("file:"):
        span_exporter = _span_file_exporter(traces)
    if metrics_choice == "console":
        metric_exporter = ConsoleMetricExporter()
    if "otlp" in (traces, metrics_choice):
        otlp_spans, otlp_metrics = _otlp_exporters(endpoint)
        span_exporter = otlp_spans if traces == "otlp" else span_exporter
        metric_exporter = otlp_metrics if metrics_choice == "otlp" else metric_exporter
    if service_name is None and os.environ.get("OTEL_SERVICE_NAME", "").strip():
        resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    else:
        resource = Resource.create({"service.name": service_name or "agentrt"})
    tracer_provider = SdkTracerProvider(resource=resource)
    if span_exporter is not None:
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    readers: list[MetricReader] = []
    if metric_exporter is not None:
        interval_s = _export_interval_s() if export_interval_s is None else export_interval_s
        readers.append(
            PeriodicExportingMetricReader(metric_exporter, export_interval_millis=interval_s * 1000)
        )
    meter_provider = SdkMeterProvider(resource=resource, metric_readers=readers)
    return Telemetry(tracer_provider, meter_provider)


def _exporter_choice(given: str | None, variable: str, *, default: str) -> str:
    """``given``, else the first entry of the environment's ``variable``, else ``default``;
    checked: one of :data:`_NAMED_EXPORTERS` or ``file:PATH``."""
    source = "exporter"
    if given is None:
        entries = [e.strip() for e in os.environ.get(variable, "").split(",") if e.strip()]
        if not entries:
            return default
        given, source = entries[0], variable
    if given in _NAMED_EXPORTERS or (given.startswith("file:") and _file_path(given)):
        return given
    raise ConfigError(f"{source} must be console, otlp, none or file:PATH, got {given!r}")


def _file_path(choice: str) -> str:
    """The path of ``file:PATH`` or ``file:///abs/path`` ("" when none)."""
    rest = choice.removeprefix("file:")
    return rest.removeprefix("//") if rest.startswith("///") else rest


def _span_file_exporter(choice: str) -> Any:
    from agentrt.runtime.span_file import OtlpJsonFileSpanExporter

    path = _file_path(choice)
    try:
        return OtlpJsonFileSpanExporter(path)
    except OSError as exc:
        raise ConfigError(f"cannot open the span file {path}: {exc}") from exc


def _otlp_exporters(endpoint: str | None) -> tuple[Any, Any]:
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # type: ignore[import-not-found,unused-ignore]
            OTLPMetricExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
            OTLPSpanExporter,
        )
    except ImportError as exc:
        raise ConfigError("the otlp exporter needs: pip install 'agentrt[otlp]'") from exc
    if endpoint is None:  # the exporters read OTEL_EXPORTER_OTLP_*ENDPOINT themselves
        return OTLPSpanExporter(), OTLPMetricExporter()
    base = endpoint.rstrip("/")
    return OTLPSpanExporter(endpoint=f"{base}/v1/traces"), OTLPMetricExporter(
        endpoint=f"{base}/v1/metrics"
    )


def _export_interval_s() -> float:
    raw = os.environ.get("OTEL_METRIC_EXPORT_INTERVAL", "").strip()
    if not raw:
        return 10.0
    try:
        interval_ms = float(raw)
    except ValueError:
        interval_ms = -1.0
    if not interval_ms > 0:
        raise ConfigError(f"OTEL_METRIC_EXPORT_INTERVAL must be milliseconds > 0, got {raw!r}")
    return interval_ms / 1000.0
