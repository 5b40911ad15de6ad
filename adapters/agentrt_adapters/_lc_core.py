"""The LangChain adapter's core: the callback handler (LangGraph tasks → threads, tools →
tool nodes and tool waits) and the tagged chat model. Public names:
``agentrt_adapters.langchain``."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, cast
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI

from agentrt.errors import AgentrtError
from agentrt.runtime.chat import current_runtime
from agentrt.runtime.frame import CURRENT_FRAME, Frame
from agentrt.runtime.runtime import Runtime
from agentrt_adapters._common import llm_errors
from agentrt_adapters._lanes import Lanes, Unit
from agentrt_adapters._runs import configured_model
from agentrt_adapters._steps import ToolStep

__all__ = [
    "AGENTRT_TOOL",
    "SYNC_REFUSED",
    "AgentrtCallbackHandler",
    "AgentrtChatOpenAI",
    "agentrt_config",
    "chat_model",
    "handler_of",
]

#: Metadata key marking an :class:`AgentrtTool` (it reports itself; the handler does not).
AGENTRT_TOOL = "agentrt_tool"

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
                "(`async with rt.program(...)`), or use agentrt_adapters.langchain.run_graph"
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
        if (metadata or {}).get(AGENTRT_TOOL):
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


#: Why a sync call is refused (see :meth:`AgentrtChatOpenAI._generate`).
SYNC_REFUSED = (
    "agentrt's LangChain model is async only: a sync invoke / stream / batch would send the "
    "call outside the program's event loop, untagged and unrecorded. Use ainvoke / astream / "
    "abatch (graph.ainvoke / graph.astream for a LangGraph graph)."
)


class AgentrtChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` placed on the program's threads by an :class:`AgentrtCallbackHandler`.

    Build it with :func:`chat_model`. Without a handler in the run's callbacks a call is still
    tagged (with the current program, or an ad-hoc one outside any program); with one, it
    runs on the thread of the LangGraph task that makes it. openai errors become agentrt's
    (``LLMCallError``, ``EndpointUnavailable``, ``DeadlineExceeded``).

    Async only: the sync entry points (``invoke``, ``stream``, ``batch``, and a graph's sync
    ``invoke`` / ``stream`` that call them) raise ``AgentrtError`` before anything is sent.
    Tagging them is not safe: the runtime's transports, the program's DAG and its controller
    events belong to the event loop the program runs on. A sync call runs either on that
    loop's thread — it would block the loop, and waiting there for the async transport would
    deadlock — or on a worker thread LangChain / LangGraph starts, which has no way into the
    loop and would change the program's nodes and chains from a second thread.
    """

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise AgentrtError(SYNC_REFUSED)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        raise AgentrtError(SYNC_REFUSED)

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
    handler = handler_of(run_manager)
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


def handler_of(run_manager: Any) -> AgentrtCallbackHandler | None:
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
    model = configured_model(rt, model)
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
