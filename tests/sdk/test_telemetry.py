"""Spans (GenAI semantic conventions) and metrics, captured in memory, checked as a tree."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
from opentelemetry import propagate, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentrt
from agentrt import Runtime, RuntimeConfig, tool
from agentrt.protocol import CallTags

from .fakeserver import FakeServer, FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@tool
async def lookup(word: str) -> str:
    """Look a word up (asks the LLM: a nested call)."""
    reply = await agentrt.chat([{"role": "user", "content": f"define {word}"}])
    return reply.choices[0].message.content or ""


def providers() -> tuple[TracerProvider, InMemorySpanExporter, MeterProvider, InMemoryMetricReader]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    return tracer_provider, exporter, MeterProvider(metric_readers=[reader]), reader


def tree(spans: tuple[ReadableSpan, ...]) -> list[tuple[str, str]]:
    """(span name, parent span name) pairs, in end order."""
    names = {s.context.span_id: s.name for s in spans}
    return [(s.name, names.get(s.parent.span_id, "") if s.parent else "") for s in spans]


async def test_span_tree_and_genai_attributes(server: FakeServer, state: FakeState) -> None:
    tracer_provider, exporter, meter_provider, reader = providers()
    state.queue_ms, state.delay_s = 4.0, 0.02  # calls last longer than their queue time
    config = RuntimeConfig(
        base_url=server.base_url,
        model="m1",
        controller="off",
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )
    async with Runtime(config) as rt, rt.program("agent") as prog:
        await agentrt.chat([{"role": "user", "content": "secret prompt"}], temperature=0.5)
        assert await lookup("x") == "ok"
    spans = exporter.get_finished_spans()
    assert tree(spans) == [
        ("chat m1", "invoke_workflow agent"),
        ("chat m1", "execute_tool lookup"),
        ("execute_tool lookup", "invoke_workflow agent"),
        ("invoke_workflow agent", ""),
    ]
    chat, nested, tool_span, root = spans
    attrs: dict[str, Any] = dict(chat.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "m1"
    assert attrs["gen_ai.request.temperature"] == 0.5
    assert attrs["gen_ai.conversation.id"] == prog.id
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (11, 7)
    assert attrs["agentrt.program.id"] == prog.id and attrs["agentrt.node.id"] == "main:0"
    assert attrs["agentrt.session.id"] == rt.session_id and attrs["agentrt.thread.id"] == "main"
    assert not any("secret" in str(v) for s in spans for v in (s.attributes or {}).values())
    tool_attrs = dict(tool_span.attributes or {})
    assert tool_attrs["gen_ai.tool.name"] == "lookup"
    assert tool_attrs["gen_ai.operation.name"] == "execute_tool"
    assert dict(nested.attributes or {})["agentrt.node.id"] == "main:2"
    assert prog.nodes["main:2"].parent_ids == ("main:1",)  # nested call hangs off the tool
    # Each request carries its own span as the W3C parent.
    sent = trace.get_current_span(propagate.extract(state.requests[0].headers)).get_span_context()
    assert (sent.trace_id, sent.span_id, sent.trace_flags) == (
        chat.context.trace_id,
        chat.context.span_id,
        chat.context.trace_flags,
    )
    assert CallTags.from_headers(state.requests[0].headers) is not None
    assert root.context.trace_id == chat.context.trace_id

    data = reader.get_metrics_data()
    assert data is not None
    metrics = {
        m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    assert {
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "agentrt.program.duration",
        "agentrt.program.phase.duration",
        "agentrt.tool.duration",
    } <= set(metrics)
    duration_points = list(metrics["gen_ai.client.operation.duration"].data.data_points)
    assert sum(p.count for p in duration_points) == 2  # type: ignore[attr-defined]
    phases = {
        (p.attributes or {})["agentrt.phase"]: p.sum  # type: ignore[union-attr]
        for p in metrics["agentrt.program.phase.duration"].data.data_points
    }
    assert phases["llm_wait"] == pytest.approx(0.008)  # the server's queue time, 2 calls
    assert phases["tool"] > 0 and phases["llm_execution"] > 0
    assert prog.phase_s["llm_wait"] == pytest.approx(0.008)
    tracer_provider.shutdown()
    meter_provider.shutdown()


async def test_contents_recorded_only_when_enabled(server: FakeServer, state: FakeState) -> None:
    tracer_provider, exporter, meter_provider, _ = providers()
    config = RuntimeConfig(
        base_url=server.base_url,
        model="m1",
        controller="off",
        tracer_provider=tracer_provider,
        capture_content=True,
    )
    async with Runtime(config):
        await agentrt.chat([{"role": "user", "content": "secret prompt"}])
        await lookup("word")
    spans = exporter.get_finished_spans()
    by_name = {s.name: dict(s.attributes or {}) for s in spans}
    first_chat = dict(spans[0].attributes or {})
    assert "secret prompt" in str(first_chat["gen_ai.input.messages"])
    assert '"content": "ok"' in str(first_chat["gen_ai.output.messages"])
    assert by_name["execute_tool lookup"]["gen_ai.tool.call.arguments"] == '{"word":"word"}'
    assert by_name["execute_tool lookup"]["gen_ai.tool.call.result"] == '"ok"'
    tracer_provider.shutdown()
    meter_provider.shutdown()


def test_make_telemetry_builds_console_providers_without_globals() -> None:
    from opentelemetry import trace

    before = trace.get_tracer_provider()
    telemetry = agentrt.make_telemetry("console")
    assert trace.get_tracer_provider() is before
    telemetry.shutdown()
    with pytest.raises(agentrt.ConfigError):
        agentrt.make_telemetry("carrier-pigeon")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exporter", "blocked", "extra"),
    [
        ("console", "opentelemetry.sdk.trace", "agentrt[otel]"),
        ("otlp", "opentelemetry.exporter.otlp.proto.http.trace_exporter", "agentrt[otlp]"),
    ],
)
def test_make_telemetry_without_the_extra_names_it(
    monkeypatch: pytest.MonkeyPatch, exporter: Any, blocked: str, extra: str
) -> None:
    """The OTel SDK and the OTLP exporter are extras: without them ``make_telemetry`` raises
    our ``ConfigError`` naming the extra to install (a None entry makes the import fail)."""
    monkeypatch.setitem(sys.modules, blocked, None)
    with pytest.raises(agentrt.ConfigError, match=re.escape(f"pip install '{extra}'")):
        agentrt.make_telemetry(exporter)


async def test_calls_left_no_time_end_their_spans_as_cancelled(server: FakeServer) -> None:
    """An SDK call and a raw-client call made after the deadline are never sent; both
    nodes are cancelled and both ``chat`` spans end (with the error status)."""
    import time

    tracer_provider, exporter, _, _ = providers()
    config = RuntimeConfig(
        base_url=server.base_url, model="m1", controller="off", tracer_provider=tracer_provider
    )
    messages = [{"role": "user", "content": "hi"}]
    body = {"model": "m1", "messages": messages}
    errors: list[BaseException] = []
    async with (
        Runtime(config) as rt,
        rt.http_client() as http,
        rt.program("late", timeout_s=0.05) as prog,
    ):
        time.sleep(0.1)  # noqa: ASYNC251 - blocks the loop past the deadline on purpose
        for call in (
            lambda: agentrt.chat(messages),
            lambda: http.post(server.base_url + "/chat/completions", json=body),
        ):
            try:
                await call()
            except agentrt.DeadlineExceeded as exc:  # raised before any checkpoint
                errors.append(exc)
    assert len(errors) == 2
    assert [n.status for n in prog.nodes.values()] == ["cancelled", "cancelled"]
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat m1"]
    assert len(chats) == 2
    assert all(s.attributes and s.attributes["error.type"] == "DeadlineExceeded" for s in chats)


async def test_spans_record_parent_node_ids(server: FakeServer) -> None:
    """``agentrt.node.parent_ids`` on chat and tool spans equals the graph's ``parent_ids``."""
    tracer_provider, exporter, _, _ = providers()
    config = RuntimeConfig(
        base_url=server.base_url, model="m1", controller="off", tracer_provider=tracer_provider
    )

    async def ask() -> None:
        await agentrt.chat([{"role": "user", "content": "branch"}])

    async with Runtime(config) as rt, rt.program("agent") as prog:
        await agentrt.chat([{"role": "user", "content": "first"}])  # main:0
        assert await lookup("x") == "ok"  # tool main:1, its nested call main:2
        await agentrt.chat([{"role": "user", "content": "after the tool"}])  # main:3
        await agentrt.gather(ask, ask)  # main.0:0, main.1:0
        await agentrt.chat([{"role": "user", "content": "join"}])  # main:4
    parents: dict[str, tuple[str, ...]] = {}
    for span in exporter.get_finished_spans():
        attrs: dict[str, Any] = dict(span.attributes or {})
        if "agentrt.node.id" in attrs:
            parents[str(attrs["agentrt.node.id"])] = tuple(attrs["agentrt.node.parent_ids"])
    assert parents == {
        "main:0": (),
        "main:1": ("main:0",),
        "main:2": ("main:1",),
        "main:3": ("main:1",),
        "main.0:0": ("main:3",),
        "main.1:0": ("main:3",),
        "main:4": ("main.0:0", "main.1:0"),
    }
    assert prog.graph is not None
    assert parents == {n.id: n.parent_ids for n in prog.graph.nodes.values()}


