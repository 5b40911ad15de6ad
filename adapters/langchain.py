"""LangChain / LangGraph adapter: agentrt tagging, threads and tool waits for LangChain code.

Needs the ``langchain`` extra (``pip install 'agentrt[langchain]'``). Three pieces:

* :func:`chat_model` — a ``ChatOpenAI`` (subclass :class:`AgentrtChatOpenAI`) whose HTTP
  client is the runtime's tagging client: every call, streamed or not, carries the current
  program's call tags, deadline and ``traceparent`` (callbacks cannot add headers, so the
  tagging happens in the transport), and becomes an ``llm`` node of the program;
* :class:`AgentrtCallbackHandler` — passed in the run's config, it maps the LangGraph run
  onto the program it is created in: each LangGraph task that runs alongside another gets a
  thread of its own (``adapters._lanes``), and each tool execution becomes a ``tool`` node
  whose wait is reported to the controller (tool-start / tool-end, with a predicted duration);
* :func:`run_graph` / :func:`run_react_agent` — one call that runs a graph (or a ReAct agent
  built with ``langchain.agents.create_agent``) as one agentrt program.

Async only: ``ainvoke`` / ``astream``. The sync entry points of LangChain would bypass the
runtime's event loop and are not tagged.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, cast
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_openai import ChatOpenAI
from pydantic import Field

from adapters._common import AgentRun, StopReason, llm_errors
from adapters._lanes import Lanes, Unit
from adapters._steps import ToolStep
from agentrt.errors import AgentrtError, ConfigError
from agentrt.program.context import CURRENT_FRAME, Frame
from agentrt.runtime.chat import current_runtime
from agentrt.runtime.runtime import Runtime
from agentrt.tools.runner import run_tool
from agentrt.tools.schema import Tool

__all__ = [
    "AgentrtCallbackHandler",
    "AgentrtChatOpenAI",
    "AgentrtTool",
    "agentrt_config",
    "chat_model",
    "langchain_tools",
    "react_agent",
    "run_graph",
    "run_react_agent",
]

#: Metadata key marking an :class:`AgentrtTool` (it reports itself; the handler does not).
_AGENTRT_TOOL = "agentrt_tool"

#: Set while a placed call runs, so that ``_agenerate`` delegating to ``_astream`` (streaming
#: models) is placed once, not twice.
_PLACED: ContextVar[bool] = ContextVar("agentrt_langchain_placed", default=False)


class AgentrtCallbackHandler(AsyncCallbackHandler):
    """Maps one LangGraph / LangChain run onto the agentrt program it is created in.

    Create it inside ``async with rt.program(...)`` (or pass ``frame``) and put it in the run's
    ``config["callbacks"]`` — :func:`agentrt_config` does both. It observes task starts and
    ends (threads) and tool starts and ends (tool nodes and tool-wait events); it never
    changes what LangChain does. Raises ``AgentrtError`` when created outside a program.
    """

    #: Awaited in the caller's task, in order: the tool-start event reaches the controller
    #: before the tool runs.
    run_inline = True
    #: Our failures (e.g. a required controller that is gone) surface instead of being logged.
    raise_error = True

    def __init__(self, frame: Frame | None = None) -> None:
        super().__init__()
        frame = frame or CURRENT_FRAME.get()
        if frame is None:
            raise AgentrtError(
                "AgentrtCallbackHandler must be created inside a program "
                "(`async with rt.program(...)`), or use adapters.langchain.run_graph"
            )
        self.frame = frame
        self.lanes = Lanes(frame)
        self._task_runs: dict[UUID, str] = {}
        self._tools: dict[UUID, tuple[ToolStep, Unit]] = {}
        self._call_ids: dict[UUID, str] = {}

    # ----------------------------------------------------------------- LangGraph tasks
    async def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # Every run inside a task inherits the task's namespace; the first one seen is the
        # task's own run, whose end ends the task.
        namespace = _namespace(metadata)
        if namespace and namespace not in self._task_runs.values():
            self.lanes.open_task(namespace)
            self._task_runs[run_id] = namespace

    async def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_task(run_id)

    async def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_task(run_id)

    def _end_task(self, run_id: UUID) -> None:
        namespace = self._task_runs.pop(run_id, None)
        if namespace is not None:
            self.lanes.close_task(namespace)

    # ----------------------------------------------------------------- tools
    async def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if (metadata or {}).get(_AGENTRT_TOOL):
            # An agentrt tool reports itself (node, events, journal); it only needs its id.
            self._call_ids[run_id] = str(kwargs.get("tool_call_id") or "")
            return
        name = kwargs.get("name") or (serialized or {}).get("name") or "tool"
        unit = self.lanes.begin_unit(self.lanes.lane_for(_namespace(metadata)))
        step = ToolStep(unit.frame, str(name), tool_call_id=str(kwargs.get("tool_call_id") or ""))
        try:
            await step.start()
        except BaseException:
            self.lanes.end_unit(unit)
            raise
        self._tools[run_id] = (step, unit)

    async def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        await self._end_tool(run_id, None)

    async def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        await self._end_tool(run_id, error)

    async def _end_tool(self, run_id: UUID, error: BaseException | None) -> None:
        self._call_ids.pop(run_id, None)
        entry = self._tools.pop(run_id, None)
        if entry is None:
            return
        step, unit = entry
        try:
            await step.finish(error)
        finally:
            self.lanes.end_unit(unit)

    def call_id_of(self, run_id: UUID) -> str:
        """The model's tool call id of the agentrt tool run ``run_id`` ("" if unknown)."""
        return self._call_ids.get(run_id, "")

    def place(self, metadata: dict[str, Any] | None) -> Unit:
        """Frame for an LLM call made with ``metadata`` (its run's metadata)."""
        return self.lanes.begin_unit(self.lanes.lane_for(_namespace(metadata)))


