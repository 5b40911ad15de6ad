"""The controller's traces and metrics over OTLP, and W3C propagation (docs/tracing.md).

An in-process OTLP/HTTP receiver (``POST /v1/traces`` and ``/v1/metrics``, protobuf, decoded
with ``opentelemetry-proto``) stands in for an OpenTelemetry Collector; ``agentrt controller
serve`` runs as a subprocess configured by the standard ``OTEL_*`` variables in front of a fake
OpenAI server that records every request's headers.
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
from dataclasses import dataclass, field

import anyio
import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentrt.protocol import CallTags
from tests.backends.servers import serve_app
from tests.controller_service.conftest import chat_body, fake_backends, running
from tests.controller_service.fake_openai import FakeState
from tests.ops.processes import AGENTRT, controller_process

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN_ID = "b7ad6b7169203331"
TRACE_HEADERS = {
    "traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN_ID}-01",
    "tracestate": "vendor=opaque-value,other=7",
    "baggage": "tenant.tier=gold,team=search",
}


@dataclass
class Received:
    """What the OTLP receiver got."""

    spans: list[tuple[dict[str, str], SpanProto]] = field(default_factory=list)
    #: metric name -> (resource attributes, metric) of the latest export.
    metrics: dict[str, tuple[dict[str, str], object]] = field(default_factory=dict)
    arrived: anyio.Event = field(default_factory=anyio.Event)


def _attributes(pairs: object) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in pairs}  # type: ignore[attr-defined]


def otlp_receiver(received: Received) -> Starlette:
    """An OTLP/HTTP receiver: protobuf requests in, empty protobuf responses out."""

    async def body(request: Request) -> bytes:
        raw = await request.body()
        return gzip.decompress(raw) if request.headers.get("content-encoding") == "gzip" else raw

    async def traces(request: Request) -> Response:
        assert request.headers["content-type"] == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(await body(request))
        for resource_spans in export.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                received.spans.extend((resource, span) for span in scope_spans.spans)
        received.arrived.set()
        payload = ExportTraceServiceResponse().SerializeToString()
        return Response(payload, media_type="application/x-protobuf")

    async def metrics(request: Request) -> Response:
        export = ExportMetricsServiceRequest.FromString(await body(request))
        for resource_metrics in export.resource_metrics:
            resource = _attributes(resource_metrics.resource.attributes)
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    received.metrics[metric.name] = (resource, metric)
        received.arrived.set()
        payload = ExportMetricsServiceResponse().SerializeToString()
        return Response(payload, media_type="application/x-protobuf")

    return Starlette(
        routes=[
            Route("/v1/traces", traces, methods=["POST"]),
            Route("/v1/metrics", metrics, methods=["POST"]),
        ]
    )


def clean_env(**otel: str) -> dict[str, str]:
    """This process' environment without any ``OTEL_*`` or controller variable, plus
    ``otel``."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTRT_CONTROLLER_"))
    }
    return {**env, **otel}


