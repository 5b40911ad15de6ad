"""The Agent Framework adapter's core: the tagged chat client, the function middleware that
reports tool runs, and the run scope that gives parallel work threads (placement is the shared
rule of ``agentrt_adapters._placement``). Public names: ``agentrt_adapters.agent_framework``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import openai
from agent_framework import (
    ChatResponse,
    ChatResponseUpdate,
    FunctionInvocationContext,
    FunctionMiddleware,
    Message,
    ResponseStream,
)
from agent_framework.exceptions import ChatClientException
from agent_framework.openai import OpenAIChatCompletionClient

from agentrt.errors import AgentrtError, LLMCallError
from agentrt.runtime.chat import current_runtime
from agentrt.runtime.frame import Frame
from agentrt.runtime.runtime import Runtime
from agentrt_adapters._common import llm_errors
from agentrt_adapters._placement import agent_lanes, observed_tool, placed_unit
from agentrt_adapters._runs import require_frame

__all__ = [
    "AGENTRT_TOOL",
    "AgentrtChatClient",
    "ToolNodes",
    "current_call_id",
    "run_scope",
]

#: ``FunctionTool.additional_properties`` key marking a tool the SDK runs (``run_tool``
#: reports it itself: the middleware only places it on a thread).
AGENTRT_TOOL = "agentrt_tool"

#: The model's id of the tool call being run (read by agentrt tools for their node).
_CALL_ID: ContextVar[str] = ContextVar("agentrt_af_call_id", default="")


def current_call_id() -> str:
    """The model's tool call id of the Agent Framework tool call running now ("" outside)."""
    return _CALL_ID.get()


@contextmanager
def run_scope() -> Iterator[Frame]:
    """Map the agent runs made in this block onto the current program: parallel tool calls
    and concurrent model calls each get a thread of their own (``agentrt_adapters._placement``).
    Returns the program's frame; ``AgentrtError`` outside a program."""
    frame = require_frame("an Agent Framework run")
    with agent_lanes(frame):
        yield frame


class ToolNodes(FunctionMiddleware):
    """Function middleware: every tool run is a ``tool`` node of the program with tool-wait
    events (the duration predicted from the tool's history), on a thread of its own when
    it runs alongside another. Work the tool does (a sub-agent's model calls and tools)
    chains off its node. :class:`AgentrtChatClient` installs it; it never changes what the
    tool does or returns."""

    async def process(
        self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        call_id = str(context.metadata.get("call_id") or "")
        call_token = _CALL_ID.set(call_id)
        try:
            if (context.function.additional_properties or {}).get(AGENTRT_TOOL):
                with placed_unit():  # run_tool records the node and its wait itself
                    await call_next()
                return
            async with observed_tool(context.function.name, tool_call_id=call_id):
                await call_next()
        finally:
            _CALL_ID.reset(call_token)


@contextmanager
def _chat_errors(frame: Frame | None) -> Iterator[None]:
    """Agent Framework wraps the openai client's errors in ``ChatClientException``: unwrap
    them, then translate as every adapter does (``agentrt_adapters._common.llm_errors``)."""
    with llm_errors(frame):
        try:
            yield
        except ChatClientException as exc:
            cause = exc.__cause__
            if isinstance(cause, openai.OpenAIError | AgentrtError):
                # Keeps its own cause (the deadline under a connection error, for one).
                raise cause from cause.__cause__
            raise LLMCallError(f"LLM call failed: {exc}") from exc


class AgentrtChatClient(OpenAIChatCompletionClient):
    """Agent Framework's OpenAI chat completion client talking through an agentrt ``Runtime``.

    Build it inside ``async with Runtime(...)``: every call it makes, streamed or not, carries
    the tags of the program it is made in (the runtime's transport reads them from context at
    send time; an ad-hoc program outside any) and becomes an ``llm`` node. Its function
    middleware (:class:`ToolNodes`, first in line) makes every tool run a ``tool`` node with
    tool-wait events. ``model``: default ``RuntimeConfig.model``, else the one the server
    serves (asked once, on the first call; the framework's ``OPENAI_CHAT_COMPLETION_MODEL`` /
    ``OPENAI_MODEL`` environment variables, when set, come before that). ``middleware`` and
    the other keyword arguments are ``OpenAIChatCompletionClient``'s. openai errors become
    agentrt's (``LLMCallError``, ``EndpointUnavailable``, ``DeadlineExceeded``).
    """

    def __init__(
        self,
        runtime: Runtime | None = None,
        model: str | None = None,
        *,
        middleware: Sequence[Any] = (),
        **kwargs: Any,
    ) -> None:
        rt = current_runtime(runtime)
        super().__init__(
            model=model or rt.config.model or rt.served_model.known,
            async_client=rt.openai_client(),
            middleware=[ToolNodes(), *middleware],
            **kwargs,
        )
        self._agentrt_runtime = rt
        #: Model calls this client made (streamed or not), counted when sent.
        self.llm_calls = 0

    async def _ensure_model(self, options: Mapping[str, Any]) -> None:
        if not options.get("model") and not self.model:
            rt = self._agentrt_runtime
            self.model = await rt.served_model.get(rt.transport)

    def _inner_get_response(
        self,
        *,
        messages: Sequence[Message],
        options: Mapping[str, Any],
        stream: bool = False,
        **kwargs: Any,
    ) -> Awaitable[ChatResponse] | ResponseStream[ChatResponseUpdate, ChatResponse]:
        if stream:
            updates = self._placed_updates(messages, options, kwargs)
            return self._build_response_stream(
                updates, response_format=options.get("response_format")
            )

        async def response() -> ChatResponse:
            await self._ensure_model(options)
            self.llm_calls += 1
            with placed_unit() as frame, _chat_errors(frame):
                sent = self._framework_call(messages, options, False, kwargs)
                assert not isinstance(sent, ResponseStream)
                result: ChatResponse = await sent
                return result

        return response()

    def _framework_call(
        self,
        messages: Sequence[Message],
        options: Mapping[str, Any],
        stream: bool,
        kwargs: Mapping[str, Any],
    ) -> Awaitable[ChatResponse] | ResponseStream[ChatResponseUpdate, ChatResponse]:
        """The framework's own request (nothing is sent before it is awaited / iterated)."""
        sent: Awaitable[ChatResponse] | ResponseStream[ChatResponseUpdate, ChatResponse] = (
            super()._inner_get_response(messages=messages, options=options, stream=stream, **kwargs)
        )
        return sent

    async def _placed_updates(
        self,
        messages: Sequence[Message],
        options: Mapping[str, Any],
        kwargs: Mapping[str, Any],
    ) -> AsyncIterator[ChatResponseUpdate]:
        """The streamed updates. The request is sent (and tagged) during the first step,
        which alone runs placed: a context change must stay inside one resumption of a
        generator."""
        await self._ensure_model(options)
        stream = self._framework_call(messages, options, True, kwargs)
        assert isinstance(stream, ResponseStream)
        async with stream:  # closed however the consumer leaves
            self.llm_calls += 1
            with placed_unit() as frame, _chat_errors(frame):
                try:
                    first = await anext(stream)
                except StopAsyncIteration:
                    return
            yield first
            with _chat_errors(frame):
                async for update in stream:
                    yield update
