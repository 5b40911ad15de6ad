"""Pydantic AI adapter: agentrt tagging, threads and tool waits for ``pydantic-ai-slim`` 2.68.

Needs the ``pydantic-ai`` extra (``pip install 'agentrt-adapters[pydantic-ai]'``). Pieces:

* :func:`chat_model` / :func:`responses_model` — Pydantic AI's ``OpenAIChatModel`` (Chat
  Completions) or ``OpenAIResponsesModel`` on an ``OpenAIProvider`` holding the runtime's
  tagging ``openai.AsyncOpenAI``: every request, streamed or not, carries the current program's
  tags, deadline and ``traceparent``, and is an ``llm`` node of the program;
* :class:`AgentrtCapability` — a Pydantic AI capability (``Agent(capabilities=[...])`` or per
  run) that maps the run onto the program it runs in: each tool execution is a ``tool`` node
  with tool-wait events (name, predicted duration) reported to the controller, and tool calls
  of one model response that run concurrently get threads of their own;
* :func:`agentrt_tool` / :func:`pydantic_tools` — ``agentrt.Tool``\\ s as Pydantic AI tools,
  run by the SDK: validation, node, tool wait, timeout and the intent journal for side effects;
* :func:`run_agent` (one call: the agent's run as one program) and :func:`run_in_program` /
  :func:`stream_in_program` (inside the caller's ``rt.program(...)``).

How the run maps onto the program: model requests follow each other in one thread; the tool
calls of one response run concurrently, the first on the agent's thread, the others on threads
forked from it, and the next request depends on all of them; a sub-agent run from a tool
(agent delegation) is nested in that tool's node — its requests and tools chain off it, in the
tool's thread (give the sub-agent the capability too, to report its tools). The program's
deadline cancels the run: the request in flight has its HTTP stream closed, so the server
aborts it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Literal

import openai
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.capabilities import (
    AbstractCapability,
    ValidatedToolArgs,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError, UsageLimitExceeded
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import Model
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.result import StreamedRunResult
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import UsageLimits

from agentrt.errors import LLMCallError
from agentrt.runtime.chat import current_runtime
from agentrt.runtime.frame import CURRENT_FRAME, Frame
from agentrt.runtime.runtime import Runtime
from agentrt.tools.runner import run_tool
from agentrt.tools.schema import Tool as AgentrtTool
from agentrt_adapters._common import AgentRun, llm_errors
from agentrt_adapters._placement import agent_lanes, observed_tool, placed_unit
from agentrt_adapters._runs import (
    configured_model,
    require_frame,
    run_agent_as_program,
    served_model_name,
)

__all__ = [
    "AgentrtCapability",
    "ModelAPI",
    "agentrt_tool",
    "chat_model",
    "pydantic_tools",
    "responses_model",
    "run_agent",
    "run_in_program",
    "stream_in_program",
]

#: ``chat_completions``: ``/v1/chat/completions`` (Pydantic AI's usual OpenAI API);
#: ``responses``: ``/v1/responses``.
ModelAPI = Literal["chat_completions", "responses"]

#: Tool metadata marking an agentrt tool (it reports itself; the capability only places it).
AGENTRT_TOOL = "agentrt_tool"
#: The tool call id a capability reports in this context (so that a second one does not).
_REPORTING: ContextVar[str | None] = ContextVar("agentrt_pydantic_ai_reporting", default=None)


def chat_model(runtime: Runtime | None = None, model: str | None = None) -> OpenAIChatModel:
    """``OpenAIChatModel`` for ``model`` (default ``RuntimeConfig.model``) on the runtime's
    tagging client. Raises ``ConfigError`` without a model."""
    rt = current_runtime(runtime)
    provider = OpenAIProvider(openai_client=rt.openai_client())
    return OpenAIChatModel(configured_model(rt, model), provider=provider)


def responses_model(
    runtime: Runtime | None = None, model: str | None = None
) -> OpenAIResponsesModel:
    """``OpenAIResponsesModel`` for ``model`` (default ``RuntimeConfig.model``) on the runtime's
    tagging client (our controller proxies ``/v1/responses``). Raises ``ConfigError`` without
    a model."""
    rt = current_runtime(runtime)
    provider = OpenAIProvider(openai_client=rt.openai_client())
    return OpenAIResponsesModel(configured_model(rt, model), provider=provider)


class AgentrtCapability(AbstractCapability[Any]):
    """Reports a Pydantic AI run's tool executions to the program it runs in.

    Give it to the agent (``Agent(..., capabilities=[AgentrtCapability()])``) or to one run
    (``agent.run(..., capabilities=[...])``; :func:`run_agent` does). Inside a program each
    tool execution is a ``tool`` node with tool-wait events, on a thread of its own when it
    runs alongside another; outside any program it changes nothing. Stateless: one instance
    serves any number of runs (the run's thread assignment travels in its context).
    """

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> Any:
        frame = CURRENT_FRAME.get()
        if frame is None:
            return await handler()
        # Set before the handler: Pydantic AI's tool tasks inherit it.
        with agent_lanes(frame):
            return await handler()

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        if _REPORTING.get() == call.tool_call_id:
            # Another AgentrtCapability (the agent's own and one given to the run) has it.
            return await handler(args)
        token = _REPORTING.set(call.tool_call_id)
        try:
            if (tool_def.metadata or {}).get(AGENTRT_TOOL):
                with placed_unit():  # run_tool records the node and its wait itself
                    return await handler(args)
            async with observed_tool(call.tool_name, tool_call_id=call.tool_call_id):
                return await handler(args)
        finally:
            _REPORTING.reset(token)


def agentrt_tool(tool: AgentrtTool[Any]) -> Tool[Any]:
    """An ``agentrt.Tool`` as a Pydantic AI tool: the SDK runs it — validated arguments, a
    ``tool`` node (with the model's tool call id), tool-wait events, its timeout and, for
    side-effect tools, the intent journal (docs/journal.md). A ``ToolError`` goes back to the
    model as ``Error: ...`` text; anything else (a ``JournalError`` such as
    ``UnknownOutcome``, the deadline) ends the run."""

    async def invoke(ctx: RunContext[Any], **arguments: Any) -> str:
        result = await run_tool(tool, arguments, tool_call_id=ctx.tool_call_id or "")
        return result.content

    converted: Tool[Any] = Tool.from_schema(
        invoke,
        name=tool.name,
        description=tool.description or tool.name,
        json_schema=tool.args_model.model_json_schema(),
        takes_ctx=True,
    )
    converted.metadata = {AGENTRT_TOOL: True}
    return converted


def pydantic_tools(tools: Sequence[Any]) -> list[Any]:
    """``tools`` with every ``agentrt.Tool`` made a Pydantic AI tool (:func:`agentrt_tool`);
    Pydantic AI tools and plain functions are kept (the capability reports their runs)."""
    return [agentrt_tool(t) if isinstance(t, AgentrtTool) else t for t in tools]


@contextlib.contextmanager
def _model_errors(frame: Frame) -> Iterator[None]:
    """Pydantic AI's model errors as agentrt's: the openai client's error under one is
    translated as :func:`~agentrt_adapters._common.llm_errors` does; an HTTP error without one
    becomes ``LLMCallError`` with its status."""
    try:
        yield
    except ModelAPIError as exc:
        cause = exc.__cause__
        if isinstance(cause, openai.OpenAIError):
            with llm_errors(frame):
                raise cause from exc
        status = exc.status_code if isinstance(exc, ModelHTTPError) else None
        raise LLMCallError(f"LLM call failed: {exc}", status_code=status) from exc


async def run_in_program(
    agent: Agent[Any, Any], prompt: str, *, model: Model | None = None, **run_options: Any
) -> AgentRunResult[Any]:
    """``agent.run(prompt)`` inside the current program (one the caller opened), with
    :class:`AgentrtCapability` added for this run. ``model``: the model to run with (default
    the agent's own). ``run_options``: more ``agent.run`` arguments (``deps``,
    ``usage_limits``, ``model_settings``...). Model errors become agentrt's (``LLMCallError``,
    ``EndpointUnavailable``, ``DeadlineExceeded``). Raises ``AgentrtError`` outside a program."""
    frame = require_frame("run_in_program")
    options = _with_capability(run_options)
    with _model_errors(frame):
        result: AgentRunResult[Any] = await agent.run(prompt, model=model, **options)
    return result


@contextlib.asynccontextmanager
async def stream_in_program(
    agent: Agent[Any, Any], prompt: str, *, model: Model | None = None, **run_options: Any
) -> AsyncIterator[StreamedRunResult[Any, Any]]:
    """``agent.run_stream(prompt)`` inside the current program, as ``async with
    stream_in_program(agent, "task") as result: async for text in result.stream_text(): ...``.
    Arguments as for :func:`run_in_program`; leaving the block early cancels the run (the
    request in flight is aborted upstream)."""
    frame = require_frame("stream_in_program")
    options = _with_capability(run_options)
    with _model_errors(frame):
        async with agent.run_stream(prompt, model=model, **options) as result:
            yield result


async def run_agent(
    runtime: Runtime,
    agent: Agent[Any, Any],
    prompt: str,
    *,
    name: str | None = None,
    model: str | None = None,
    api: ModelAPI = "chat_completions",
    max_requests: int = 10,
    timeout_s: float | None = None,
    program_id: str | None = None,
    new_program: bool = True,
    run_options: Mapping[str, Any] | None = None,
) -> AgentRun:
    """Run ``agent`` on ``prompt`` with ``agent.run``.

    The run's model is ``model`` (default ``RuntimeConfig.model``, else the model the server
    serves) on the runtime (``api``: ``chat_completions`` or ``responses``) — an agent's own
    model would not be tagged unless built with :func:`chat_model`. ``max_requests``: model
    requests at most (``stop_reason="max_steps"`` when reached). ``new_program=True``: as a
    program of its own named ``name`` (default the agent's; ``timeout_s``: its budget in
    seconds, ``DeadlineExceeded`` past it; ``program_id``: default a fresh one);
    ``new_program=False``: inside the current program. ``run_options``: more ``agent.run``
    arguments. The answer is the run's output as text.
    """
    rt = current_runtime(runtime)
    chosen = await served_model_name(rt, model)
    build: Callable[[Runtime, str], Model] = responses_model if api == "responses" else chat_model
    options = dict(run_options or {})
    options.setdefault("usage_limits", UsageLimits(request_limit=max_requests))
    options["model"] = build(rt, chosen)

    return await run_agent_as_program(
        rt,
        lambda: run_in_program(agent, prompt, **options),
        lambda result: result.output,
        step_limit=UsageLimitExceeded,
        new_program=new_program,
        name=name or agent.name or "pydantic-ai-agent",
        timeout_s=timeout_s,
        program_id=program_id,
    )


def _with_capability(run_options: dict[str, Any]) -> dict[str, Any]:
    capabilities = list(run_options.get("capabilities") or ())
    if not any(isinstance(c, AgentrtCapability) for c in capabilities):
        capabilities.append(AgentrtCapability())
    return {**run_options, "capabilities": capabilities}
