"""JSONL traces: save generated programs, or replay programs recorded from a real system.

Schema (``agentrt-sim-trace`` version 1; docs/simulator.md has the full description)::

    {"format": "agentrt-sim-trace", "version": 1}                 first line, optional
    {"program_id": "react-0000001", "kind": "react", "arrival_s": 0.41,
     "system_prompt_id": "react", "system_prompt_tokens": 1500, "root_prompt_tokens": 97,
     "tenant": "acme", "rotate_call_ids": false,                  both optional
     "nodes": [
       {"id": "c0", "type": "llm", "parents": [], "thread": "main", "context": null,
        "new_prompt_tokens": 0, "output_tokens": 31},
       {"id": "t1", "type": "tool", "name": "search", "parents": ["c0"], "thread": "main",
        "context": "c0", "duration_s": 0.82, "result_tokens": 655},
       {"id": "c2", "type": "llm", "parents": ["t1"], "context": "t1",
        "new_prompt_tokens": 12, "output_tokens": 40,
        "template": "react-reflect", "template_tokens": 90, "memory": ["c0"]},  last 3 optional
       ...]}                                                       one program per line

Recorded sessions (one line per LLM call, ``agentrt-sessions``, :mod:`.sessions`) load through
:func:`load_trace` too: a file whose first line is that header or a call with a ``session`` key
is read as sessions.

Nodes are listed parents-first. ``type`` is ``llm``, ``tool`` or ``think``. Units: seconds and
tokens. Unknown keys are rejected, so a typo never silently changes a replay.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentrt_sim.workloads.program import LLMNode, Node, Program, TraceError, WaitNode
from agentrt_sim.workloads.sessions import is_sessions_line, sessions_to_programs

__all__ = ["TRACE_FORMAT", "TRACE_VERSION", "load_trace", "program_to_json", "save_trace"]

TRACE_FORMAT = "agentrt-sim-trace"
TRACE_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _LLMNode(_Strict):
    id: str = Field(min_length=1)
    type: Literal["llm"]
    parents: list[str] = []
    thread: str = "main"
    context: str | None = None
    new_prompt_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(ge=1)
    template: str | None = Field(None, min_length=1)
    template_tokens: int = Field(0, ge=0)
    memory: list[str] = []


class _WaitNode(_Strict):
    id: str = Field(min_length=1)
    type: Literal["tool", "think"]
    name: str = ""
    parents: list[str] = []
    thread: str = "main"
    context: str | None = None
    duration_s: float = Field(ge=0, allow_inf_nan=False)
    result_tokens: int = Field(0, ge=0)


class _Program(_Strict):
    program_id: str = Field(min_length=1)
    kind: str = "trace"
    arrival_s: float = Field(ge=0, allow_inf_nan=False)
    system_prompt_id: str | None = None
    system_prompt_tokens: int = Field(0, ge=0)
    root_prompt_tokens: int = Field(0, ge=0)
    nodes: list[Annotated[_LLMNode | _WaitNode, Field(discriminator="type")]]
    tenant: str | None = Field(None, min_length=1)
    rotate_call_ids: bool = False


class _Header(_Strict):
    format: Literal["agentrt-sim-trace"]
    version: Literal[1]


def program_to_json(program: Program) -> dict[str, object]:
    """The JSON object of one program (one trace line)."""
    nodes: list[dict[str, object]] = []
    for node in program.nodes:
        if isinstance(node, LLMNode):
            nodes.append(
                {
                    "id": node.node_id,
                    "type": "llm",
                    "parents": list(node.parents),
                    "thread": node.thread_id,
                    "context": node.context,
                    "new_prompt_tokens": node.new_prompt_tokens,
                    "output_tokens": node.output_tokens,
                    **(
                        {}
                        if node.template is None
                        else {"template": node.template, "template_tokens": node.template_tokens}
                    ),
                    **({"memory": list(node.memory)} if node.memory else {}),
                }
            )
        else:
            nodes.append(
                {
                    "id": node.node_id,
                    "type": node.kind,
                    "name": node.name,
                    "parents": list(node.parents),
                    "thread": node.thread_id,
                    "context": node.context,
                    "duration_s": node.duration_s,
                    "result_tokens": node.result_tokens,
                }
            )
    extra: dict[str, object] = {}
    if program.tenant is not None:
        extra["tenant"] = program.tenant
    if program.rotate_call_ids:
        extra["rotate_call_ids"] = True
    return {
        "program_id": program.program_id,
        "kind": program.kind,
        "arrival_s": program.arrival_s,
        "system_prompt_id": program.system_prompt_id,
        "system_prompt_tokens": program.system_prompt_tokens,
        "root_prompt_tokens": program.root_prompt_tokens,
        "nodes": nodes,
        **extra,
    }


def save_trace(programs: Iterable[Program], path: str | Path) -> int:
    """Write ``programs`` as a JSONL trace with a header line; returns the program count."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as out:
        out.write(json.dumps({"format": TRACE_FORMAT, "version": TRACE_VERSION}) + "\n")
        for program in programs:
            out.write(json.dumps(program_to_json(program), separators=(",", ":")) + "\n")
            count += 1
    return count