def _namespace(metadata: dict[str, Any] | None) -> str | None:
    value = (metadata or {}).get("langgraph_checkpoint_ns")
    return value if isinstance(value, str) and value else None


class AgentrtChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` placed on the program's threads by an :class:`AgentrtCallbackHandler`.

    Build it with :func:`chat_model`. Without a handler in the run's callbacks a call is still
    tagged (with the current program, or an ad-hoc one outside any program); with one, it
    runs on the thread of the LangGraph task that makes it. openai errors become agentrt's
    (``LLMCallError``, ``EndpointUnavailable``, ``DeadlineExceeded``).
    """

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        handler, unit = _placement(run_manager)
        frame = unit.frame if unit is not None else CURRENT_FRAME.get()
        try:
            with _on_frame(unit), llm_errors(frame):
                result: ChatResult = await super()._agenerate(messages, stop, run_manager, **kwargs)
            return result
        finally:
            if handler is not None and unit is not None:
                handler.lanes.end_unit(unit)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        handler, unit = _placement(run_manager)
        frame = unit.frame if unit is not None else CURRENT_FRAME.get()
        stream = cast(
            AsyncGenerator[ChatGenerationChunk, None],
            super()._astream(messages, stop, run_manager, **kwargs),
        )
        try:
            # The request is sent (and tagged) during the first step; the body streams after.
            with _on_frame(unit), llm_errors(frame):
                try:
                    first = await anext(stream)
                except StopAsyncIteration:
                    return
            yield first
            with llm_errors(frame):
                async for chunk in stream:
                    yield chunk
        finally:
            try:
                await stream.aclose()
            finally:
                if handler is not None and unit is not None:
                    handler.lanes.end_unit(unit)


def _placement(run_manager: Any) -> tuple[AgentrtCallbackHandler | None, Unit | None]:
    if run_manager is None or _PLACED.get():
        return None, None
    handler = _handler_of(run_manager)
    if handler is None:
        return None, None
    return handler, handler.place(getattr(run_manager, "metadata", None))


@contextmanager
def _on_frame(unit: Unit | None) -> Iterator[None]:
    if unit is None:
        yield
        return
    frame_token = CURRENT_FRAME.set(unit.frame)
    placed_token = _PLACED.set(True)
    try:
        yield
    finally:
        _PLACED.reset(placed_token)
        CURRENT_FRAME.reset(frame_token)


class AgentrtTool(BaseTool):
    """An ``agentrt.Tool`` as a LangChain tool: the SDK runs it — validated arguments, a
    ``tool`` node, tool-wait events, its timeout and, for side-effect tools, the intent journal
    (BRIEF.md §6) — on the thread of the LangGraph task that calls it. Build with
    :func:`langchain_tools`. Failures the model can react to (``ToolError``) come back as
    ``Error: ...`` text; async only.
    """

    agentrt_tool: Any = Field(exclude=True)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise AgentrtError(f"agentrt tool {self.name} is async only: use ainvoke / astream")

    async def _arun(
        self, *args: Any, config: RunnableConfig, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        handler = _handler_of(run_manager)
        if handler is None:
            result = await run_tool(self.agentrt_tool, kwargs)
            return result.content
        unit = handler.place(getattr(run_manager, "metadata", None))
        token = CURRENT_FRAME.set(unit.frame)
        try:
            call_id = handler.call_id_of(run_manager.run_id)
            result = await run_tool(self.agentrt_tool, kwargs, tool_call_id=call_id)
        finally:
            CURRENT_FRAME.reset(token)
            handler.lanes.end_unit(unit)
        return result.content


def langchain_tools(tools: Sequence[Any]) -> list[Any]:
    """``tools`` with every ``agentrt.Tool`` made an :class:`AgentrtTool`; LangChain tools and
    plain functions are left as they are (LangChain converts functions itself)."""
    converted: list[Any] = []
    for item in tools:
        if isinstance(item, Tool):
            converted.append(
                AgentrtTool(
                    name=item.name,
                    description=item.description or item.name,
                    args_schema=item.args_model,
                    metadata={_AGENTRT_TOOL: True},
                    agentrt_tool=item,
                )
            )
        else:
            converted.append(item)
    return converted


def _handler_of(run_manager: Any) -> AgentrtCallbackHandler | None:
    for handler in getattr(run_manager, "handlers", ()):
        if isinstance(handler, AgentrtCallbackHandler):
            return handler
    return None


def chat_model(
    runtime: Runtime | None = None,
    model: str | None = None,
    *,
    model_class: type[AgentrtChatOpenAI] = AgentrtChatOpenAI,
    **kwargs: Any,
) -> AgentrtChatOpenAI:
    """A chat model for ``runtime`` (default: the current one), usable wherever ``ChatOpenAI``
    is — ``create_agent``, ``create_react_agent``, chains, ``bind_tools``.

    ``model`` defaults to ``RuntimeConfig.model``; ``kwargs`` are ``ChatOpenAI`` fields
    (``temperature``, ``max_tokens``, ``streaming``...). Base URL, key, retries, timeout and the
    HTTP client come from the runtime, which must be open. ``model_class``: a subclass of
    :class:`AgentrtChatOpenAI` to build instead. Raises ``ConfigError`` without a model.
    """
    rt = current_runtime(runtime)
    model = model or rt.config.model
    if not model:
        raise ConfigError("no model: pass model= or set RuntimeConfig.model")
    kwargs.setdefault("base_url", rt.config.base_url)
    kwargs.setdefault("api_key", rt.config.api_key)
    kwargs.setdefault("max_retries", rt.config.max_retries)
    kwargs.setdefault("timeout", rt.config.request_timeout_s)
    kwargs.setdefault("http_async_client", rt.http_client())
    # Our servers speak chat completions; usage in streams feeds the node's token counts.
    kwargs.setdefault("use_responses_api", False)
    kwargs.setdefault("stream_usage", True)
    return model_class(model=model, **kwargs)


def agentrt_config(config: RunnableConfig | None = None) -> RunnableConfig:
    """``config`` plus an :class:`AgentrtCallbackHandler` for the current program — pass it to
    ``graph.ainvoke(inputs, config=...)`` / ``astream`` inside ``async with rt.program(...)``."""
    merged: dict[str, Any] = dict(config or {})
    callbacks = merged.get("callbacks")
    handler = AgentrtCallbackHandler()
    if callbacks is None:
        merged["callbacks"] = [handler]
    elif isinstance(callbacks, list):
        merged["callbacks"] = [*callbacks, handler]
    else:  # a callback manager
        manager = callbacks.copy()
        manager.add_handler(handler, inherit=True)
        merged["callbacks"] = manager
    return merged  # type: ignore[return-value]


async def run_graph(
    graph: Any,
    inputs: Any,
    *,
    runtime: Runtime | None = None,
    name: str = "langgraph",
    timeout_s: float | None = None,
    program_id: str | None = None,
    config: RunnableConfig | None = None,
) -> tuple[Any, Any]:
    """Run ``graph.ainvoke(inputs)`` as one agentrt program; returns ``(output, program)``.

    ``graph``: any LangChain runnable (a compiled LangGraph graph, an agent, a chain).
    ``timeout_s``: the program's budget (seconds; ``DeadlineExceeded`` past it).
    """
    rt = current_runtime(runtime)
    async with rt.program(
        name, program_id=program_id, timeout_s=timeout_s, operation="invoke_agent"
    ) as program:
        output = await graph.ainvoke(inputs, config=agentrt_config(config))
    return output, program


def react_agent(
    runtime: Runtime,
    tools: Sequence[Any],
    *,
    model: str | None = None,
    system: str | None = None,
    max_llm_calls: int = 6,
    model_options: Mapping[str, Any] | None = None,
) -> Any:
    """A ReAct agent graph (``langchain.agents.create_agent``) on ``runtime``'s model.

    ``tools``: ``agentrt.Tool``s (run by the SDK, journal included), LangChain tools, or async
    functions with type hints and a docstring. The agent stops after ``max_llm_calls`` model
    calls. ``model_options``: ``ChatOpenAI`` fields (``max_tokens``, ``temperature``,
    ``extra_body``...). Run it with :func:`run_graph` or ``ainvoke(..., agentrt_config())``.
    """
    from langchain.agents import create_agent
    from langchain.agents.middleware import ModelCallLimitMiddleware

    if max_llm_calls < 1:
        raise ConfigError(f"max_llm_calls must be >= 1, got {max_llm_calls}")
    llm = chat_model(runtime, model, **dict(model_options or {}))
    return create_agent(
        llm,
        tools=langchain_tools(tools),
        system_prompt=system,
        middleware=[ModelCallLimitMiddleware(run_limit=max_llm_calls, exit_behavior="end")],
    )


async def run_react_agent(
    runtime: Runtime,
    task: str,
    tools: Sequence[Any],
    *,
    model: str | None = None,
    system: str | None = None,
    name: str = "langgraph-react",
    max_llm_calls: int = 6,
    timeout_s: float | None = None,
    max_tokens: int | None = 256,
    program_id: str | None = None,
    model_options: Mapping[str, Any] | None = None,
    new_program: bool = True,
) -> AgentRun:
    """Run one ReAct agent (:func:`react_agent`) on ``task``.

    ``new_program=True``: as a program of its own named ``name`` (``timeout_s``: its budget in
    seconds; ``program_id``: default a fresh one). ``new_program=False``: inside the current
    program (e.g. one the caller opened; raises ``AgentrtError`` outside any). ``max_tokens``:
    per model call (None = the server's default); ``model_options``: more ``ChatOpenAI``
    fields. ``stop_reason`` is ``max_steps`` when ``max_llm_calls`` ended the run.
    """
    options = dict(model_options or {})
    if max_tokens is not None:
        options.setdefault("max_tokens", max_tokens)
    agent = react_agent(
        runtime,
        tools,
        model=model,
        system=system,
        max_llm_calls=max_llm_calls,
        model_options=options,
    )
    inputs = {"messages": [{"role": "user", "content": task}]}
    if new_program:
        state, program = await run_graph(
            agent, inputs, runtime=runtime, name=name, timeout_s=timeout_s, program_id=program_id
        )
    else:
        frame = CURRENT_FRAME.get()
        if frame is None:
            raise AgentrtError("new_program=False needs a current program")
        state = await agent.ainvoke(inputs, config=agentrt_config())
        program = frame.run
    messages = state.get("messages", []) if isinstance(state, dict) else []
    last = messages[-1] if messages else None
    # The call-limit middleware ends the run with a message of its own, which no model wrote
    # (a model's message carries its finish_reason).
    answered = (
        isinstance(last, AIMessage)
        and not last.tool_calls
        and bool(last.response_metadata.get("finish_reason"))
    )
    answer = last.text if answered and isinstance(last, AIMessage) else None
    reason: StopReason = "answer" if answered else "max_steps"
    return AgentRun(program, answer or None, reason, raw=state)
