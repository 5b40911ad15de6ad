"""OpenAI Agents SDK adapter: agentrt tagging, threads and tool waits for ``openai-agents`` 0.24.

Needs the ``openai-agents`` extra (``pip install 'agentrt-adapters[openai-agents]'``). Pieces:

* :func:`responses_model` / :func:`chat_completions_model` — the SDK's
  ``OpenAIResponsesModel`` (its default API; our controller proxies ``/v1/responses``) or
  ``OpenAIChatCompletionsModel`` on the runtime's tagging ``openai.AsyncOpenAI``: every call,
  streamed or not, carries the current program's tags, deadline and ``traceparent``, and is an
  ``llm`` node of the program; :class:`AgentrtModelProvider` hands such models out for any
  model name, and :func:`run_config` builds a ``RunConfig`` with it and the SDK's tracing off
  (it would otherwise export to OpenAI's servers);
* :func:`report_tool` / :func:`function_tools` / :func:`reported_agent` — function tools whose
  runs are ``tool`` nodes with tool-wait events (name, predicted duration) reported to the
  controller; ``agentrt.Tool``\\ s as function tools run by the SDK, intent journal included;
* :func:`run_agent` (one call: the agent's run as one program) and :func:`run_in_program` /
  :func:`stream_in_program` (inside the caller's ``rt.program(...)``).

How the SDK's structure maps onto the program: the agent loop's model calls follow each other
in one thread; the tool calls of one model turn run concurrently, each on a thread of its own
(the first on the agent's thread, the others forked from it), and the next model call depends on
all of them; an agent used as a tool is a ``tool`` node whose model calls and tools chain off
it, in that tool's thread; a handoff is a transfer of control — the next agent's model calls
continue the same thread (nothing runs concurrently across a handoff). The program's deadline
cancels the run: the call in flight has its HTTP stream closed, so the server aborts it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import Any, Literal

import anyio
from agents import (
    Agent,
    AgentsException,
    MaxTurnsExceeded,
    Model,
    ModelProvider,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
)
from agents.result import RunResult, RunResultStreaming

from agentrt.errors import AgentrtError
from agentrt.runtime.chat import current_runtime
from agentrt.runtime.runtime import Runtime
from agentrt_adapters._common import AgentRun, llm_errors
from agentrt_adapters._oa_tools import (
    agentrt_function_tool,
    function_tools,
    report_tool,
    reported_agent,
)
from agentrt_adapters._placement import agent_lanes
from agentrt_adapters._runs import (
    configured_model,
    require_frame,
    run_agent_as_program,
    served_model_name,
)

__all__ = [
    "AgentrtModelProvider",
    "ModelAPI",
    "agentrt_function_tool",
    "chat_completions_model",
    "function_tools",
    "report_tool",
    "reported_agent",
    "responses_model",
    "run_agent",
    "run_config",
    "run_in_program",
    "stream_in_program",
]

#: ``responses``: ``/v1/responses`` (the SDK's default); ``chat_completions``:
#: ``/v1/chat/completions``.
ModelAPI = Literal["responses", "chat_completions"]


def responses_model(runtime: Runtime | None = None, model: str | None = None) -> Model:
    """The SDK's ``OpenAIResponsesModel`` for ``model`` (default ``RuntimeConfig.model``) on the
    runtime's tagging client. Raises ``ConfigError`` without a model."""
    rt = current_runtime(runtime)
    return OpenAIResponsesModel(configured_model(rt, model), rt.openai_client())


def chat_completions_model(runtime: Runtime | None = None, model: str | None = None) -> Model:
    """The SDK's ``OpenAIChatCompletionsModel`` for ``model`` (default ``RuntimeConfig.model``)
    on the runtime's tagging client. Raises ``ConfigError`` without a model."""
    rt = current_runtime(runtime)
    return OpenAIChatCompletionsModel(configured_model(rt, model), rt.openai_client())


class AgentrtModelProvider(ModelProvider):
    """Gives every agent of a run a model on ``runtime``: an agent naming a model gets that
    model, one naming none gets ``default_model`` (default ``RuntimeConfig.model``). ``api``
    chooses the Responses or the Chat Completions API."""

    def __init__(
        self, runtime: Runtime, *, default_model: str | None = None, api: ModelAPI = "responses"
    ) -> None:
        self.runtime = runtime
        self.default_model = default_model
        self.api: ModelAPI = api
        #: One model (and client) per model name, built on first use: the SDK asks every turn.
        self._models: dict[str, Model] = {}

    def get_model(self, model_name: str | None) -> Model:
        name = configured_model(self.runtime, model_name or self.default_model)
        model = self._models.get(name)
        if model is None:
            build = chat_completions_model if self.api == "chat_completions" else responses_model
            model = self._models[name] = build(self.runtime, name)
        return model


