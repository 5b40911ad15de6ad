"""What the ``OTEL_*`` variables make ``agentrt controller serve`` export, and how its Prometheus
registry becomes OpenTelemetry metrics (docs/tracing.md, "The controller")."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics.export import Gauge, Histogram, Sum
from opentelemetry.sdk.resources import Resource

import agentrt
from agentrt.errors import ConfigError
from agentrt_controller.service.telemetry.otel import ExportPlan, build_telemetry, export_plan
from agentrt_controller.service.telemetry.otlp_metrics import registry_metrics
from agentrt_controller.service.telemetry.prometheus import Registry

pytestmark = pytest.mark.timeout(10)

ENDPOINT = "http://collector:4318"


@pytest.mark.parametrize(
    ("environ", "traces", "metrics"),
    [
        ({}, (), ()),  # nothing set: nothing exported, no connection attempted
        ({"OTEL_SERVICE_NAME": "ctl"}, (), ()),  # a name alone exports nothing
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, ("otlp",), ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT + "/v1/traces"}, ("otlp",), ()),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": ENDPOINT + "/v1/metrics"}, (), ("otlp",)),
        ({"OTEL_TRACES_EXPORTER": "console"}, ("console",), ()),
        (
            {"OTEL_TRACES_EXPORTER": "otlp, console", "OTEL_METRICS_EXPORTER": "OTLP"},
            ("otlp", "console"),
            ("otlp",),
        ),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_METRICS_EXPORTER": "none"}, ("otlp",), ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "TRUE"}, (), ()),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            ("otlp",),
            ("otlp",),
        ),
        # A grpc default does not matter for a signal that goes to the console only.
        (
            {"OTEL_TRACES_EXPORTER": "console", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            ("console",),
            (),
        ),
    ],
)
def test_export_plan(
    environ: dict[str, str], traces: tuple[str, ...], metrics: tuple[str, ...]
) -> None:
    plan = export_plan(environ)
    assert (plan.traces, plan.metrics) == (traces, metrics)
    assert plan.exports == bool(traces or metrics)


def test_metric_interval_and_timeout_come_from_the_standard_variables() -> None:
    plan = export_plan(
        {
            "OTEL_METRICS_EXPORTER": "console",
            "OTEL_METRIC_EXPORT_INTERVAL": "250",
            "OTEL_METRIC_EXPORT_TIMEOUT": "1500",
        }
    )
    assert (plan.metric_interval_s, plan.metric_timeout_s) == (0.25, 1.5)
    assert (ExportPlan().metric_interval_s, ExportPlan().metric_timeout_s) == (60.0, 30.0)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "unknown exporter 'jaeger'"),
        ({"OTEL_METRICS_EXPORTER": "otlp,none"}, "none cannot be listed with exporters"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL='grpc'",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
            },
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='http/json'",
        ),
        (
            {"OTEL_METRICS_EXPORTER": "console", "OTEL_METRIC_EXPORT_INTERVAL": "0"},
            "OTEL_METRIC_EXPORT_INTERVAL='0'",
        ),
        (
            {"OTEL_METRICS_EXPORTER": "console", "OTEL_METRIC_EXPORT_TIMEOUT": "soon"},
            "positive number of milliseconds",
        ),
    ],
)
def test_a_setting_the_controller_cannot_honour_is_an_error(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        export_plan(environ)


def test_no_plan_builds_no_telemetry() -> None:
    assert build_telemetry(export_plan({})) is None


def test_the_registry_becomes_otel_metrics_with_the_same_names_and_values() -> None:
    registry = Registry()
    calls = registry.counter("agentrt_controller_requests_total", "Answers", ("endpoint",))
    calls.inc(3.0, "chat")
    queued = registry.gauge("agentrt_controller_queue_length", "Queued calls", ("level",))
    queued.set(2.0, "0")
    e2e = registry.histogram("agentrt_controller_call_e2e_seconds", "E2E", (0.1, 1.0))
    for seconds in (0.05, 0.5, 0.7, 5.0):
        e2e.observe(seconds)
    resource = Resource({"service.name": "ctl"})
    data = registry_metrics(registry.collect(), resource, start_ns=10, now_ns=20)
    ((scope,),) = [rm.scope_metrics for rm in data.resource_metrics]
    assert data.resource_metrics[0].resource is resource
    assert scope.scope.name == "agentrt.controller"
    metrics = {m.name: m for m in scope.metrics}
    assert set(metrics) == {
        "agentrt_controller_requests_total",
        "agentrt_controller_queue_length",
        "agentrt_controller_call_e2e_seconds",
    }
    counter = metrics["agentrt_controller_requests_total"].data
    assert isinstance(counter, Sum) and counter.is_monotonic
    (point,) = counter.data_points
    assert (dict(point.attributes or {}), point.value) == ({"endpoint": "chat"}, 3.0)
    assert point.start_time_unix_nano > 10 and point.time_unix_nano == 20  # from _created
    gauge = metrics["agentrt_controller_queue_length"].data
    assert isinstance(gauge, Gauge)
    assert [(dict(p.attributes or {}), p.value) for p in gauge.data_points] == [({"level": "0"}, 2)]
    histogram = metrics["agentrt_controller_call_e2e_seconds"].data
    assert isinstance(histogram, Histogram)
    (bars,) = histogram.data_points
    assert list(bars.explicit_bounds) == [0.1, 1.0]
    assert list(bars.bucket_counts) == [1, 2, 1]  # per bucket, not Prometheus' cumulative
    assert (bars.count, bars.sum) == (4, pytest.approx(6.25))


@pytest.mark.parametrize(
    ("environ", "service_name"),
    [
        ({}, "agentrt-controller"),
        ({"OTEL_SERVICE_NAME": "ctl-eu"}, "ctl-eu"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=ctl-us,team=infra"}, "ctl-us"),
    ],
)
def test_the_resource_names_the_controller_unless_the_environment_does(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], service_name: str
) -> None:
    """``Resource.create`` reads the variables itself; the default name fills in only when
    neither names the service."""
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    telemetry = build_telemetry(ExportPlan(traces=("console",), metrics=("console",)))
    assert telemetry is not None
    try:
        assert telemetry.tracer_provider is not None and telemetry.metrics is not None
        for resource in (telemetry.tracer_provider.resource, telemetry.metrics.resource):
            assert resource.attributes["service.name"] == service_name
            assert resource.attributes["service.version"] == agentrt.__version__
    finally:
        telemetry.shutdown()
