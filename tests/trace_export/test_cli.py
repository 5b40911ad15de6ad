"""``agentrt trace export`` on span files: the demo's own trace file, hand-written OTLP/JSON for
the rules a small run does not exercise, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentrt.cli import main
from agentrt_sim.workloads.program import LLMNode
from agentrt_sim.workloads.trace import load_trace

from .recorded import RecordedRun

pytestmark = pytest.mark.timeout(60)


def _export(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["trace", "export", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_writes_to_stdout_with_a_summary_on_stderr(
    recorded: RecordedRun, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _export(capsys, str(recorded.spans_file))
    assert code == 0
    lines = out.splitlines()
    assert json.loads(lines[0]) == {"format": "agentrt-sim-trace", "version": 1}
    assert len(lines) == 3
    assert "2 programs, 8 LLM calls, 2 tool calls, 1 inferred waits" in err
    assert "mean |error| 0.00, max 0 tokens" in err


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_exports_the_demos_trace_file(tmp_path: Path) -> None:
    demo_out = tmp_path / "demo"
    command = [sys.executable, "-m", "agentrt.cli", "demo", "--quick", "--no-direct"]
    done = subprocess.run(
        [*command, "--no-frameworks", "--out", str(demo_out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    trace_out = tmp_path / "programs.jsonl"
    export = [sys.executable, "-m", "agentrt.cli", "trace", "export"]
    spans = demo_out / "trace-controller.jsonl"
    done = subprocess.run(
        [*export, str(spans), "-o", str(trace_out), "--kind-attr", "agentrt.demo.kind"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((demo_out / "summary.json").read_text())
    planned = summary["phases"]["controller"]["programs"]
    programs = load_trace(trace_out)
    assert len(programs) == len(planned)
    assert {p.kind for p in programs} <= {"react", "map_reduce", "mcts", "chatbot", "coding"}
    assert "skipped" in done.stderr  # the controller's own chat spans
    assert "max 0 tokens" in done.stderr
    assert all(p.llm_calls() >= 1 for p in programs)


# ------------------------------------------------------------------ hand-written OTLP/JSON
_T0 = 1_700_000_000_000_000_000


def _span(name: str, start_s: float, end_s: float, status: int = 0, **attrs: Any) -> Any:
    def value(v: Any) -> dict[str, Any]:
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        return {"stringValue": str(v)}

    return {
        "traceId": "ab" * 16,
        "spanId": "cd" * 8,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(_T0 + round(start_s * 1e9)),
        "endTimeUnixNano": str(_T0 + round(end_s * 1e9)),
        "attributes": [{"key": k.replace("__", "."), "value": value(v)} for k, v in attrs.items()],
        "status": {"code": status} if status else {},
    }


def _chat(node: str, start: float, end: float, status: int = 0, **usage: int) -> Any:
    attrs: dict[str, Any] = {
        "gen_ai__operation__name": "chat",
        "agentrt__program__id": "p-1",
        "agentrt__thread__id": node.rsplit(":", 1)[0],
        "agentrt__node__id": node,
    }
    attrs.update({f"gen_ai__usage__{k}": v for k, v in usage.items()})
    return _span("chat m", start, end, status, **attrs)


def _write(path: Path, spans: list[Any]) -> Path:
    document = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    path.write_text(json.dumps(document) + "\n")
    return path


def test_failed_retried_and_foreign_spans_are_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = _span(
        "invoke_agent helper-7",
        0,
        5,
        gen_ai__operation__name="invoke_agent",
        agentrt__program__id="p-1",
        agentrt__program__name="helper-7",
    )
    spans = [
        program,
        _chat("main:0", 0.0, 1.0, input_tokens=100, output_tokens=10),
        # main:1 failed once, then succeeded (one node, two attempt spans).
        _chat("main:1", 1.1, 1.5, status=2),
        _chat("main:1", 1.6, 2.0, input_tokens=150, output_tokens=0),
        # main:2 failed for good: main:3 inherits its parent (main:1).
        _chat("main:2", 2.1, 2.5, status=2),
        _chat("main:3", 2.6, 3.0, input_tokens=170, output_tokens=4),
        _span("chat m", 0.0, 1.0, gen_ai__operation__name="chat"),  # a controller span
        _span("GET /metrics", 0.0, 0.1),
    ]
    out = tmp_path / "out.jsonl"
    code, _, err = _export(capsys, str(_write(tmp_path / "s.jsonl", spans)), "-o", str(out))
    assert code == 0, err
    (exported,) = load_trace(out)
    assert exported.kind == "helper"
    assert [n.node_id for n in exported.nodes] == ["main:0", "main:1", "main:3"]
    assert [n.parents for n in exported.nodes] == [(), ("main:0",), ("main:1",)]
    call1 = exported.nodes[1]
    assert isinstance(call1, LLMNode) and call1.output_tokens == 1
    for needle in (
        "1 calls reported 0 output tokens",
        "skipped 1: failed attempts of retried LLM calls",
        "skipped 1: failed or cancelled LLM calls",
        "skipped 1: chat spans without agentrt ids",
        "skipped 1: spans that are not agentrt programs",
        "max 0 tokens",
    ):
        assert needle in err


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read span file"),
        ("", "is empty"),
        ("not json\n", "line 1: not JSON"),
        ('{"format": "agentrt-sim-trace", "version": 1}\n', "not an OTLP/JSON trace request"),
        ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x"}]}]}]}\n', "missing field"),
        ('{"resourceSpans": []}\n', "holds no spans"),
    ],
)
def test_a_file_that_is_not_a_span_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "spans.jsonl"
    if content is not None:
        path.write_text(content)
    code, out, err = _export(capsys, str(path))
    assert code == 2
    assert out == ""
    assert err.startswith("agentrt trace export: error: ")
    assert message in err


def test_spans_without_programs_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "s.jsonl", [_span("GET /", 0, 1), _span("chat m", 0, 1)])
    code, out, err = _export(capsys, str(path))
    assert code == 2 and out == ""
    assert "records no agentrt program with a completed LLM call (2 spans read)" in err


def test_a_bad_time_scale_exits_2(
    recorded: RecordedRun, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _export(capsys, str(recorded.spans_file), "--time-scale", "0")
    assert code == 2
    assert "time_scale must be a finite number > 0" in err


def test_help_explains_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["trace", "export", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for needle in ("SPANS_FILE", "--kind-attr", "--time-scale", "bench sim --trace-in"):
        assert needle in text
