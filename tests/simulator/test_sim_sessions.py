"""Recorded sessions (one JSONL line per LLM call, docs/simulator.md "Recorded sessions") load
as simulator programs through ``load_trace`` / ``agentrt bench sim --trace-in``; a bad line is
refused naming its line and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentrt.cli import main
from agentrt_sim.workloads.program import LLMNode, TraceError, WaitNode
from agentrt_sim.workloads.trace import load_trace

pytestmark = pytest.mark.timeout(60)


def _call(session: str, turn: int, prompt: int, cached: int, output: int, **extra: Any) -> str:
    line = {
        "session": session,
        "turn": turn,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "output_tokens": output,
        **extra,
    }
    return json.dumps(line)


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "sessions.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


SESSIONS = [
    json.dumps({"format": "agentrt-sessions", "version": 1}),
    _call("a", 0, 1200, 1000, 50, tool="shell", tool_duration_s=0.4, start_s=1.5),
    _call("b", 0, 1100, 1000, 30, tool="search", tool_duration_s=2.0, start_s=0.5),
    _call("a", 1, 1450, 1250, 60),  # tool result 1450 - (1200 + 50) = 200
    _call("a", 2, 1530, 1510, 20, tool="test", tool_duration_s=13.6),  # no tool: 20 fresh
    _call("b", 1, 1530, 1130, 40),  # result 400
    _call("a", 3, 1300, 1000, 10),  # compacted: restarts from the first prompt
]


def test_sessions_become_programs_with_the_recorded_prompts(tmp_path: Path) -> None:
    programs = load_trace(_write(tmp_path, SESSIONS))
    assert [p.program_id for p in programs] == ["b", "a"]  # by arrival
    b, a = programs
    assert (a.arrival_s, b.arrival_s) == (1.5, 0.5)
    assert a.call_prompt_tokens() == [1200, 1450, 1530, 1300]
    assert b.call_prompt_tokens() == [1100, 1530]
    assert a.output_tokens() == 140 and a.llm_calls() == 4
    # The first call's cached tokens are a system prompt shared by both sessions.
    assert a.system_prompt_id == b.system_prompt_id and a.system_prompt_tokens == 1000
    waits = [n for n in a.nodes if isinstance(n, WaitNode)]
    assert [(w.name, w.duration_s, w.result_tokens) for w in waits] == [
        ("shell", 0.4, 200),
        ("test", 13.6, 0),  # the compacted call does not extend the context
    ]
    calls = [n for n in a.nodes if isinstance(n, LLMNode)]
    assert calls[2].context == "c1" and calls[2].new_prompt_tokens == 20
    assert calls[3].context is None and calls[3].new_prompt_tokens == 100


def test_the_existing_trace_format_still_loads(tmp_path: Path) -> None:
    program = {
        "program_id": "p",
        "arrival_s": 0,
        "root_prompt_tokens": 10,
        "nodes": [{"id": "c0", "type": "llm", "output_tokens": 3}],
    }
    path = _write(tmp_path, [json.dumps(program)])
    (loaded,) = load_trace(path)
    assert loaded.call_prompt_tokens() == [10]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (json.dumps({"session": "a", "turn": 2, "prompt_tokens": 9}), r":3: output_tokens: Field"),
        (_call("a", 2, 100, 200, 5), r":3: cached_tokens: 200 is more than prompt_tokens 100"),
        (_call("a", 2, 100, 0, 5, colour=1), r":3: colour: Extra inputs"),
        (_call("a", 2, 100, 0, 5, tool_duration_s=1.0), r":3: tool_duration_s: set without"),
        (_call("a", 1, 1500, 0, 5), r":3: turn: session 'a' repeats turn 1"),
        (_call("a", 2, 10, 0, 5), r":3: prompt_tokens: 10 is less than"),
        (_call("a", 2, -1, 0, 5), r":3: prompt_tokens: Input should be greater"),
        ("{not json", r":3: not JSON"),
    ],
)
def test_a_bad_line_names_its_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    lines = [_call("a", 0, 1200, 1000, 50, tool="shell", tool_duration_s=0.4)]
    lines.append(_call("a", 1, 1450, 1250, 60))
    path = _write(tmp_path, [*lines, line])
    with pytest.raises(TraceError, match=message):
        load_trace(path)


def test_bench_sim_replays_recorded_sessions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, SESSIONS)
    argv = ["bench", "sim", "--trace-in", str(path), "--policy", "fcfs", "--drain", "60"]
    assert main([*argv, "--json", "--no-progress"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["workload"] == f"trace:{path}"
    assert result["programs_completed"] == 2 and result["calls_completed"] == 6
