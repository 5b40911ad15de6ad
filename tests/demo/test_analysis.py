"""From spans to programs, the time split and the per-kind statistics."""

from __future__ import annotations

import math

import pytest

from agentrt_demo.analysis import kind_stats, percentile, programs_from_spans, ratios, speedup

from .spans import SpanFactory

pytestmark = pytest.mark.timeout(30)


def test_programs_nodes_and_the_time_split() -> None:
    f = SpanFactory()
    pid = f.program("react-03", 0.0, 5.0)
    f.llm(pid, "main:0", 0.0, 1.0, queue_s=0.25, backend="e1")
    f.tool(pid, "main:1", 1.0, 3.0)
    f.llm(pid, "main:2", 3.0, 4.5, queue_s=2.0)  # more queue than duration: clamped
    f.llm("p-elsewhere", "main:0", 0.0, 1.0)  # no program span: ignored
    f.program("map-reduce", 1.0, 2.0, kind="map_reduce", status="error")

    first, second = programs_from_spans(f.spans)
    assert first.name == "react-03" and first.kind == "react" and first.status == "ok"
    assert [n.node_id for n in first.nodes] == ["main:0", "main:1", "main:2"]
    assert first.nodes[0].backend == "e1" and first.nodes[2].backend == ""
    assert first.nodes[0].input_tokens == 100 and first.nodes[1].kind == "tool"
    assert first.e2e_s == pytest.approx(5.0)
    assert first.wait_s == pytest.approx(0.25 + 1.5)
    assert first.exec_s == pytest.approx(1.0 + 1.5 - 1.75)
    assert first.tool_s == pytest.approx(2.0)
    assert first.llm_calls == 2
    assert second.kind == "map_reduce" and second.status == "error" and second.nodes == []


def test_percentile_interpolates_linearly() -> None:
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert percentile([7.0], 95) == 7.0
    assert math.isnan(percentile([], 50))


def test_kind_stats_use_finished_programs_and_add_an_all_row() -> None:
    f = SpanFactory()
    for i, e2e in enumerate([1.0, 2.0, 3.0]):
        pid = f.program(f"react-{i}", 0.0, e2e)
        f.llm(pid, "main:0", 0.0, e2e, queue_s=0.5)
    f.program("react-9", 0.0, 100.0, status="deadline_exceeded")
    f.program("mcts-1", 0.0, 10.0)
    rows = {r.kind: r for r in kind_stats(programs_from_spans(f.spans), ["react", "mcts"])}
    assert list(rows) == ["react", "mcts", "all"]
    react = rows["react"]
    assert (react.count, react.ok) == (4, 3)
    assert react.e2e_p50_s == pytest.approx(2.0) and react.e2e_mean_s == pytest.approx(2.0)
    assert react.wait_mean_s == pytest.approx(0.5) and react.exec_mean_s == pytest.approx(1.5)
    assert react.llm_calls_mean == 1.0
    assert (rows["all"].count, rows["all"].ok) == (5, 4)
    assert rows["mcts"].tool_mean_s == 0.0


def test_speedup_compares_the_programs_finished_in_both_runs() -> None:
    slow, fast = SpanFactory(), SpanFactory()
    slow.program("react-1", 0, 4.0)
    slow.program("react-2", 0, 6.0)
    slow.program("mcts-1", 0, 100.0, status="error")  # not in both: left out
    fast.program("react-1", 0, 2.0)
    fast.program("react-2", 0, 3.0)
    fast.program("mcts-1", 0, 10.0)
    before, after = programs_from_spans(slow.spans), programs_from_spans(fast.spans)
    assert speedup(before, after) == pytest.approx(10.0 / 5.0)
    assert speedup(before, after, "react") == pytest.approx(2.0)
    assert math.isnan(speedup(before, after, "mcts"))


def test_token_latency_and_the_ratios_of_mean_p95_and_token_latency() -> None:
    slow, fast = SpanFactory(), SpanFactory()
    for i, (slow_s, fast_s) in enumerate([(4.0, 2.0), (6.0, 3.0), (20.0, 5.0)]):
        pid = slow.program(f"react-{i}", 0, slow_s)
        slow.llm(pid, "main:0", 0, slow_s)  # 10 output tokens per call (SpanFactory)
        slow.llm(pid, "main:1", 0, slow_s)
        pid = fast.program(f"react-{i}", 0, fast_s)
        fast.llm(pid, "main:0", 0, fast_s)
        fast.llm(pid, "main:1", 0, fast_s)
    fast.program("mcts-1", 0, 1.0)  # no LLM call: no token latency, only in one run
    before, after = programs_from_spans(slow.spans), programs_from_spans(fast.spans)
    assert before[0].output_tokens == 20
    assert before[0].token_latency_s == pytest.approx(4.0 / 20)
    assert math.isnan(next(p for p in after if p.kind == "mcts").token_latency_s)
    react = ratios(before, after, "react")
    assert react.programs == 3
    assert react.e2e_mean == pytest.approx(30.0 / 10.0)
    assert react.e2e_p95 == pytest.approx(percentile([4, 6, 20], 95) / percentile([2, 3, 5], 95))
    assert react.token_latency_mean == pytest.approx(react.e2e_mean)  # same tokens both runs
    assert math.isnan(ratios(before, after, "mcts").e2e_p95)
    rows = {r.kind: r for r in kind_stats(after)}
    assert rows["react"].token_latency_mean_s == pytest.approx(10.0 / 3 / 20)
    assert rows["react"].output_tokens_mean == 20
    assert math.isnan(rows["mcts"].token_latency_mean_s)  # no tokens: left out, not zero
