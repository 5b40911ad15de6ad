"""A framework's tool execution reported as an agentrt tool step.

The framework runs the tool itself; we only observe its start and end, so this is the part of
``agentrt.tools.runner`` that does not execute anything: a ``tool`` node in the program's DAG,
an ``execute_tool {name}`` span, the controller's tool-wait events (with the duration predicted
from this tool's history, docs/routing.md), and the measured duration fed back to that history.
There is no journal step: a framework's tool is not ours to replay (wrap a side-effecting
function in ``agentrt.tool`` and call it from the framework's tool for that).
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agentrt.program.model import Node, NodeStatus
from agentrt.runtime.flow import track_wait
from agentrt.runtime.frame import Frame
from agentrt.runtime.telemetry import (
    ATTR_NODE_ID,
    ATTR_PROGRAM_ID,
    ATTR_SESSION_ID,
    ATTR_THREAD_ID,
)

__all__ = ["ToolStep"]


class ToolStep:
    """One observed tool run: ``await start()``, then exactly one ``await finish(...)``."""

    def __init__(self, frame: Frame, name: str, *, tool_call_id: str = "") -> None:
        self.frame = frame
        self.name = name[:200] or "tool"
        self.tool_call_id = tool_call_id
        self.node: Node | None = None
        self._span: Span | None = None
        self._wait: contextlib.AbstractAsyncContextManager[None] | None = None
        self._started_s = 0.0

    async def start(self) -> Node:
        """Open the node and the span; tell the controller the program waits on the tool."""
        frame = self.frame
        run = frame.run
        rt = run.runtime
        node: Node = run.begin_node(frame, "tool", self.name, tool_call_id=self.tool_call_id)
        self.node = node
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": self.name,
            "gen_ai.tool.type": "function",
            ATTR_SESSION_ID: rt.session_id,
            ATTR_PROGRAM_ID: frame.graph.id,
            ATTR_THREAD_ID: frame.thread.id,
            ATTR_NODE_ID: node.id,
        }
        if self.tool_call_id:
            attributes["gen_ai.tool.call.id"] = self.tool_call_id
        self._span = rt.instruments.tracer.start_span(
            f"execute_tool {self.name}", kind=SpanKind.INTERNAL, attributes=attributes
        )
        predicted: float | None = rt.tool_history.predict(self.name)
        if rt.journal is not None:
            predicted = await rt.journal.predict_tool_duration(self.name)
        wait = track_wait(frame, node, wire_kind="tool", predicted_s=predicted)
        try:
            await wait.__aenter__()
        except BaseException:
            self._close("error", None)
            raise
        self._wait = wait
        self._started_s = anyio.current_time()
        return node

    async def finish(self, error: BaseException | None = None) -> None:
        """Close the step: ``error`` None = the tool succeeded. Idempotent."""
        wait, self._wait = self._wait, None
        if wait is None:
            return
        duration_s = anyio.current_time() - self._started_s
        cancelled = isinstance(error, anyio.get_cancelled_exc_class())
        status: NodeStatus = "ok" if error is None else "cancelled" if cancelled else "error"
        try:
            if error is None:
                await wait.__aexit__(None, None, None)
            else:
                await wait.__aexit__(type(error), error, error.__traceback__)
        finally:
            self._close(status, error)
        if error is None:
            rt = self.frame.run.runtime
            rt.tool_history.record(self.name, duration_s)
            rt.instruments.tool_duration.record(duration_s, {"gen_ai.tool.name": self.name})
            if rt.journal is not None:
                await rt.journal.record_tool_duration(self.name, duration_s)

    def _close(self, status: NodeStatus, error: BaseException | None) -> None:
        if self.node is not None:
            self.frame.run.end_node(self.frame.chain, self.node, status, error)
        span, self._span = self._span, None
        if span is None:
            return
        if status != "ok":
            error_type = type(error).__qualname__ if error is not None else status
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR, error_type))
        span.end()