# --- providers and propagation (docs/tracing.md) ----------------------------------------------

#: Run in a fresh interpreter: the global providers can be set once per process. Prints one
#: JSON line: span names the global and the explicit exporter saw, and metric names the global
#: meter provider (set after the runtime was built) collected.
_GLOBAL_PROVIDER_SCRIPT = """
import asyncio, json, sys
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import agentrt

def provider():
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer_provider, exporter

global_provider, global_spans = provider()
trace.set_tracer_provider(global_provider)  # what Logfire or opentelemetry-instrument do
explicit_provider, explicit_spans = provider()
reader = InMemoryMetricReader()

async def main(base_url):
    config = agentrt.RuntimeConfig(base_url=base_url, model="m1", controller="off")
    async with agentrt.Runtime(config) as rt:
        # Set after the runtime was built: the API's proxy meter provider still delivers.
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        async with rt.program("global"):
            await agentrt.chat([{"role": "user", "content": "hi"}])
    explicit = agentrt.RuntimeConfig(
        base_url=base_url, model="m1", controller="off", tracer_provider=explicit_provider
    )
    async with agentrt.Runtime(explicit) as rt, rt.program("explicit"):
        await agentrt.chat([{"role": "user", "content": "hi"}])

asyncio.run(main(sys.argv[1]))
data = reader.get_metrics_data()
print(json.dumps({
    "global": [s.name for s in global_spans.get_finished_spans()],
    "explicit": [s.name for s in explicit_spans.get_finished_spans()],
    "metrics": sorted(m.name for rm in data.resource_metrics for sm in rm.scope_metrics
                      for m in sm.metrics),
}))
"""