async def test_controller_serve_exports_spans_and_metrics_over_otlp() -> None:
    """With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, the controller's span of a call reaches the
    receiver as a child of the client's span (same trace), with the configured service name;
    the backend request carries the controller's span as its parent plus the client's
    ``tracestate`` and ``baggage``; the registry's metrics arrive as OTLP metrics."""
    received = Received()
    state = FakeState()
    async with serve_app(otlp_receiver(received)) as collector, fake_backends(state) as urls:
        env = clean_env(
            OTEL_EXPORTER_OTLP_ENDPOINT=collector,
            OTEL_SERVICE_NAME="controller-under-test",
            OTEL_RESOURCE_ATTRIBUTES="deployment.environment=test",
            OTEL_BSP_SCHEDULE_DELAY="50",
            OTEL_METRIC_EXPORT_INTERVAL="200",
        )
        async with controller_process([urls[0]], env=env, kind=None) as (process, url):
            tags = CallTags(session_id="s", program_id="p-traced", thread_id="main", node_id="n")
            async with httpx.AsyncClient(timeout=20) as http:
                answer = await http.post(
                    url + "/v1/chat/completions",
                    json=chat_body(),
                    headers={**tags.to_headers(), **TRACE_HEADERS},
                )
            assert answer.status_code == 200, answer.text
            with anyio.fail_after(20):
                while not received.spans or "agentrt_controller_requests_total" not in (
                    received.metrics
                ):
                    received.arrived = anyio.Event()
                    await received.arrived.wait()
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(20):
                assert await process.wait() == 0

    ((resource, span),) = received.spans
    assert span.name == "chat tiny"
    assert span.kind == SpanProto.SPAN_KIND_SERVER
    assert span.trace_id.hex() == TRACE_ID
    assert span.parent_span_id.hex() == CLIENT_SPAN_ID
    assert span.trace_state == TRACE_HEADERS["tracestate"]
    assert resource["service.name"] == "controller-under-test"
    assert resource["deployment.environment"] == "test"
    span_attributes = _attributes(span.attributes)
    assert span_attributes["agentrt.program_id"] == "p-traced"
    assert not any("hello" in value for value in span_attributes.values())  # no prompt text

    (sent,) = state.headers
    assert sent["traceparent"] == f"00-{TRACE_ID}-{span.span_id.hex()}-01"
    assert sent["tracestate"] == TRACE_HEADERS["tracestate"]
    assert sent["baggage"] == TRACE_HEADERS["baggage"]

    metric_resource, requests = received.metrics["agentrt_controller_requests_total"]
    assert metric_resource["service.name"] == "controller-under-test"
    points = {
        tuple(sorted(_attributes(p.attributes).items())): p.as_double
        for p in requests.sum.data_points  # type: ignore[attr-defined]
    }
    assert points[(("endpoint", "chat"), ("status", "200"))] == 1.0
    assert requests.sum.is_monotonic  # type: ignore[attr-defined]
    _, e2e = received.metrics["agentrt_controller_call_e2e_seconds"]
    (e2e_point,) = e2e.histogram.data_points  # type: ignore[attr-defined]
    assert e2e_point.count == 1 and sum(e2e_point.bucket_counts) == 1
    assert len(e2e_point.bucket_counts) == len(e2e_point.explicit_bounds) + 1


async def test_without_a_provider_the_client_context_goes_to_the_backend_unchanged() -> None:
    """A controller with no tracer provider still hands the client's ``traceparent``,
    ``tracestate`` and ``baggage`` to the backend."""
    state = FakeState()
    tags = CallTags(session_id="s", program_id="p", thread_id="main", node_id="n")
    async with running(state) as svc:
        answer = await svc.chat(headers={**tags.to_headers(), **TRACE_HEADERS})
    assert answer.status_code == 200
    (sent,) = state.headers
    assert {name: sent[name] for name in TRACE_HEADERS} == TRACE_HEADERS


@pytest.mark.parametrize("name", sorted(TRACE_HEADERS))
async def test_without_a_provider_each_trace_header_alone_goes_to_the_backend(name: str) -> None:
    """Whichever one of the W3C headers a client sends alone reaches the backend (a call
    without any skips the propagators: nothing to read, nothing to forward)."""
    state = FakeState()
    tags = CallTags(session_id="s", program_id="p", thread_id="main", node_id="n")
    async with running(state) as svc:
        with_one = await svc.chat(headers={**tags.to_headers(), name: TRACE_HEADERS[name]})
        without = await svc.chat(headers=tags.to_headers())
    assert with_one.status_code == without.status_code == 200
    sent_with_one, sent_without = state.headers
    if name != "tracestate":  # a tracestate without its traceparent means nothing: dropped
        assert sent_with_one[name] == TRACE_HEADERS[name]
    assert not TRACE_HEADERS.keys() & sent_without.keys()


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "unknown exporter 'zipkin'"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            "OTLP over http/protobuf only",
        ),
    ],
)
def test_a_bad_otel_variable_stops_serve_before_it_binds(
    variables: dict[str, str], message: str
) -> None:
    """A setting the controller cannot honour is a start-up error (exit 2), not a silent
    fallback."""
    done = subprocess.run(
        [*AGENTRT, "controller", "serve", "--port", "0", "--backend", "http://127.0.0.1:9"],
        env=clean_env(**variables),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "agentrt controller on" not in done.stderr


@pytest.mark.parametrize("header", ["tracestate", "baggage"])
async def test_a_non_ascii_trace_header_is_a_400(header: str) -> None:
    """Trace headers are forwarded, so like every forwarded header they must be ASCII
    (docs/security.md); the call never reaches the backend."""
    state = FakeState()
    async with running(state) as svc:
        answer = await svc.chat(headers={header: "team=b\u00e9ta".encode("latin-1")})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == header
    assert state.headers == []
