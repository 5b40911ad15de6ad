"""``AdhocRun``: the program run of an LLM call made through a raw client outside any program.

Such a call still gets call tags and a ``chat`` span, so it needs a node in some graph: a
one-call graph of its own (id ``adhoc-...``, no deadline). Unlike a ``Program`` the run sends
no program events, has no deadline scope and keeps no phase totals.
"""

from __future__ import annotations

import math
import uuid

import anyio
import httpx

from agentrt.program.chain import Chain
from agentrt.program.model import Node, NodeKind, NodeStatus, ProgramGraph
from agentrt.runtime.frame import Frame, begin_graph_node
from agentrt.runtime.services import RuntimeServices

__all__ = ["AdhocRun"]


class AdhocRun:
    """A one-call program run (implements ``agentrt.runtime.frame.ProgramRun``)."""

    def __init__(self, runtime: RuntimeServices) -> None:
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
        return begin_graph_node(
            self.graph,
            frame,
            kind,
            name,
            parents=parents,
            objective=objective,
            tool_call_id=tool_call_id,
            start=start,
            now_s=anyio.current_time(),
        )

    def end_node(
        self, chain: Chain, node: Node, status: NodeStatus, error: BaseException | None = None
    ) -> None:
        node.finish(status, anyio.current_time(), error)
        chain.on_done(node)

    def __repr__(self) -> str:
        return f"AdhocRun(id={self.graph.id!r})"