def test_a_global_provider_receives_spans_and_an_explicit_one_wins(server: FakeServer) -> None:
    """With no provider passed, the runtime uses the globally configured tracer provider (set
    before it is built) and meter provider (even one set later); an explicit provider takes
    every span of its runtime and leaves the global one none."""
    import json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _GLOBAL_PROVIDER_SCRIPT, server.base_url],
        capture_output=True,
        text=True,
        timeout=25,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["global"] == ["chat m1", "invoke_workflow global"]
    assert seen["explicit"] == ["chat m1", "invoke_workflow explicit"]
    assert {"gen_ai.client.operation.duration", "agentrt.program.duration"} <= set(seen["metrics"])


def _caller_context() -> tuple[Any, Any]:
    """A caller's context: a remote parent with a ``tracestate`` and one baggage entry (what
    an instrumented web framework would hand to the agent); returns (context, parent ids)."""
    from opentelemetry import baggage
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    parent = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "opaque-value")]),
    )
    context = trace.set_span_in_context(NonRecordingSpan(parent))
    return baggage.set_baggage("tenant.tier", "gold", context), parent


@pytest.mark.parametrize("with_provider", [True, False], ids=["explicit-provider", "no-provider"])
async def test_tracestate_and_baggage_reach_the_server(
    server: FakeServer, state: FakeState, with_provider: bool
) -> None:
    """The caller's ``tracestate`` and ``baggage`` reach the server with the call; the
    ``traceparent`` names the call's own span (with a provider) or the caller's span (without
    one: nothing of the caller's trace is lost)."""
    from opentelemetry import context as otel_context

    tracer_provider, exporter, _, _ = providers()
    config = RuntimeConfig(
        base_url=server.base_url,
        model="m1",
        controller="off",
        tracer_provider=tracer_provider if with_provider else None,
    )
    caller, parent = _caller_context()
    token = otel_context.attach(caller)
    try:
        async with Runtime(config) as rt, rt.program("agent"):
            await agentrt.chat([{"role": "user", "content": "hi"}])
    finally:
        otel_context.detach(token)
    headers = state.requests[0].headers
    assert headers["tracestate"] == "vendor=opaque-value"
    assert headers["baggage"] == "tenant.tier=gold"
    sent = trace.get_current_span(propagate.extract(headers)).get_span_context()
    assert sent.trace_id == parent.trace_id
    if with_provider:
        chat = next(s for s in exporter.get_finished_spans() if s.name == "chat m1")
        assert sent.span_id == chat.context.span_id != parent.span_id
    else:
        assert sent.span_id == parent.span_id
    tracer_provider.shutdown()
