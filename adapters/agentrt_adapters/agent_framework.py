"""Microsoft Agent Framework adapter: agentrt tagging, threads and tool waits for
``agent-framework-core`` 1.x agents (AutoGen's successor).

Needs the ``agent-framework`` extra (``pip install 'agentrt-adapters[agent-framework]'``:
``agent-framework-core`` and its OpenAI chat client, ``agent-framework-openai``). Pieces:

* :class:`AgentrtChatClient` — the framework's ``OpenAIChatCompletionClient`` on the
  runtime's tagging ``openai.AsyncOpenAI``: every model call, streamed or not, carries the
  tags of the program it is made in and becomes an ``llm`` node; its function middleware
  (:class:`ToolNodes`) makes every tool run a ``tool`` node with tool-wait events;
* :func:`agent_framework_tools` — ``agentrt.Tool``s as the framework's ``FunctionTool``s,
  run by the SDK (validation, timeout, the intent journal for side effects);
* :func:`run_agent` / :func:`run_in_program` / :func:`run_chat_agent` — run an agent as one
  agentrt program, or inside the caller's (parallel tool calls get threads of their own,
  sub-agents' calls chain off the tool that runs them).

The code lives in ``agentrt_adapters._af_core``. See docs/adapters.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_framework import Agent, AgentResponse, FunctionTool, MiddlewareFailure
from agent_framework.exceptions import MiddlewareException

from agentrt.errors import ConfigError, JournalError
from agentrt.runtime.chat import current_runtime
from agentrt.runtime.program import Program
from agentrt.runtime.runtime import Runtime
from agentrt.tools.runner import run_tool
from agentrt.tools.schema import Tool
from agentrt_adapters._af_core import (
    AGENTRT_TOOL,
    AgentrtChatClient,
    ToolNodes,
    current_call_id,
    run_scope,
)
from agentrt_adapters._common import AgentRun, StopReason
from agentrt_adapters._runs import current_program

__all__ = [
    "AgentrtChatClient",
    "ToolNodes",
    "agent_framework_tools",
    "run_agent",
    "run_chat_agent",
    "run_in_program",
    "run_scope",
]


def agent_framework_tools(tools: Sequence[Any]) -> list[Any]:
    """``tools`` with every ``agentrt.Tool`` made a ``FunctionTool`` that the SDK runs —
    validated arguments, a ``tool`` node, tool-wait events, its timeout and, for side-effect
    tools, the intent journal (docs/journal.md). Its error results (``ToolError``,
    ``ToolFailed``) go back to the model as ``Error: ...`` text; a ``JournalError`` (e.g.
    ``UnknownOutcome``) ends the run instead — handed to the model, it could call the tool
    again: a new step, the effect repeated blindly. Framework tools and plain functions are
    left as they are (the framework converts functions; :class:`ToolNodes` reports them)."""
    return [_function_tool(item) if isinstance(item, Tool) else item for item in tools]


def _function_tool(tool: Tool[Any]) -> FunctionTool:
    async def run(**arguments: Any) -> str:
        try:
            result = await run_tool(tool, arguments, tool_call_id=current_call_id())
        except JournalError as exc:
            # The framework hands ordinary exceptions to the model; a MiddlewareFailure aborts
            # the run (run_in_program raises the journal error itself).
            raise MiddlewareFailure(f"agentrt tool {tool.name}: {exc}") from exc
        return result.content

    return FunctionTool(
        name=tool.name,
        description=tool.description or tool.name,
        func=run,
        input_model=tool.args_model,
        additional_properties={AGENTRT_TOOL: True},
    )


async def run_in_program(agent: Any, messages: Any = None, **run_options: Any) -> AgentResponse:
    """``await agent.run(messages, **run_options)`` inside the current program (one the caller
    opened) with the adapter's thread assignment (:func:`run_scope`); returns the response.

    A journal error of an agentrt tool is raised as itself (not the framework's
    ``MiddlewareFailure``). ``AgentrtError`` outside a program. For a streamed run, iterate
    ``agent.run(..., stream=True)`` inside ``with run_scope():`` yourself."""
    with run_scope():
        try:
            response: AgentResponse = await agent.run(messages, **run_options)
        except MiddlewareException as exc:
            journal = _journal_error_in(exc)
            if journal is None:
                raise
            raise journal from exc
    return response


def _journal_error_in(exc: BaseException) -> JournalError | None:
    """The ``JournalError`` an agentrt tool raised under the framework's wrapping, if any."""
    seen: BaseException | None = exc
    for _ in range(16):  # sub-agents nest the wrapping; bounded against a cycle
        if seen is None:
            return None
        if isinstance(seen, JournalError):
            return seen
        seen = seen.__cause__
    return None


