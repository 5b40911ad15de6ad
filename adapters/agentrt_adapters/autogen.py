"""AutoGen adapter: agentrt tagging and tool waits for autogen-core / autogen-agentchat 0.7.

Needs the ``autogen`` extra (``pip install 'agentrt-adapters[autogen]'``). AutoGen fixes a client's
headers when the client is built and rejects per-call ``extra_headers``, so tags cannot be
passed per call; instead:

* :class:`AgentrtChatCompletionClient` — AutoGen's OpenAI client built on the runtime's tagging
  ``openai.AsyncOpenAI``: its transport reads the current program from contextvars at send
  time, so one client serves every program, streamed or not;
* :func:`agentrt_tools` — wraps AutoGen tools (or plain functions) so that each execution is a
  ``tool`` node of the program and a tool wait reported to the controller;
* :func:`run_agent` / :func:`run_assistant_agent` — run an agent or team on a task as one
  agentrt program (parallel tool calls of one model turn get threads of their own).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from autogen_core import CancellationToken
from autogen_core.models import CreateResult, LLMMessage, ModelFamily, ModelInfo
from autogen_core.tools import BaseTool, FunctionTool, ToolSchema
from autogen_ext.models.openai import BaseOpenAIChatCompletionClient
from pydantic import BaseModel

from agentrt.errors import AgentrtError, ConfigError, JournalError
from agentrt.runtime.chat import current_runtime
from agentrt.runtime.frame import CURRENT_FRAME
from agentrt.runtime.runtime import Runtime
from agentrt.tools.runner import run_tool
from agentrt.tools.schema import Tool
from agentrt_adapters._common import AgentRun, StopReason, llm_errors
from agentrt_adapters._placement import agent_lanes, observed_tool, placed_unit
from agentrt_adapters._runs import configured_model, current_program

__all__ = [
    "DEFAULT_MODEL_INFO",
    "AgentrtChatCompletionClient",
    "AgentrtTool",
    "ReportedTool",
    "agentrt_tools",
    "run_agent",
    "run_assistant_agent",
    "run_in_program",
]

#: What AutoGen is told about a model it does not know by name (any vLLM-served model with
#: tool calling). Pass ``model_info`` for anything else.
DEFAULT_MODEL_INFO: ModelInfo = {
    "vision": False,
    "function_calling": True,
    "json_output": True,
    "family": ModelFamily.UNKNOWN,
    "structured_output": True,
    "multiple_system_messages": True,
}

#: Journal errors of agentrt tools in the current run: they end the run (see AgentrtTool).
_FATAL: ContextVar[list[JournalError] | None] = ContextVar("agentrt_autogen_fatal", default=None)


class AgentrtChatCompletionClient(BaseOpenAIChatCompletionClient):
    """AutoGen's OpenAI chat completion client talking through an agentrt ``Runtime``.

    Build it inside ``async with Runtime(...)``; every call it makes is tagged with the program
    it is made in (an ad-hoc one outside any program). ``model`` defaults to
    ``RuntimeConfig.model``; ``model_info`` to :data:`DEFAULT_MODEL_INFO`; ``create_args`` are
    default chat completion parameters (``temperature``, ``max_tokens``...). openai errors
    become agentrt's (``LLMCallError``, ``EndpointUnavailable``, ``DeadlineExceeded``).
    """

    def __init__(
        self,
        runtime: Runtime | None = None,
        model: str | None = None,
        *,
        model_info: ModelInfo | None = None,
        **create_args: Any,
    ) -> None:
        rt = current_runtime(runtime)
        model = configured_model(rt, model)
        super().__init__(
            client=rt.openai_client(),
            create_args={**create_args, "model": model},
            model_info=model_info or DEFAULT_MODEL_INFO,
        )

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Any] = (),
        tool_choice: Any = "auto",
        json_output: bool | type[BaseModel] | None = None,
        extra_create_args: Mapping[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
    ) -> CreateResult:
        with placed_unit() as frame, llm_errors(frame):
            result: CreateResult = await super().create(
                messages,
                tools=list(tools),
                tool_choice=tool_choice,
                json_output=json_output,
                extra_create_args=extra_create_args or {},
                cancellation_token=cancellation_token,
            )
        return result

    async def create_stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Any] = (),
        tool_choice: Any = "auto",
        json_output: bool | type[BaseModel] | None = None,
        extra_create_args: Mapping[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
        max_consecutive_empty_chunk_tolerance: int = 0,
        include_usage: bool | None = None,
    ) -> AsyncGenerator[str | CreateResult, None]:
        frame = CURRENT_FRAME.get()
        stream = super().create_stream(
            messages,
            tools=list(tools),
            tool_choice=tool_choice,
            json_output=json_output,
            extra_create_args=extra_create_args or {},
            cancellation_token=cancellation_token,
            max_consecutive_empty_chunk_tolerance=max_consecutive_empty_chunk_tolerance,
            include_usage=include_usage,
        )
        try:
            # The request is sent (and tagged) in the first step; placing only that step
            # keeps the context change inside one resumption of this generator.
            with placed_unit() as frame, llm_errors(frame):
                try:
                    first = await anext(stream)
                except StopAsyncIteration:
                    return
            yield first
            with llm_errors(frame):
                async for item in stream:
                    yield item
        finally:
            await stream.aclose()


class ReportedTool(BaseTool[BaseModel, Any]):
    """An AutoGen tool whose executions are agentrt ``tool`` nodes with tool-wait events.

    Same name, description, schema and result as ``inner``; outside any program it just runs
    ``inner``. Work the tool does itself (e.g. an LLM call) chains off its node.
    """

    def __init__(self, inner: BaseTool[Any, Any]) -> None:
        super().__init__(inner.args_type(), inner.return_type(), inner.name, inner.description)
        self.inner = inner

    @property
    def schema(self) -> ToolSchema:
        return self.inner.schema

    def return_value_as_string(self, value: Any) -> str:
        return self.inner.return_value_as_string(value)

    async def run(self, args: BaseModel, cancellation_token: CancellationToken) -> Any:
        return await self.inner.run(args, cancellation_token)

    async def run_json(
        self,
        args: Mapping[str, Any],
        cancellation_token: CancellationToken,
        call_id: str | None = None,
    ) -> Any:
        async with observed_tool(self.name, tool_call_id=call_id or ""):
            return await self.inner.run_json(args, cancellation_token, call_id)


class AgentrtTool(BaseTool[BaseModel, Any]):
    """An ``agentrt.Tool`` as an AutoGen tool: the SDK runs it — validated arguments, a
    ``tool`` node, tool-wait events, its timeout and, for side-effect tools, the intent journal
    (docs/journal.md). A ``ToolError`` is raised for AutoGen to hand back to the model; a
    ``JournalError`` (e.g. ``UnknownOutcome``, or no journal for a side effect) ends the run
    under :func:`run_agent` / :func:`run_in_program`, which raise it to the caller."""

    def __init__(self, tool: Tool[Any]) -> None:
        super().__init__(tool.args_model, object, tool.name, tool.description or tool.name)
        self.tool = tool

    async def run(self, args: BaseModel, cancellation_token: CancellationToken) -> Any:
        return await self._call(args, "", cancellation_token)

    async def run_json(
        self,
        args: Mapping[str, Any],
        cancellation_token: CancellationToken,
        call_id: str | None = None,
    ) -> Any:
        return await self._call(args, call_id or "", cancellation_token)

    async def _call(
        self, args: BaseModel | Mapping[str, Any], call_id: str, token: CancellationToken
    ) -> Any:
        try:
            with placed_unit():
                result = await run_tool(self.tool, args, tool_call_id=call_id)
        except JournalError as exc:
            # AutoGen would hand this to the model, which may call the tool again — a new step
            # with a new key, i.e. the effect repeated blindly (docs/journal.md). Stop the run
            # instead; run_in_program raises this error to the caller.
            fatal = _FATAL.get()
            if fatal is not None:
                fatal.append(exc)
                token.cancel()
            raise
        if result.error is not None:
            raise result.error
        return result.value


def agentrt_tools(
    tools: Sequence[BaseTool[Any, Any] | Tool[Any] | Callable[..., Any]],
) -> list[BaseTool[Any, Any]]:
    """Make every item an AutoGen tool whose executions are reported: ``agentrt.Tool``s run
    by the SDK (:class:`AgentrtTool`, journal included); AutoGen tools and plain (async)
    functions with type hints and a docstring (made ``FunctionTool``s) observed by
    :class:`ReportedTool`."""
    wrapped: list[BaseTool[Any, Any]] = []
    for item in tools:
        if isinstance(item, ReportedTool | AgentrtTool):
            wrapped.append(item)
        elif isinstance(item, Tool):
            wrapped.append(AgentrtTool(item))
        elif isinstance(item, BaseTool):
            wrapped.append(ReportedTool(item))
        elif callable(item):
            description = (getattr(item, "__doc__", None) or "").strip().split("\n\n")[0]
            name = getattr(item, "__name__", "tool")
            wrapped.append(ReportedTool(FunctionTool(item, description=description or name)))
        else:
            raise ConfigError(f"not a tool: {item!r}")
    return wrapped


async def run_agent(
    agent: Any,
    task: str,
    *,
    runtime: Runtime | None = None,
    name: str | None = None,
    timeout_s: float | None = None,
    program_id: str | None = None,
) -> tuple[Any, Any]:
    """Run ``agent.run(task=task)`` (an AutoGen agent or team) as one agentrt program.

    Returns ``(task_result, program)``. ``name`` defaults to the agent's name; ``timeout_s``
    is the program's budget (seconds; ``DeadlineExceeded`` past it).
    """
    rt = current_runtime(runtime)
    label = name or str(getattr(agent, "name", "autogen-agent"))
    async with rt.program(
        label, program_id=program_id, timeout_s=timeout_s, operation="invoke_agent"
    ) as program:
        result = await run_in_program(agent, task)
    return result, program


async def run_in_program(agent: Any, task: str) -> Any:
    """Run ``agent.run(task=task)`` inside the current program (one the caller opened), with
    the adapter's thread assignment; returns the task result. ``AgentrtError`` outside one."""
    frame = CURRENT_FRAME.get()
    if frame is None:
        raise AgentrtError("run_in_program needs a current program (`async with rt.program()`)")
    fatal: list[JournalError] = []
    fatal_token = _FATAL.set(fatal)
    try:
        with agent_lanes(frame):
            result = await agent.run(task=task)
    except BaseException:
        if fatal:
            raise fatal[0] from None
        raise
    finally:
        _FATAL.reset(fatal_token)
    if fatal:
        raise fatal[0]
    return result


