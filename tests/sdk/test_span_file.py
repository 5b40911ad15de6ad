"""Span files (docs/tracing.md, "Span files"): a program run with ``make_telemetry("file:PATH")``
(or ``OTEL_TRACES_EXPORTER=file:PATH``) writes OTLP/JSON lines that the SDK's reader,
``agentrt trace export`` and ``agentrt timeline`` read back, with the program's DAG intact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import agentrt
from agentrt import ConfigError, Runtime, RuntimeConfig, tool
from agentrt.cli import main
from agentrt.otlp_json import read_span_file
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from agentrt_sim.workloads.program import LLMNode, WaitNode
from agentrt_sim.workloads.trace import load_trace

pytestmark = [pytest.mark.timeout(60)]

OTEL_VARIABLES = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_METRIC_EXPORT_INTERVAL",
)


@pytest.fixture(autouse=True)
def _no_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@tool
async def lookup(word: str) -> str:
    """Look a word up."""
    return f"{word}: a word"


async def _program(telemetry: agentrt.Telemetry) -> agentrt.Program:
    """Against an emulator: a chat, a tool, then a fan-out of two chats and a reduce."""
    async with serve_engine(EmulatorConfig(time_scale=200.0)) as engine:
        config = RuntimeConfig(
            base_url=engine.openai_base_url,
            model=DEFAULT_MODEL_NAME,
            tracer_provider=telemetry.tracer_provider,
            meter_provider=telemetry.meter_provider,
        )
        async with Runtime(config) as rt, rt.program("fanout") as prog:
            await agentrt.chat([{"role": "user", "content": "plan"}], max_tokens=8)
            await lookup("word")

            async def summarise(part: str) -> int:
                reply = await agentrt.chat([{"role": "user", "content": part}], max_tokens=4)
                return reply.usage.completion_tokens if reply.usage else 0

            async def total(parts: list[int]) -> int:
                await agentrt.chat([{"role": "user", "content": "sum"}], max_tokens=4)
                return sum(parts)

            await agentrt.map_reduce(["a", "b"], summarise, total)
    telemetry.shutdown()
    return prog


@pytest.mark.anyio
async def test_a_span_file_round_trips_through_trace_export_and_timeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spans_file = tmp_path / "spans" / "run.jsonl"
    prog = await _program(agentrt.make_telemetry(f"file:{spans_file}"))

    # OTLP/JSON lines: each line one trace request, the SDK's spans in it.
    lines = spans_file.read_text().splitlines()
    assert lines and all("resourceSpans" in json.loads(line) for line in lines)
    spans = read_span_file(spans_file)
    names = sorted(span.name for span in spans)
    assert names.count(f"chat {DEFAULT_MODEL_NAME}") == 4
    assert "execute_tool lookup" in names and "invoke_workflow fanout" in names
    assert {span.resource["service.name"] for span in spans} == {"agentrt"}
    assert len({span.trace_id for span in spans}) == 1

    # agentrt trace export: the program's nodes and edges are the SDK's own.
    exported = tmp_path / "programs.jsonl"
    assert main(["trace", "export", str(spans_file), "-o", str(exported)]) == 0
    (program,) = load_trace(exported)
    assert program.program_id == prog.id
    nodes = {node.node_id: node for node in program.nodes}
    assert set(nodes) == set(prog.nodes)
    for node_id, node in prog.nodes.items():
        assert nodes[node_id].parents == node.parent_ids, node_id
        assert isinstance(nodes[node_id], LLMNode if node.kind == "llm" else WaitNode)

    # agentrt timeline: draws it.
    picture = tmp_path / "timeline.html"
    assert main(["timeline", str(spans_file), "--out", str(picture)]) == 0
    assert "fanout" in picture.read_text()  # the program, by name
    assert f"wrote {picture} (1 programs, {len(prog.nodes)} nodes)" in capsys.readouterr().out


@pytest.mark.anyio
async def test_the_standard_variable_names_the_span_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans_file = tmp_path / "env.jsonl"
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", f"file://{spans_file}")  # file:///abs/path
    monkeypatch.setenv("OTEL_SERVICE_NAME", "planner")
    telemetry = agentrt.make_telemetry()
    await _program(telemetry)
    spans = read_span_file(spans_file)
    assert {span.resource["service.name"] for span in spans} == {"planner"}


def test_a_second_run_appends_to_the_span_file(tmp_path: Path) -> None:
    spans_file = tmp_path / "two.jsonl"
    for name in ("first", "second"):
        telemetry = agentrt.make_telemetry(f"file:{spans_file}")
        with telemetry.tracer_provider.get_tracer("t").start_as_current_span(name):
            pass
        telemetry.shutdown()
    assert [span.name for span in read_span_file(spans_file)] == ["first", "second"]


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER must be console, otlp"),
        ("OTEL_TRACES_EXPORTER", "file:", "OTEL_TRACES_EXPORTER must be"),
        ("OTEL_METRICS_EXPORTER", "file:m.jsonl", "no metric file"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "soon", "OTEL_METRIC_EXPORT_INTERVAL must be"),
    ],
)
def test_a_bad_variable_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    if variable == "OTEL_METRIC_EXPORT_INTERVAL":
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")  # metrics exported: read it
    with pytest.raises(ConfigError, match=message):
        agentrt.make_telemetry()


def test_a_span_file_that_cannot_be_opened_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot open the span file"):
        agentrt.make_telemetry(f"file:{blocker}/spans.jsonl")