def _to_program(raw: _Program) -> Program:
    nodes: list[Node] = []
    for node in raw.nodes:
        if isinstance(node, _LLMNode):
            nodes.append(
                LLMNode(
                    node.id,
                    tuple(node.parents),
                    node.thread,
                    node.context,
                    node.new_prompt_tokens,
                    node.output_tokens,
                    template=node.template,
                    template_tokens=node.template_tokens,
                    memory=tuple(node.memory),
                )
            )
        else:
            nodes.append(
                WaitNode(
                    node.id,
                    tuple(node.parents),
                    node.thread,
                    node.type,
                    node.name or node.type,
                    node.duration_s,
                    node.context,
                    node.result_tokens,
                )
            )
    return Program(
        program_id=raw.program_id,
        kind=raw.kind,
        arrival_s=raw.arrival_s,
        system_prompt_id=raw.system_prompt_id or raw.kind,
        system_prompt_tokens=raw.system_prompt_tokens,
        root_prompt_tokens=raw.root_prompt_tokens,
        nodes=tuple(nodes),
        tenant=raw.tenant,
        rotate_call_ids=raw.rotate_call_ids,
    )


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8") as source:
        for number, line in enumerate(source, start=1):
            if line.strip():
                yield number, line


def _first_is_sessions(line: str) -> bool:
    try:
        return is_sessions_line(json.loads(line))
    except json.JSONDecodeError:
        return False


def load_trace(path: str | Path) -> list[Program]:
    """Read and validate a JSONL trace, sorted by arrival (ties by program id).

    Raises :class:`TraceError` naming the line for malformed JSON, unknown keys, bad values,
    duplicate program ids or an invalid DAG. A file of recorded sessions (:mod:`.sessions`,
    recognised by its first line) becomes one program per session.
    """
    lines = list(_lines(Path(path)))
    if lines and _first_is_sessions(lines[0][1]):
        return sessions_to_programs(lines, str(path))
    programs: list[Program] = []
    seen: set[str] = set()
    for number, line in lines:
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        try:
            if isinstance(data, dict) and "format" in data:
                _Header.model_validate(data)
                continue
            raw = _Program.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise TraceError(f"{path}:{number}: {where}: {first['msg']}") from exc
        program = _to_program(raw)
        try:
            program.validate()
        except TraceError as exc:
            raise TraceError(f"{path}:{number}: {exc}") from exc
        if program.program_id in seen:
            raise TraceError(f"{path}:{number}: duplicate program_id {program.program_id!r}")
        seen.add(program.program_id)
        programs.append(program)
    programs.sort(key=lambda p: (p.arrival_s, p.program_id))
    return programs
