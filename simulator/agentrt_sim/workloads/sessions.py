"""Recorded agent sessions (one line per LLM call) as simulator programs.

Schema (``agentrt-sessions`` version 1; docs/simulator.md, "Recorded sessions")::

    {"format": "agentrt-sessions", "version": 1}                  first line, optional
    {"session": "s1", "turn": 0, "prompt_tokens": 12400, "cached_tokens": 9000,
     "output_tokens": 480, "tool": "shell", "tool_duration_s": 0.31, "start_s": 0.0}
    {"session": "s1", "turn": 1, "prompt_tokens": 14880, "cached_tokens": 12870,
     "output_tokens": 510, "tool": null}
    ...

One line per call; ``tool`` / ``tool_duration_s`` are the tool the call ran before the
session's next turn (``null`` or absent: none); ``start_s`` (optional, the session's first line
only counts) is when the session started, seconds from the start of the recording (0 if
absent). Lines of sessions may interleave; turns are sorted per session.

A session becomes one program: its first call's ``cached_tokens`` are a shared system prompt
(every session whose first call had that many cached tokens shares it), the rest of its first
prompt is the program's first input; call k + 1 extends call k's prompt + output + the tool's
result when its prompt is at least that long (the difference is the tool's result, or fresh
tokens without a tool), otherwise (the agent compacted its context) it starts from the system
prompt and the first input again with the rest of its prompt fresh (so no call's prompt may be
shorter than the session's first). The recorded cached counts past the first call
are checked (at most the prompt) but not replayed: the simulated engine decides its cache.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentrt_sim.workloads.program import LLMNode, Node, Program, TraceError, WaitNode

__all__ = ["SESSIONS_FORMAT", "SessionCall", "is_sessions_line", "sessions_to_programs"]

SESSIONS_FORMAT = "agentrt-sessions"


class SessionCall(BaseModel):
    """One recorded LLM call (one line)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session: str = Field(min_length=1)
    turn: int = Field(ge=0)
    prompt_tokens: int = Field(ge=1)
    cached_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(ge=1)
    tool: str | None = Field(None, min_length=1)
    tool_duration_s: float = Field(0.0, ge=0, allow_inf_nan=False)
    start_s: float = Field(0.0, ge=0, allow_inf_nan=False)


class _Header(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    format: str
    version: int


def is_sessions_line(data: object) -> bool:
    """Whether a parsed JSON line belongs to the sessions format (its header or a call)."""
    if not isinstance(data, dict):
        return False
    return data.get("format") == SESSIONS_FORMAT or ("session" in data and "nodes" not in data)


def _parse(lines: Iterable[tuple[int, str]], path: str) -> list[tuple[int, SessionCall]]:
    calls: list[tuple[int, SessionCall]] = []
    for number, line in lines:
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        try:
            if isinstance(data, dict) and "format" in data:
                header = _Header.model_validate(data)
                if header.format != SESSIONS_FORMAT or header.version != 1:
                    raise TraceError(
                        f"{path}:{number}: format: expected {SESSIONS_FORMAT!r} version 1"
                    )
                continue
            call = SessionCall.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "line"
            raise TraceError(f"{path}:{number}: {where}: {first['msg']}") from exc
        if call.cached_tokens > call.prompt_tokens:
            raise TraceError(
                f"{path}:{number}: cached_tokens: {call.cached_tokens} is more than "
                f"prompt_tokens {call.prompt_tokens}"
            )
        if call.tool is None and call.tool_duration_s:
            raise TraceError(f"{path}:{number}: tool_duration_s: set without a tool")
        calls.append((number, call))
    return calls


def _program(session: str, calls: list[tuple[int, SessionCall]], path: str) -> Program:
    first = calls[0][1]
    system = first.cached_tokens
    root = first.prompt_tokens - system
    for number, call in calls:
        if call.prompt_tokens < first.prompt_tokens:
            raise TraceError(
                f"{path}:{number}: prompt_tokens: {call.prompt_tokens} is less than the "
                f"session's first prompt ({first.prompt_tokens}), which every call extends"
            )
    nodes: list[Node] = []
    previous: tuple[str, int] | None = None  # (node id, its prefix length)
    for index, (_, call) in enumerate(calls):
        parents: tuple[str, ...] = ()
        context: str | None = None
        fresh = call.prompt_tokens - system - root if index == 0 else 0
        if previous is not None:
            node_id, prefix = previous
            parents = (node_id,)
            grown = call.prompt_tokens - prefix
            earlier = calls[index - 1][1]
            if earlier.tool is not None:
                wait = WaitNode(
                    f"t{index}",
                    parents,
                    "main",
                    "tool",
                    earlier.tool,
                    earlier.tool_duration_s,
                    context=node_id if grown >= 0 else None,
                    result_tokens=max(grown, 0),
                )
                nodes.append(wait)
                parents = (wait.node_id,)
                node_id = wait.node_id
            if grown >= 0:
                context = node_id
                fresh = 0 if earlier.tool is not None else grown
            else:
                # The agent compacted its context: the call restarts from the root prefix.
                fresh = call.prompt_tokens - system - root
        llm = LLMNode(f"c{index}", parents, "main", context, fresh, call.output_tokens)
        nodes.append(llm)
        previous = (llm.node_id, call.prompt_tokens + call.output_tokens)
    return Program(
        program_id=session,
        kind="session",
        arrival_s=first.start_s,
        system_prompt_id=f"sessions-system-{system}",
        system_prompt_tokens=system,
        root_prompt_tokens=root,
        nodes=tuple(nodes),
    )


def sessions_to_programs(lines: Iterable[tuple[int, str]], path: str) -> list[Program]:
    """Programs of the sessions in ``lines`` (``(line number, text)``), sorted by arrival (ties
    by session). Raises :class:`TraceError` naming the line and the field of a bad line or a
    repeated turn."""
    by_session: dict[str, list[tuple[int, SessionCall]]] = {}
    for number, call in _parse(lines, path):
        by_session.setdefault(call.session, []).append((number, call))
    programs: list[Program] = []
    for session, calls in by_session.items():
        calls.sort(key=lambda item: item[1].turn)
        for (_, a), (number, b) in itertools.pairwise(calls):
            if a.turn == b.turn:
                raise TraceError(
                    f"{path}:{number}: turn: session {session!r} repeats turn {b.turn}"
                )
        program = _program(session, calls, path)
        try:
            program.validate()
        except TraceError as exc:
            raise TraceError(f"{path}:{calls[0][0]}: {exc}") from exc
        programs.append(program)
    programs.sort(key=lambda p: (p.arrival_s, p.program_id))
    return programs
