"""``AdhocRun``: the program run of an LLM call made through a raw client outside any program.

Such a call still gets call tags and a ``chat`` span, so it needs a node in some graph: a
one-call graph of its own (id ``adhoc-...``, no deadline). Unlike a ``Program`` the run sends
no program events, has no deadline scope and keeps no phase totals.
"""

from __future__ import annotations

import math
import uuid
from typing import TYPE_CHECKING

import anyio

from agentrt.program.context import Chain, Frame
from agentrt.program.model import Node, NodeKind, NodeStatus, ProgramGraph

if TYPE_CHECKING:
    import httpx

    from agentrt.runtime.runtime import Runtime

__all__ = ["AdhocRun"]


class AdhocRun:
    """A one-call program run (implements ``agentrt.program.context.ProgramRun``)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.graph = ProgramGraph(
            f"adhoc-{uuid.uuid4().hex[:20]}", "adhoc", runtime.session_id, math.inf, 0.0
        )
        #: Nobody closes these at an end (an ad-hoc run has none); bodies leave when done.
        self.open_streams: set[httpx.AsyncByteStream] = set()

    def frame(self) -> Frame:
        """The frame of the run's main thread."""
        return Frame(self, self.graph, self.graph.threads["main"], Chain())

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
        node = self.graph.add_node(
            frame.thread.id,
            kind,
            name,
            parents if parents is not None else frame.chain.parents(),
            objective or frame.objective,
        )
        node.tool_call_id = tool_call_id
        if start:
            node.start(anyio.current_time())
        return node

    def end_node(
        self, chain: Chain, node: Node, status: NodeStatus, error: BaseException | None = None
    ) -> None:
        node.finish(status, anyio.current_time(), error)
        chain.on_done(node)

    def __repr__(self) -> str:
        return f"AdhocRun(id={self.graph.id!r})"
