"""The OpenAI Agents SDK adapter's tool side: reported function tools, agentrt tools as function
tools, and agents whose every function tool is reported. Public names:
``agentrt_adapters.openai_agents``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from agents import Agent, FunctionTool, Handoff, function_tool
from agents.run_context import RunContextWrapper
from agents.tool import _get_function_tool_invoke_context
from agents.tool_context import ToolContext

from agentrt.errors import ConfigError
from agentrt.tools.runner import run_tool
from agentrt.tools.schema import Tool
from agentrt_adapters._placement import observed_tool, placed_unit

__all__ = ["agentrt_function_tool", "function_tools", "report_tool", "reported_agent"]

#: Marks a function tool whose runs are already reported (ours), so it is never wrapped twice.
_REPORTED = "_agentrt_reported"

ToolItem = FunctionTool | Tool[Any] | Callable[..., Any]


def report_tool(tool: FunctionTool) -> FunctionTool:
    """A copy of ``tool`` whose every run is an agentrt ``tool`` node with tool-wait events
    (name, predicted duration) on the thread the adapter assigns it. Same name, schema,
    guardrails and result; outside any program it just runs. An agent used as a tool
    (``agent.as_tool()``) is one too: its LLM calls chain off the tool's node. Idempotent."""
    if getattr(tool.on_invoke_tool, _REPORTED, False):
        return tool

    async def invoke(context: ToolContext[Any], arguments: str) -> Any:
        async with observed_tool(context.tool_name or tool.name, tool_call_id=context.tool_call_id):
            # What the SDK would have handed the original (a RunContextWrapper when it asks
            # for one): our wrapper asks for the ToolContext to read the call's id.
            inner_context = _get_function_tool_invoke_context(tool, context)
            return await tool.on_invoke_tool(inner_context, arguments)  # type: ignore[arg-type]

    setattr(invoke, _REPORTED, True)
    return dataclasses.replace(tool, on_invoke_tool=invoke)


def agentrt_function_tool(tool: Tool[Any]) -> FunctionTool:
    """An ``agentrt.Tool`` as a function tool: the SDK runs it — validated arguments, a
    ``tool`` node, tool-wait events, its timeout and, for side-effect tools, the intent journal
    (docs/journal.md). A ``ToolError`` goes back to the model as ``Error: ...`` text; anything
    else (a ``JournalError`` such as ``UnknownOutcome``, the deadline) ends the run."""

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        with placed_unit():
            result = await run_tool(tool, arguments or "{}", tool_call_id=context.tool_call_id)
        return result.content

    setattr(invoke, _REPORTED, True)
    return FunctionTool(
        name=tool.name,
        description=tool.description or tool.name,
        params_json_schema=tool.args_model.model_json_schema(),
        on_invoke_tool=invoke,
        strict_json_schema=False,
        # The journal decides about repeating a side effect; a raised JournalError must end
        # the run, never become text the model answers by calling the tool again.
        _failure_error_function=None,
        _use_default_failure_error_function=False,
    )


def function_tools(tools: Sequence[ToolItem]) -> list[FunctionTool]:
    """Every item as a reported function tool: ``agentrt.Tool``s run by the SDK
    (:func:`agentrt_function_tool`, journal included); function tools (``@function_tool``,
    ``agent.as_tool()``) and plain (async) functions with type hints and a docstring observed
    by :func:`report_tool`. Raises ``ConfigError`` for anything else."""
    converted: list[FunctionTool] = []
    for item in tools:
        if isinstance(item, Tool):
            converted.append(agentrt_function_tool(item))
        elif isinstance(item, FunctionTool):
            converted.append(report_tool(item))
        elif callable(item):
            converted.append(report_tool(function_tool(item)))
        else:
            raise ConfigError(f"not a tool: {item!r}")
    return converted


def reported_agent(agent: Agent[Any]) -> Agent[Any]:
    """A clone of ``agent`` whose function tools are reported (:func:`report_tool`), and so are
    those of every agent it can hand off to (a handoff cycle is followed once). Other tools
    (hosted, MCP) are kept as they are and not reported; so are the tools *inside* an agent
    used as a tool — build that agent's tools with :func:`function_tools` to report them."""
    return _Preparer().agent(agent)


class _Preparer:
    """Clones an agent graph once per agent (handoffs may form cycles)."""

    def __init__(self) -> None:
        self._done: dict[int, Agent[Any]] = {}

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        ready = self._done.get(id(agent))
        if ready is not None:
            return ready
        tools = [report_tool(t) if isinstance(t, FunctionTool) else t for t in agent.tools]
        clone = agent.clone(tools=tools, handoffs=[])
        self._done[id(agent)] = clone
        clone.handoffs = [self._handoff(h) for h in agent.handoffs]
        return clone

    def _handoff(self, target: Agent[Any] | Handoff[Any, Any]) -> Agent[Any] | Handoff[Any, Any]:
        if isinstance(target, Agent):
            return self.agent(target)
        original = target.on_invoke_handoff

        async def invoke(context: RunContextWrapper[Any], arguments: str) -> Any:
            chosen = await original(context, arguments)
            return self.agent(chosen) if isinstance(chosen, Agent) else chosen

        return dataclasses.replace(target, on_invoke_handoff=invoke)
