"""Where running code is: the program run it belongs to, its thread and chain (``Frame``),
and the ``contextvars`` that carry them.

Context follows ``await`` and is copied into tasks started by task groups, so every LLM call
made anywhere inside a program sees its own program's ids without passing them around.
There is no global state: a ``Frame`` names its program run (and through it the runtime);
see docs/architecture.md, "Design rules".
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

import httpx

from agentrt.program.chain import Chain
from agentrt.program.model import Node, NodeKind, NodeStatus, ProgramGraph, ThreadInfo
from agentrt.runtime.services import RuntimeServices

__all__ = ["CURRENT_FRAME", "Frame", "ProgramRun", "begin_graph_node"]


class ProgramRun(Protocol):
    """What a frame's run is to the code recording nodes in it.

    Implemented by :class:`agentrt.runtime.program.Program` (``rt.program(...)``) and by
    :class:`agentrt.runtime.adhoc.AdhocRun` (a call made through a raw client outside any
    program: a one-call run with no events, no deadline and no phase totals).
    """

    @property
    def runtime(self) -> RuntimeServices:
        """The runtime the run sends its calls and events through."""
        ...

    @property
    def open_streams(self) -> set[httpx.AsyncByteStream]:
        """Open response bodies of raw client calls in the run; closed when it ends."""
        ...

    def begin_node(
        self,
        frame: Frame,
        kind: NodeKind,
        name: str,
        *,
        parents: tuple[str, ...] | None = None,
        objective: str | None = None,
        tool_call_id: str = "",
        start: bool = True,
    ) -> Node:
        """Create the next node of ``frame``'s thread (parents: the chain's leaves)."""
        ...

    def end_node(
        self, chain: Chain, node: Node, status: NodeStatus, error: BaseException | None = None
    ) -> None:
        """Finish ``node`` (status, end time, error) and advance ``chain`` past it."""
        ...


@dataclass(slots=True)
class Frame:
    """Where the running code is: a program run, one of its threads, and a chain in it."""

    #: The program run that owns the graph.
    run: ProgramRun
    graph: ProgramGraph
    thread: ThreadInfo
    chain: Chain
    #: Scheduling hint for calls made in this frame (``latency`` or ``throughput``).
    objective: str = "latency"

    def child(self, thread: ThreadInfo, objective: str | None = None) -> Frame:
        """Frame of a thread forked from this one; it starts from our current leaves."""
        return Frame(
            self.run,
            self.graph,
            thread,
            Chain(list(self.chain.leaves)),
            objective or self.objective,
        )

    def nested(self, node: Node) -> Frame:
        """Frame for work done inside ``node`` (e.g. calls a tool makes): it chains off it."""
        return Frame(self.run, self.graph, self.thread, Chain([node.id]), self.objective)


#: The innermost program frame, None outside any program. Its run is always a ``Program``:
#: ad-hoc runs never become the current frame.
CURRENT_FRAME: ContextVar[Frame | None] = ContextVar("agentrt_frame", default=None)


def begin_graph_node(
    graph: ProgramGraph,
    frame: Frame,
    kind: NodeKind,
    name: str,
    *,
    parents: tuple[str, ...] | None,
    objective: str | None,
    tool_call_id: str,
    start: bool,
    now_s: float,
) -> Node:
    """Add the next node of ``frame``'s thread to ``graph`` (what every run's ``begin_node`` does).

    ``parents`` ``None`` means the chain's leaves; ``objective`` ``None`` the frame's; the node
    starts at ``now_s`` (seconds, the event loop's clock) when ``start`` is true.
    """
    node = graph.add_node(
        frame.thread.id,
        kind,
        name,
        parents if parents is not None else frame.chain.parents(),
        objective or frame.objective,
    )
    node.tool_call_id = tool_call_id
    if start:
        node.start(now_s)
    return node
