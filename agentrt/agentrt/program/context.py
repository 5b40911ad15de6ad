"""Per-call context in ``contextvars``: which program, thread and chain a coroutine is in.

Context follows ``await`` and is copied into tasks started by task groups, so every LLM call
made anywhere inside a program sees its own program's ids without passing them around.
There is no global state: a ``Frame`` names the program (and through it the runtime).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentrt.program.model import Node, ProgramGraph, ThreadInfo

if TYPE_CHECKING:
    from agentrt.runtime.runtime import Runtime

__all__ = ["CURRENT_CALL", "CURRENT_FRAME", "CURRENT_RUNTIME", "Chain", "Frame"]


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

    #: The program run (``agentrt.runtime.program.ProgramRun``) that owns the graph.
    run: Any
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


#: The innermost program frame, None outside any program.
CURRENT_FRAME: ContextVar[Frame | None] = ContextVar("agentrt_frame", default=None)
#: The LLM call (``agentrt.runtime.calls.LLMCall``: node and span) an SDK helper is sending
#: right now; the transport tags the request with it.
CURRENT_CALL: ContextVar[Any] = ContextVar("agentrt_call", default=None)
#: The runtime entered with ``async with`` in this context (for helpers called outside a program).
CURRENT_RUNTIME: ContextVar[Runtime | None] = ContextVar("agentrt_runtime", default=None)
