"""A real SDK run, recorded, exported and loaded back: the trace has the programs, DAG edges,
threads, output tokens and tool durations the SDK itself recorded, and the simulator runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrt.cli import main
from agentrt_sim.export import read_spans, spans_to_programs
from agentrt_sim.plan import compile_program
from agentrt_sim.workloads.program import LLMNode, Program, WaitNode
from agentrt_sim.workloads.trace import load_trace

from .recorded import WAIT_S, RecordedRun

pytestmark = pytest.mark.timeout(60)


def _export(recorded: RecordedRun, tmp_path: Path, *extra: str) -> list[Program]:
    out = tmp_path / "programs.jsonl"
    assert main(["trace", "export", str(recorded.spans_file), "-o", str(out), *extra]) == 0
    return load_trace(out)


def _by_kind(programs: list[Program]) -> dict[str, Program]:
    return {program.kind: program for program in programs}


def test_programs_nodes_parents_and_threads_match_the_sdk_graph(
    recorded: RecordedRun, tmp_path: Path
) -> None:
    programs = _by_kind(_export(recorded, tmp_path))
    assert set(programs) == {"chain", "fanout"}
    for name, graph in recorded.graphs.items():
        program = programs[name.split("-")[0]]
        assert program.program_id == graph.id
        exported = {node.node_id: node for node in program.nodes}
        assert set(exported) == set(graph.nodes)
        for node_id, node in graph.nodes.items():
            got = exported[node_id]
            assert got.parents == node.parent_ids, node_id
            assert got.thread_id == node.thread_id
            if node.kind == "llm":
                assert isinstance(got, LLMNode)
                assert got.output_tokens == node.output_tokens
            else:
                assert isinstance(got, WaitNode)
                assert got.kind == ("tool" if node.kind == "tool" else "think")
                assert node.duration_s is not None
                # The span brackets the node: at most a few ms of bookkeeping apart.
                assert got.duration_s == pytest.approx(node.duration_s, abs=0.01)
    chain = programs["chain"]
    assert [n.name for n in chain.nodes if isinstance(n, WaitNode)] == ["search", "lookup"]
    assert chain.arrival_s == 0.0
    assert programs["fanout"].arrival_s > 0
    (wait,) = [n for n in programs["fanout"].nodes if isinstance(n, WaitNode)]
    assert wait.kind == "think"
    assert wait.duration_s >= WAIT_S


def test_prompt_sizes_match_the_recorded_input_tokens(recorded: RecordedRun) -> None:
    programs, summary = spans_to_programs(read_spans(recorded.spans_file))
    assert summary.programs == 2
    assert summary.llm_calls == 8 and summary.tools == 2 and summary.waits == 1
    assert len(summary.prompt_errors) == 8
    assert summary.prompt_error_max == 0
    for program in programs:
        graph = next(g for g in recorded.graphs.values() if g.id == program.program_id)
        plan = compile_program(program)
        for node, prompt_len in zip(program.nodes, plan.prompt_len, strict=True):
            if isinstance(node, LLMNode):
                assert prompt_len == graph.nodes[node.node_id].input_tokens
    # The chain's later calls extend the conversation: each one's context is the tool before
    # it, and only the turn's new tokens are fresh.
    chain = next(p for p in programs if p.kind == "chain")
    calls = [n for n in chain.nodes if isinstance(n, LLMNode)]
    assert [c.context for c in calls] == [None, "main:1", "main:3"]
    assert all(0 < c.new_prompt_tokens < 100 for c in calls[1:])


def test_time_scale_multiplies_wall_durations(recorded: RecordedRun, tmp_path: Path) -> None:
    plain = _by_kind(_export(recorded, tmp_path))
    scaled = _by_kind(_export(recorded, tmp_path, "--time-scale", "10"))
    assert scaled["fanout"].arrival_s == pytest.approx(10 * plain["fanout"].arrival_s)
    for kind, program in plain.items():
        for before, after in zip(program.nodes, scaled[kind].nodes, strict=True):
            if isinstance(before, WaitNode):
                assert isinstance(after, WaitNode)
                assert after.duration_s == pytest.approx(10 * before.duration_s)
            else:
                assert after == before


def test_bench_sim_replays_the_exported_trace(
    recorded: RecordedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "programs.jsonl"
    assert main(["trace", "export", str(recorded.spans_file), "-o", str(out)]) == 0
    capsys.readouterr()
    argv = ["bench", "sim", "--trace-in", str(out), "--policy", "fcfs,plas"]
    assert main([*argv, "--warmup", "0", "--drain", "60", "--json", "--no-progress"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in results] == ["fcfs", "plas"]
    for result in results:
        assert result["programs_completed"] == 2
        assert result["calls_completed"] == 8


def test_the_otel_exporters_own_otlp_encoding_gives_the_same_trace(
    recorded: RecordedRun, tmp_path: Path
) -> None:
    demo_format, _ = spans_to_programs(read_spans(recorded.spans_file))
    otlp_format, summary = spans_to_programs(read_spans(recorded.otlp_file))
    assert otlp_format == demo_format
    assert summary.programs == 2