async def run_assistant_agent(
    runtime: Runtime,
    task: str,
    tools: Sequence[BaseTool[Any, Any] | Tool[Any] | Callable[..., Any]],
    *,
    model: str | None = None,
    system: str | None = None,
    name: str = "autogen-assistant",
    max_tool_iterations: int = 3,
    timeout_s: float | None = None,
    max_tokens: int | None = 256,
    program_id: str | None = None,
    model_options: Mapping[str, Any] | None = None,
    new_program: bool = True,
) -> AgentRun:
    """Run one AutoGen ``AssistantAgent`` with ``tools`` on ``task``.

    ``tools``: ``agentrt.Tool``s, AutoGen tools or plain async functions (see
    :func:`agentrt_tools`). The agent makes at most ``max_tool_iterations`` rounds of tool
    calls (``stop_reason="max_steps"`` when it is still calling tools after them).
    ``new_program=True``: as a program of its own named ``name`` (``timeout_s``: its budget in
    seconds; ``program_id``: default a fresh one); ``new_program=False``: inside the current
    program. ``max_tokens``: per model call (None = the server's default); ``model_options``:
    more request parameters (``temperature``, ``extra_body``...).
    """
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.messages import TextMessage

    create_args: dict[str, Any] = dict(model_options or {})
    if max_tokens is not None:
        create_args.setdefault("max_tokens", max_tokens)
    client = AgentrtChatCompletionClient(runtime, model, **create_args)
    reported: list[BaseTool[Any, Any] | Callable[..., Any]] = [*agentrt_tools(tools)]
    try:
        agent = AssistantAgent(
            _identifier(name),
            model_client=client,
            tools=reported,
            system_message=system or "You are a helpful assistant. Use tools when they help.",
            max_tool_iterations=max_tool_iterations,
        )
        if new_program:
            result, program = await run_agent(
                agent, task, runtime=runtime, name=name, timeout_s=timeout_s, program_id=program_id
            )
        else:
            result = await run_in_program(agent, task)
            program = current_program("run_assistant_agent(new_program=False)")
    finally:
        await client.close()
    last = result.messages[-1] if result.messages else None
    answered = isinstance(last, TextMessage) and last.source == agent.name
    reason: StopReason = "answer" if answered else "max_steps"
    answer = last.content if answered and isinstance(last, TextMessage) else None
    return AgentRun(program, answer or None, reason, raw=result)


def _identifier(name: str) -> str:
    """AutoGen agent names must be Python identifiers; the program keeps ``name`` itself."""
    cleaned = re.sub(r"\W", "_", name) or "assistant"
    return cleaned if cleaned.isidentifier() else f"agent_{cleaned}"
