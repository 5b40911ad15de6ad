"""Where a framework's tool run goes in the program, for adapters whose framework lets us wrap
each tool execution (the OpenAI Agents SDK's ``FunctionTool``, Pydantic AI's capabilities, Agent
Framework's middleware, AutoGen's tools).

One :class:`~agentrt_adapters._lanes.Lanes` per agent run travels in :data:`ACTIVE_LANES`
(set by the adapter's entry point, copied into the framework's tasks with the context). A tool
run is one *unit* of its lanes: on the run's own frame when nothing else runs there, on a
thread forked from it when another tool of the same model turn still runs (parallel tool
calls → threads). The tool becomes a ``tool`` node with its tool-wait events
(:class:`~agentrt_adapters._steps.ToolStep`); work done inside it — a sub-agent's LLM calls and
tools — runs on a frame chained off that node, with lanes of its own, so a sub-agent's parallel
tools fork from the sub-agent's thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar

from agentrt.runtime.frame import CURRENT_FRAME, Frame
from agentrt_adapters._lanes import Lanes, Unit
from agentrt_adapters._steps import ToolStep

__all__ = ["ACTIVE_LANES", "agent_lanes", "observed_tool", "placed_unit"]

#: The lanes of the agent run in progress (None outside an adapter's entry point).
ACTIVE_LANES: ContextVar[Lanes | None] = ContextVar("agentrt_adapter_lanes", default=None)


@contextmanager
def agent_lanes(frame: Frame) -> Iterator[Lanes]:
    """Run an agent on ``frame``: its tool runs are placed on lanes rooted there."""
    lanes = Lanes(frame)
    token = ACTIVE_LANES.set(lanes)
    try:
        yield lanes
    finally:
        ACTIVE_LANES.reset(token)


@contextmanager
def placed_unit() -> Iterator[Frame | None]:
    """One unit of work on its frame: the current frame, or a fork of it when the active lanes'
    root is busy. ``None`` outside any program. Without active lanes for the current frame
    (the framework was called directly inside ``rt.program``), the current frame itself."""
    frame = CURRENT_FRAME.get()
    lanes = ACTIVE_LANES.get()
    if frame is None or lanes is None or lanes.root.frame.graph is not frame.graph:
        yield frame
        return
    unit: Unit = lanes.begin_unit(lanes.root)
    token = CURRENT_FRAME.set(unit.frame)
    try:
        yield unit.frame
    finally:
        CURRENT_FRAME.reset(token)
        lanes.end_unit(unit)


@asynccontextmanager
async def observed_tool(name: str, *, tool_call_id: str = "") -> AsyncIterator[Frame | None]:
    """Report the tool run in the block: a ``tool`` node (named ``name``, carrying the model's
    ``tool_call_id``) with its tool-wait events and predicted duration, placed by
    :func:`placed_unit`. The block runs on a frame chained off the node (returned; ``None``
    outside any program, where nothing is reported). An exception or cancellation leaving the
    block ends the node ``error`` / ``cancelled`` and propagates."""
    with placed_unit() as frame:
        if frame is None:
            yield None
            return
        step = ToolStep(frame, name, tool_call_id=tool_call_id)
        node = await step.start()
        inner = frame.nested(node)
        frame_token = CURRENT_FRAME.set(inner)
        lanes_token = ACTIVE_LANES.set(Lanes(inner))
        try:
            yield inner
        except BaseException as exc:
            await step.finish(exc)
            raise
        finally:
            ACTIVE_LANES.reset(lanes_token)
            CURRENT_FRAME.reset(frame_token)
        await step.finish(None)
