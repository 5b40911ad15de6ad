"""Where running code is: the program run it belongs to, its thread and chain (``Frame``),
and the ``contextvars`` that carry them.

Context follows ``await`` and is copied into tasks started by task groups, so every LLM call
made anywhere inside a program sees its own program's ids without passing them around.
There is no global state: a ``Frame`` names its program run (and through it the runtime);
see docs/architecture.md, "Design rules".
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from agentrt.program.model import Node, NodeKind, NodeStatus, ProgramGraph, ThreadInfo

if TYPE_CHECKING:
    import httpx

    from agentrt.runtime.runtime import Runtime

__all__ = ["CURRENT_FRAME", "CURRENT_RUNTIME", "Chain", "Frame", "ProgramRun", "begin_graph_node"]


class ProgramRun(Protocol):
    """What a frame's run is to the code recording nodes in it.

    Implemented by :class:`agentrt.program.program.Program` (``rt.program(...)``) and by
    :class:`agentrt.program.adhoc.AdhocRun` (a call made through a raw client outside any
    program: a one-call run with no events, no deadline and no phase totals).
    """

    @property
    def runtime(self) -> Runtime:
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
class Chain:
    """A sequential chain of nodes: the leaves are the parents of the next node.

    When a node finishes, its parents leave the leaf set and the node joins it, so calls made
    one after another form a chain, and calls started together from the same leaves become
    siblings whose join is the parent set of whatever comes next.
    """

    leaves: list[str] = field(default_factory=list)

    def parents(self) -> tuple[str, ...]:
        return tuple(self.leaves)

    def on_done(self, node: Node) -> None:
        kept = [leaf for leaf in self.leaves if leaf not in node.parent_ids and leaf != node.id]
        kept.append(node.id)
        self.leaves = kept

    def join(self, base: list[str], branches: list[Chain]) -> None:
        """Merge branches forked from ``base``: the new leaves are theirs plus ours since."""
        merged = [leaf for leaf in self.leaves if leaf not in base]
        for branch in branches:
            for leaf in branch.leaves:
                if leaf not in merged:
                    merged.append(leaf)
        self.leaves = merged or list(base)


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
#: The runtime entered with ``async with`` in this context (for helpers called outside a program).
CURRENT_RUNTIME: ContextVar[Runtime | None] = ContextVar("agentrt_runtime", default=None)


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
