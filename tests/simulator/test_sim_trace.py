"""JSONL traces: round trip, and bad input rejected with the line named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrt_sim.workloads.generate import generate_programs
from agentrt_sim.workloads.program import TraceError
from agentrt_sim.workloads.trace import load_trace, save_trace

pytestmark = pytest.mark.timeout(30)

GOOD_NODE = {"id": "c0", "type": "llm", "output_tokens": 3}


def _program(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "program_id": "p1",
        "arrival_s": 0.5,
        "root_prompt_tokens": 4,
        "nodes": [GOOD_NODE],
    }
    base.update(fields)
    return base


def test_round_trip_preserves_every_program(tmp_path: Path) -> None:
    programs = generate_programs("mixed", rate_per_s=1.0, duration_s=30.0, seed=9)
    programs += generate_programs("mapreduce", rate_per_s=0.2, duration_s=30.0, seed=9)
    path = tmp_path / "trace.jsonl"
    assert save_trace(programs, path) == len(programs)
    loaded = load_trace(path)
    assert sorted(loaded, key=lambda p: p.program_id) == sorted(
        programs, key=lambda p: p.program_id
    )
    assert [p.arrival_s for p in loaded] == sorted(p.arrival_s for p in loaded)
    header = json.loads(path.read_text().splitlines()[0])
    assert header == {"format": "agentrt-sim-trace", "version": 1}


def test_minimal_hand_written_trace_gets_defaults(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    lines = [
        _program(
            nodes=[GOOD_NODE, {"id": "w", "type": "tool", "parents": ["c0"], "duration_s": 1}]
        ),
        _program(program_id="p0", arrival_s=0.1),
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    first, second = load_trace(path)
    assert first.program_id == "p0"  # sorted by arrival
    assert second.kind == "trace" and second.system_prompt_id == "trace"
    assert second.nodes[1].thread_id == "main"


BAD = [
    ("not json", "{nope", "not JSON"),
    ("unknown key", json.dumps(_program(colour="red")), "colour"),
    (
        "bad node type",
        json.dumps(_program(nodes=[{"id": "x", "type": "gpu", "output_tokens": 1}])),
        "nodes",
    ),
    (
        "zero output",
        json.dumps(_program(nodes=[{"id": "x", "type": "llm", "output_tokens": 0}])),
        "output_tokens",
    ),
    ("negative arrival", json.dumps(_program(arrival_s=-1)), "arrival_s"),
    (
        "parent later",
        json.dumps(
            _program(
                nodes=[
                    {"id": "a", "type": "llm", "parents": ["b"], "output_tokens": 1},
                    {"id": "b", "type": "llm", "output_tokens": 1},
                ]
            )
        ),
        "unknown or comes later",
    ),
    (
        "context not ancestor",
        json.dumps(
            _program(
                nodes=[GOOD_NODE, {"id": "d", "type": "llm", "context": "c0", "output_tokens": 1}]
            )
        ),
        "not one of its ancestors",
    ),
    ("duplicate node", json.dumps(_program(nodes=[GOOD_NODE, GOOD_NODE])), "duplicate node id"),
    (
        "memory not an ancestor",
        json.dumps(
            _program(
                nodes=[GOOD_NODE, {"id": "d", "type": "llm", "memory": ["c0"], "output_tokens": 1}]
            )
        ),
        "memory must be among its ancestors",
    ),
    (
        "memory of a tool",
        json.dumps(
            _program(
                nodes=[
                    GOOD_NODE,
                    {"id": "t", "type": "tool", "parents": ["c0"], "duration_s": 1},
                    {
                        "id": "d",
                        "type": "llm",
                        "parents": ["t"],
                        "memory": ["t"],
                        "output_tokens": 1,
                    },
                ]
            )
        ),
        "not an earlier LLM call",
    ),
    (
        "template size without a template",
        json.dumps(
            _program(nodes=[{"id": "x", "type": "llm", "template_tokens": 5, "output_tokens": 1}])
        ),
        "template_tokens needs a template",
    ),
    (
        "no llm call",
        json.dumps(_program(nodes=[{"id": "w", "type": "think", "duration_s": 1}])),
        "no LLM call",
    ),
    ("bad version", json.dumps({"format": "agentrt-sim-trace", "version": 2}), "version"),
    ("empty prompt", json.dumps(_program(root_prompt_tokens=0)), "empty prompt"),
]


@pytest.mark.parametrize(("case", "line", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_traces_are_rejected_with_the_line(
    tmp_path: Path, case: str, line: str, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_program(program_id="ok")) + "\n" + line + "\n")
    with pytest.raises(TraceError, match=message) as info:
        load_trace(path)
    assert ":2:" in str(info.value)


def test_duplicate_program_ids_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "dup.jsonl"
    path.write_text(json.dumps(_program()) + "\n" + json.dumps(_program()) + "\n")
    with pytest.raises(TraceError, match="duplicate program_id"):
        load_trace(path)
