"""The program timeline's layout (pure): each program's nodes per thread, packed into lanes.

Each section (a phase, or one trace file) lists its programs by start time; a program's threads
are packed into **lanes** — a thread keeps one lane for its whole life, and threads that do not
overlap in time share a lane (an MCTS search's expansions reuse three lanes instead of taking
one row per thread). Each LLM node is a bar whose first part (lighter) is the time it was held
in the controller's queues; tool nodes are bars of their own colour; a grey band behind the
lanes spans the program's end-to-end time. Times are seconds from the section's first program
start.

The renderers (:mod:`agentrt_demo.render_html`, :mod:`agentrt_demo.render_png`) draw this
layout; :mod:`agentrt_demo.timeline` is the entry point that picks one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agentrt_demo.analysis import NodeRecord, ProgramRecord

__all__ = [
    "Bar",
    "Lane",
    "ProgramLane",
    "SectionLayout",
    "TimelineSection",
    "build_sections",
]

_EPS_S = 1e-6


@dataclass(frozen=True, slots=True)
class TimelineSection:
    """Input: a titled set of programs (e.g. one phase)."""

    title: str
    programs: Sequence[ProgramRecord]


@dataclass(frozen=True, slots=True)
class Bar:
    """One node on a lane (seconds from the section start)."""

    start_s: float
    end_s: float
    #: ``llm``, ``tool`` or ``other``.
    kind: str
    #: Leading part of an LLM bar held in the controller's queues (seconds).
    queue_s: float
    #: Tooltip text.
    label: str
    #: The node failed or was cancelled.
    failed: bool = False


@dataclass(slots=True)
class Lane:
    threads: list[str] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    #: End of the lane's last thread (seconds), for packing.
    busy_until_s: float = 0.0


@dataclass(slots=True)
class ProgramLane:
    """A program and its lanes, in drawing order."""

    name: str
    kind: str
    status: str
    start_s: float
    end_s: float
    lanes: list[Lane]
    #: Tooltip text of the program band.
    label: str


@dataclass(slots=True)
class SectionLayout:
    title: str
    programs: list[ProgramLane]
    #: Latest program end (seconds from the section start).
    end_s: float

    @property
    def rows(self) -> int:
        return sum(len(p.lanes) for p in self.programs)


def build_sections(sections: Sequence[TimelineSection]) -> list[SectionLayout]:
    """Lay out each section (see the module docstring)."""
    return [_layout(section) for section in sections]


def _layout(section: TimelineSection) -> SectionLayout:
    programs = sorted(section.programs, key=lambda p: (p.start_ns, p.name))
    if not programs:
        return SectionLayout(section.title, [], 0.0)
    origin = min(p.start_ns for p in programs)
    out = [_program(p, origin) for p in programs]
    return SectionLayout(section.title, out, max(p.end_s for p in out))


def _program(program: ProgramRecord, origin_ns: int) -> ProgramLane:
    def rel(ns: int) -> float:
        return (ns - origin_ns) / 1e9

    threads: dict[str, list[NodeRecord]] = {}
    for node in program.nodes:
        threads.setdefault(node.thread_id, []).append(node)
    order = sorted(threads, key=lambda t: (min(n.start_ns for n in threads[t]), t))
    lanes: list[Lane] = []
    for thread in order:
        nodes = threads[thread]
        first = rel(min(n.start_ns for n in nodes))
        last = rel(max(n.end_ns for n in nodes))
        lane = next((ln for ln in lanes if ln.busy_until_s <= first + _EPS_S), None)
        if lane is None:
            lane = Lane()
            lanes.append(lane)
        lane.threads.append(thread)
        lane.busy_until_s = last
        lane.bars.extend(_bar(program.name, n, rel) for n in nodes)
    if not lanes:
        lanes.append(Lane())
    start, end = rel(program.start_ns), rel(program.end_ns)
    calls = program.llm_calls
    label = (
        f"{program.name} ({program.kind}): {program.status}, E2E {end - start:.2f} s, "
        f"{calls} LLM calls, {len(threads)} threads; wait {program.wait_s:.2f} s, "
        f"exec {program.exec_s:.2f} s, tool {program.tool_s:.2f} s"
    )
    return ProgramLane(program.name, program.kind, program.status, start, end, lanes, label)


def _bar(program: str, node: NodeRecord, rel: Callable[[int], float]) -> Bar:
    start, end = rel(node.start_ns), rel(node.end_ns)
    parts = [
        f"{program} · thread {node.thread_id} · {node.kind} {node.name}",
        f"{start:.3f}–{end:.3f} s ({end - start:.3f} s)",
    ]
    queue = min(node.queue_s, end - start) if node.kind == "llm" else 0.0
    if queue > 0:
        parts.append(f"queued at the controller {queue:.3f} s")
    if node.input_tokens is not None or node.output_tokens is not None:
        parts.append(f"tokens in {node.input_tokens or 0} / out {node.output_tokens or 0}")
    if node.backend:
        parts.append(f"engine {node.backend}")
    if node.error:
        parts.append(f"error {node.error}")
    return Bar(start, end, node.kind, queue, " · ".join(parts), failed=bool(node.error))