async def run_agent(
    agent: Any,
    messages: Any = None,
    *,
    runtime: Runtime | None = None,
    name: str | None = None,
    timeout_s: float | None = None,
    program_id: str | None = None,
    **run_options: Any,
) -> tuple[AgentResponse, Program]:
    """Run ``agent.run(messages, **run_options)`` (an Agent Framework agent) as one agentrt
    program; returns ``(response, program)``.

    ``name`` defaults to the agent's name; ``timeout_s`` is the program's budget (seconds;
    ``DeadlineExceeded`` past it, the model call in flight aborted at the server).
    """
    rt = current_runtime(runtime)
    label = name or str(getattr(agent, "name", None) or "agent-framework-agent")
    async with rt.program(
        label, program_id=program_id, timeout_s=timeout_s, operation="invoke_agent"
    ) as program:
        response = await run_in_program(agent, messages, **run_options)
    return response, program


async def run_chat_agent(
    runtime: Runtime,
    task: str,
    tools: Sequence[Tool[Any] | FunctionTool | Callable[..., Any]],
    *,
    model: str | None = None,
    system: str | None = None,
    name: str = "agent-framework-assistant",
    max_tool_iterations: int = 3,
    timeout_s: float | None = None,
    max_tokens: int | None = 256,
    program_id: str | None = None,
    model_options: Mapping[str, Any] | None = None,
    new_program: bool = True,
) -> AgentRun:
    """Run one Agent Framework ``Agent`` with ``tools`` on ``task``.

    ``tools``: ``agentrt.Tool``s (run by the SDK, journal included), ``FunctionTool``s
    (``@agent_framework.tool``) or plain functions with type hints and a docstring. The agent
    makes at most ``max_tool_iterations`` model calls that may call tools; past them the
    framework asks for a final answer without tools (``stop_reason="max_steps"``).
    ``new_program=True``: as a program of its own named ``name`` (``timeout_s``: its budget in
    seconds; ``program_id``: default a fresh one); ``new_program=False``: inside the current
    program. ``max_tokens``: per model call (None = the server's default); ``model_options``:
    more chat options (``temperature``, ``extra_body``...).
    """
    if max_tool_iterations < 1:
        raise ConfigError(f"max_tool_iterations must be >= 1, got {max_tool_iterations}")
    options: dict[str, Any] = dict(model_options or {})
    if max_tokens is not None:
        options.setdefault("max_tokens", max_tokens)
    client = AgentrtChatClient(
        runtime,
        model,
        # The model reads a failed tool's exception (the framework's default hides it), as it
        # reads an agentrt tool's ToolFailed.
        function_invocation_configuration={
            "max_iterations": max_tool_iterations,
            "include_detailed_errors": True,
        },
    )
    agent = Agent(
        client,
        system or "You are a helpful assistant. Use tools when they help.",
        name=_agent_name(name),
        tools=agent_framework_tools(tools),
    )
    if new_program:
        response, program = await run_agent(
            agent,
            task,
            runtime=runtime,
            name=name,
            timeout_s=timeout_s,
            program_id=program_id,
            options=options,
        )
    else:
        program = current_program("run_chat_agent(new_program=False)")
        response = await run_in_program(agent, task, options=options)
    # Past its iterations the framework made one more call, without tools.
    reason: StopReason = "max_steps" if client.llm_calls > max_tool_iterations else "answer"
    answer = response.text.strip() if reason == "answer" else ""
    return AgentRun(program, answer or None, reason, raw=response)


def _agent_name(name: str) -> str:
    """A name the framework accepts for the agent (the program keeps ``name`` itself)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "assistant"
