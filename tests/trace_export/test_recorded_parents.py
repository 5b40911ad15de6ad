"""Recorded parents (``agentrt.node.parent_ids``): the exporter takes the SDK's own DAG edges, so
``parallel(limit=1)`` threads that ran one after another stay siblings and calls made inside a
tool are its children; spans without the attribute (older traces) fall back to the timing
replay."""

from __future__ import annotations

import itertools
from pathlib import Path

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentrt
from agentrt import Runtime, RuntimeConfig, tool
from agentrt.program.model import ProgramGraph
from agentrt_demo.traces import records_from_sdk, write_trace
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from agentrt_sim.export import Span, read_spans, spans_to_programs
from agentrt_sim.workloads.program import LLMNode, Program, WaitNode

from .recorded import RecordedRun, _chat

pytestmark = pytest.mark.timeout(60)

_PARENTS = "agentrt.node.parent_ids"


@tool
async def consult(topic: str) -> str:
    """Ask the model about ``topic`` (a call made inside the tool: nested work)."""
    await _chat(f"tell me about {topic}", 4)
    return f"notes on {topic}"


async def _record(out: Path) -> ProgramGraph:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with serve_engine(EmulatorConfig(time_scale=10.0)) as engine:
        config = RuntimeConfig(
            base_url=engine.openai_base_url,
            model=DEFAULT_MODEL_NAME,
            controller="off",
            tracer_provider=provider,
        )
        async with Runtime(config) as rt, rt.program("serial-0") as program:
            await _chat("plan three steps", 5)  # main:0
            await agentrt.gather(  # main.0:0 .. main.2:0, one after another
                lambda: _chat("step one", 3),
                lambda: _chat("step two", 4),
                lambda: _chat("step three", 6),
                limit=1,
            )
            await consult("the steps")  # tool main:1, its nested call main:2
            async with agentrt.wait("approval"):  # main:3, no span
                await anyio.sleep(0.02)
            await _chat("combine the steps", 8)  # main:4
            assert program.graph is not None
            graph = program.graph
    provider.force_flush()
    write_trace(out, records_from_sdk(exporter.get_finished_spans()))
    provider.shutdown()
    return graph


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Span], ProgramGraph]:
    out = tmp_path_factory.mktemp("serial") / "spans.jsonl"
    graph = anyio.run(_record, out)
    return read_spans(out), graph


def _without_parents(spans: list[Span]) -> list[Span]:
    return [
        Span(
            s.name,
            start_ns=s.start_ns,
            end_ns=s.end_ns,
            attributes={k: v for k, v in s.attributes.items() if k != _PARENTS},
        )
        if _PARENTS in s.attributes
        else s
        for s in spans
    ]


def _parents(program: Program) -> dict[str, tuple[str, ...]]:
    return {node.node_id: node.parents for node in program.nodes}


def test_serial_parallel_threads_export_as_siblings(
    serial: tuple[list[Span], ProgramGraph],
) -> None:
    spans, graph = serial
    branches = ["main.0:0", "main.1:0", "main.2:0"]
    # They really ran one after another (limit=1).
    for before, after in itertools.pairwise(graph.nodes[b] for b in branches):
        assert before.ended_s is not None and after.started_s is not None
        assert before.ended_s <= after.started_s
    (program,), summary = spans_to_programs(spans)
    assert summary.inferred_parents == 0 and summary.waits == 1
    assert summary.prompt_error_max == 0
    assert _parents(program) == {n.id: n.parent_ids for n in graph.nodes.values()}
    parents = _parents(program)
    assert all(parents[b] == ("main:0",) for b in branches)
    assert parents["main:1"] == tuple(branches)  # the tool after the join
    assert parents["main:2"] == ("main:1",)  # nested in the tool: its child
    (wait,) = [n for n in program.nodes if isinstance(n, WaitNode) and n.kind == "think"]
    assert wait.node_id == "main:3" and wait.parents == ("main:1",)
    # A branch's prompt can only extend a real ancestor (the plan or the root), not a sibling.
    for node in program.nodes:
        if isinstance(node, LLMNode) and node.node_id in branches:
            assert node.context in (None, "main:0")


def test_spans_without_recorded_parents_fall_back_to_the_timing_replay(
    serial: tuple[list[Span], ProgramGraph],
) -> None:
    spans, _ = serial
    (program,), summary = spans_to_programs(_without_parents(spans))
    assert summary.inferred_parents == 1
    assert any("DAG edges inferred from timing" in line for line in summary.lines())
    parents = _parents(program)
    # The known approximation: threads that ran one after another come out chained.
    assert parents["main.0:0"] == ("main:0",)
    assert parents["main.1:0"] == ("main.0:0",)
    assert parents["main.2:0"] == ("main.1:0",)
    assert summary.prompt_error_max == 0


def test_one_node_without_the_attribute_means_the_whole_program_is_inferred(
    serial: tuple[list[Span], ProgramGraph],
) -> None:
    spans, _ = serial
    first = next(s for s in spans if s.attributes.get("agentrt.node.id") == "main:0")
    mixed = [s for s in spans if s is not first] + _without_parents([first])
    (program,), summary = spans_to_programs(mixed)
    assert summary.inferred_parents == 1
    assert _parents(program)["main.1:0"] == ("main.0:0",)


def test_recorded_and_replayed_parents_agree_where_the_replay_is_exact(
    recorded: RecordedRun,
) -> None:
    """The chain and fan-out run (no serial threads, no nested calls): both ways give the
    SDK's graph, so the fallback still converts older traces of such runs exactly."""
    spans = read_spans(recorded.spans_file)
    with_parents, summary = spans_to_programs(spans)
    replayed, fallback = spans_to_programs(_without_parents(spans))
    assert (summary.inferred_parents, fallback.inferred_parents) == (0, 2)
    assert replayed == with_parents