def run_config(
    runtime: Runtime | None = None,
    *,
    model: str | None = None,
    api: ModelAPI = "responses",
    base: RunConfig | None = None,
) -> RunConfig:
    """``base`` (default a new ``RunConfig``) with :class:`AgentrtModelProvider` as its model
    provider (``model``: for agents naming none) and the SDK's tracing disabled (its exporter
    would send traces to OpenAI's servers; agentrt records its own spans). Agents used as tools
    inherit it."""
    config = base or RunConfig()
    provider = AgentrtModelProvider(current_runtime(runtime), default_model=model, api=api)
    return replace(config, model_provider=provider, tracing_disabled=True)


async def run_in_program(
    agent: Agent[Any],
    input: Any,
    *,
    max_turns: int = 10,
    config: RunConfig | None = None,
    **run_options: Any,
) -> RunResult:
    """``Runner.run(agent, input)`` inside the current program (one the caller opened), with
    the agent's function tools reported (:func:`reported_agent`) and their threads assigned.

    ``config``: a ``RunConfig`` (default :func:`run_config` of the current runtime); give one
    built by :func:`run_config` to choose the API. ``run_options``: more ``Runner.run``
    arguments (``context``, ``hooks``, ``session``...). openai errors become agentrt's
    (``LLMCallError``, ``EndpointUnavailable``, ``DeadlineExceeded``); ``MaxTurnsExceeded``
    propagates. Raises ``AgentrtError`` outside a program."""
    frame = require_frame("run_in_program")
    prepared = reported_agent(agent)
    with agent_lanes(frame), llm_errors(frame), _tool_errors():
        return await Runner.run(
            prepared,
            input,
            max_turns=max_turns,
            run_config=config or run_config(),  # the current program's runtime
            **run_options,
        )


@asynccontextmanager
async def stream_in_program(
    agent: Agent[Any],
    input: Any,
    *,
    max_turns: int = 10,
    config: RunConfig | None = None,
    **run_options: Any,
) -> AsyncIterator[RunResultStreaming]:
    """``Runner.run_streamed(agent, input)`` inside the current program, as
    ``async with stream_in_program(agent, "task") as result: async for e in
    result.stream_events(): ...``. Leaving the block before the run ended (a break, an error,
    the program's deadline) cancels it — the call in flight is aborted upstream — so no work of
    the run outlives the block. Arguments as for :func:`run_in_program`."""
    frame = require_frame("stream_in_program")
    prepared = reported_agent(agent)
    with agent_lanes(frame), llm_errors(frame), _tool_errors():
        # The SDK runs the agent in a task of its own, created here: it inherits the lanes
        # and the program's frame from this context.
        result = Runner.run_streamed(
            prepared,
            input,
            max_turns=max_turns,
            run_config=config or run_config(),  # the current program's runtime
            **run_options,
        )
        try:
            yield result
        finally:
            if not result.is_complete:
                result.cancel()
            task = result.run_loop_task
            if task is not None and not task.done():
                task.cancel()
                with anyio.CancelScope(shield=True):
                    await asyncio.gather(task, return_exceptions=True)


@contextmanager
def _tool_errors() -> Iterator[None]:
    """An agentrt error that ended a tool (a ``JournalError`` such as ``UnknownOutcome``)
    reaches the caller as itself: the SDK wraps a tool's exception in its ``UserError``."""
    try:
        yield
    except AgentsException as exc:
        cause = exc.__cause__
        if isinstance(cause, AgentrtError):
            raise cause.with_traceback(cause.__traceback__) from cause.__cause__
        raise


async def run_agent(
    runtime: Runtime,
    agent: Agent[Any],
    input: Any,
    *,
    name: str | None = None,
    model: str | None = None,
    api: ModelAPI = "responses",
    max_turns: int = 10,
    timeout_s: float | None = None,
    program_id: str | None = None,
    new_program: bool = True,
    run_options: Mapping[str, Any] | None = None,
) -> AgentRun:
    """Run ``agent`` on ``input`` with the SDK's ``Runner.run``.

    ``model``: for agents that name none (default ``RuntimeConfig.model``, else the model the
    server serves); ``api``: ``responses`` (the SDK's default) or ``chat_completions``.
    ``new_program=True``: as a program of its own named ``name`` (default the agent's;
    ``timeout_s``: its budget in seconds, ``DeadlineExceeded`` past it; ``program_id``: default
    a fresh one); ``new_program=False``: inside the current program. ``max_turns``: model calls
    at most (``stop_reason="max_steps"`` when reached). ``run_options``: more ``Runner.run``
    arguments. The answer is the run's final output as text.
    """
    rt = current_runtime(runtime)
    config = run_config(rt, model=await served_model_name(rt, model), api=api)
    options = dict(run_options or {})

    return await run_agent_as_program(
        rt,
        lambda: run_in_program(agent, input, max_turns=max_turns, config=config, **options),
        lambda result: result.final_output,
        step_limit=MaxTurnsExceeded,
        new_program=new_program,
        name=name or agent.name or "openai-agent",
        timeout_s=timeout_s,
        program_id=program_id,
    )
