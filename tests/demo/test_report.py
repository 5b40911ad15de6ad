"""The summary table and its JSON twin."""

from __future__ import annotations

import json

import pytest

from agentrt_demo.analysis import programs_from_spans
from agentrt_demo.cluster import CpuTimes, EngineMetrics
from agentrt_demo.report import PhaseReport, render_summary, summary_json
from agentrt_demo.runner import PhaseOutcome, ProgramOutcome
from agentrt_demo.settings import DemoSettings
from agentrt_demo.workload import ProgramSpec

from .spans import SpanFactory

pytestmark = pytest.mark.timeout(30)


def _phase(label: str, react_e2e: float, mcts_e2e: float, failed: bool = False) -> PhaseReport:
    f = SpanFactory()
    pid = f.program("react-00", 0.0, react_e2e, kind="react")
    f.llm(pid, "main:0", 0.0, react_e2e, queue_s=0.5 if label == "controller" else None)
    f.program("mcts-01", 0.0, mcts_e2e, kind="mcts", status="error" if failed else "ok")
    outcomes = [
        ProgramOutcome(ProgramSpec(0, "react", 0.0, 1, 3), "ok"),
        ProgramOutcome(
            ProgramSpec(1, "mcts", 0.5, 2, 4),
            "error" if failed else "ok",
            "LLMCallError: boom" if failed else "",
        ),
    ]
    engines = EngineMetrics(prefix_queries=1000, prefix_hits=250, queue_time_s=3.0, requests=6)
    outcome = PhaseOutcome(label, outcomes, 12.5, load_average=(1.0, 2.0))
    cpu = CpuTimes(running_s=3.0, waiting_s=1.25) if label == "controller" else None
    return PhaseReport(label, f"{label} setup", outcome, programs_from_spans(f.spans), engines, cpu)


def test_table_rows_speedups_and_notes() -> None:
    settings = DemoSettings(time_scale=2.0)
    reports = [_phase("controller", 1.0, 10.0, failed=True), _phase("direct", 3.0, 8.0)]
    text = render_summary(reports, settings)
    lines = text.splitlines()
    react = next(line for line in lines if line.startswith("react"))
    assert react.split()[:4] == ["react", "controller", "1", "1"]
    assert react.endswith("3.00x")  # 3.0 s direct / 1.0 s through the controller
    mcts = next(line for line in lines if line.startswith("mcts"))
    assert mcts.split()[2:4] == ["1", "0"] and mcts.rstrip().endswith("-")  # failed: no figures
    everything = next(line for line in lines if line.startswith("all"))
    assert "25.0 %" in everything and everything.endswith("3.00x")
    assert "controller: mcts-01 failed: LLMCallError: boom" in text
    # Engine queue time is converted from model to wall seconds: 3.0 / 2.0 over 6 requests.
    assert "waited 1.5 s in the engines' queues (0.250 s each)" in text
    assert "machine load average 1.0 → 2.0" in text
    assert "controller: the controller process ran 3.0 s on a CPU and waited 1.2 s" in text
    header = next(line for line in lines if line.startswith("kind"))
    assert header.split()[-6:] == ["hit", "tok", "x", "p95", "x", "speed-up"]
    # Token latency: 1.0 s over 10 generated tokens = 100 ms/token; ratios direct ÷ controller.
    assert react.split()[8] == "100.0" and react.split()[-3:] == ["3.00x", "3.00x", "3.00x"]
    assert "Faster: react 3.00x mean E2E (p95 3.00x, token latency 3.00x, 1 programs)." in text
    assert "mcts" not in "".join(line for line in lines if line.startswith(("Faster", "Slower")))

    document = summary_json(reports, settings)
    json.dumps(document, allow_nan=False)  # NaN became null
    assert document["speedup"]["react"] == pytest.approx(3.0)
    assert document["speedup"]["mcts"] is None
    assert document["ratios"]["react"]["e2e_p95"] == pytest.approx(3.0)
    assert document["ratios"]["mcts"]["programs"] == 0
    assert document["phases"]["controller"]["controller_cpu"]["waiting_s"] == 1.25
    assert document["phases"]["direct"]["controller_cpu"] is None
    assert document["phases"]["controller"]["programs"] == {"react-00": "ok", "mcts-01": "error"}
    assert document["phases"]["direct"]["engines"]["prefix_hit_rate"] == 0.25


def test_a_single_phase_has_no_speedup_column_values() -> None:
    text = render_summary([_phase("controller", 1.0, 2.0)], DemoSettings())
    assert "x" not in "".join(line.split()[-1] for line in text.splitlines() if line[:3] == "all")
    assert "speed-up = " not in text


def test_a_kind_that_got_slower_is_named_with_the_reason() -> None:
    reports = [_phase("controller", 1.0, 12.0), _phase("direct", 3.0, 8.0)]
    text = render_summary(reports, DemoSettings())
    (slower,) = [line for line in text.splitlines() if line.startswith("Slower:")]
    assert slower.startswith("Slower: mcts 0.67x mean E2E")  # 8 s direct / 12 s controller
    assert "PLAS" in slower  # the controller's default policy when the demo chose none
