"""The Pydantic AI adapter with the real ``pydantic-ai-slim[openai]`` package, against the engine
emulator through the controller: ``OpenAIChatModel`` (Chat Completions) and
``OpenAIResponsesModel`` (through the controller's ``/v1/responses``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("pydantic_ai")

from adapters_stack import (
    Stack,
    add,
    blocking_lookup,
    check_deadline_cancels_the_call_upstream,
    check_hanging_tool_is_cancelled,
    check_llm_tool_llm,
    check_parallel_tool_calls,
    check_side_effect_replayed_on_rerun,
    check_side_effect_without_journal_fails,
    check_spans_form_one_tree,
    check_sub_agent_chain,
    check_tool_duration_is_predicted,
    check_tool_wait_is_shown,
    gated_pair,
    hang,
    lookup,
    release_when_seen,
    running_stack,
    tool_waiting,
)
from pydantic_ai import Agent, RunContext
from pydantic_ai.settings import ModelSettings

from agentrt import LLMCallError, Program, Tool
from agentrt.errors import AgentrtError
from agentrt_adapters import AgentRun
from agentrt_adapters.pydantic_ai import (
    AgentrtCapability,
    ModelAPI,
    chat_model,
    pydantic_tools,
    run_agent,
    run_in_program,
    stream_in_program,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

APIS: list[ModelAPI] = ["chat_completions", "responses"]


def tool_then_answer(**extra_body: Any) -> Callable[[RunContext[Any]], ModelSettings]:
    """Per-request settings that make the scripted model call a tool in the run's first request
    and answer, briefly, in the next (the emulator's ``agentrt_tool_call`` hint)."""

    def settings(ctx: RunContext[Any]) -> ModelSettings:
        body = {"agentrt_tool_call": ctx.run_step <= 1, "agentrt_output_tokens": 8, **extra_body}
        return {"max_tokens": 256, "parallel_tool_calls": True, "extra_body": body}

    return settings


def archivist(gate: anyio.Event) -> Agent[Any, Any]:
    """An agent whose ``lookup`` tool answers once ``gate`` is set."""
    return Agent(
        name="archivist",
        instructions="Answer from the archive.",
        tools=[blocking_lookup(gate)],
        model_settings=tool_then_answer(),
    )


@pytest.mark.parametrize("api", APIS)
async def test_agent_runs_through_the_controller_and_shows_its_tool_wait(api: ModelAPI) -> None:
    async def run(stack: Stack, gate: anyio.Event) -> AgentRun:
        agent = archivist(gate)
        return await run_agent(
            stack.runtime, agent, "What does it say?", api=api, new_program=False
        )

    await check_tool_wait_is_shown(run, "pai-agent", f"p-pai-{api[:4]}")


async def test_a_tools_next_wait_carries_the_duration_predicted_from_its_last_run() -> None:
    async def run(stack: Stack, gate: anyio.Event, program_id: str, prompt: str) -> None:
        await run_agent(stack.runtime, archivist(gate), prompt, program_id=program_id)

    await check_tool_duration_is_predicted(run, "p-pai-pred")


# The scripted model is deterministic: with these seeds its first answer calls both tools.
@pytest.mark.parametrize(("api", "seed"), [("chat_completions", 1), ("responses", 17)])
async def test_parallel_tool_calls_wait_in_two_threads_at_once(api: ModelAPI, seed: int) -> None:
    async def run(stack: Stack, gate: anyio.Event) -> AgentRun:
        agent = Agent(
            name="both",
            instructions="Use both tools.",
            tools=gated_pair(gate),
            model_settings=tool_then_answer(seed=seed),
        )
        return await run_agent(
            stack.runtime, agent, "Look up agentrt and fetch its page.", api=api,
            program_id="p-pai-par",
        )  # fmt: skip

    await check_parallel_tool_calls(run, "p-pai-par")


async def test_run_stream_reports_its_tool_and_streams_the_answer() -> None:
    released = anyio.Event()
    seen: dict[str, Any] = {}
    agent = Agent(
        name="streamer",
        instructions="Answer from the archive.",
        tools=[blocking_lookup(released)],
        model_settings=tool_then_answer(agentrt_output_tokens=16),
    )
    async with running_stack() as stack:
        model = chat_model(stack.runtime)
        deltas: list[str] = []
        async with (
            anyio.create_task_group() as group,
            stack.runtime.program("pai-stream", program_id="p-pai-stream") as program,
        ):
            group.start_soon(
                release_when_seen, stack, tool_waiting("p-pai-stream", "lookup"), released, seen
            )
            async with stream_in_program(agent, "Look it up.", model=model) as result:
                async for delta in result.stream_text(delta=True, debounce_by=None):
                    deltas.append(delta)
            entry = await stack.wait_for_entry(lambda e: e["program_id"] == "p-pai-stream")
    assert seen["entry"]["tool_waits"][0]["tool_name"] == "lookup"
    assert len([d for d in deltas if d]) > 1
    assert entry["calls_finished"] == 2 and entry["threads"] == {"main": 2}
    check_llm_tool_llm(program)


async def test_a_sub_agent_run_from_a_tool_chains_off_the_tool_node() -> None:
    # The sub-agent carries the capability itself; run_agent adds one to the lead's run.
    researcher = Agent(
        name="researcher",
        instructions="Add numbers with the tool.",
        tools=[add],
        model_settings=tool_then_answer(),
        capabilities=[AgentrtCapability()],
    )

    async def research(ctx: RunContext[Any], question: str) -> str:
        """Ask the researcher.

        Args:
            question: what to find out
        """
        result = await researcher.run(question, model=ctx.model, usage=ctx.usage)
        return str(result.output)

    lead = Agent(
        name="lead",
        instructions="Ask the researcher.",
        tools=[research],
        model_settings=tool_then_answer(),
        capabilities=[AgentrtCapability()],  # and given to the run again: reported once
    )
    async with running_stack() as stack:
        run = await run_agent(stack.runtime, lead, "Add 2 and 3.", program_id="p-pai-sub")
    check_sub_agent_chain(run.program)


@pytest.mark.parametrize("streamed", [False, True])
async def test_the_deadline_cancels_the_call_in_flight_upstream(streamed: bool) -> None:
    agent = Agent(
        name="rambler",
        instructions="Go on.",
        model_settings={"max_tokens": 4000, "extra_body": {"agentrt_output_tokens": 4000}},
    )

    async def run(stack: Stack) -> None:
        model = chat_model(stack.runtime)
        if streamed:
            async with stream_in_program(agent, "Tell me.", model=model) as result:
                async for _ in result.stream_text(delta=True, debounce_by=None):
                    pass
        else:
            await run_in_program(agent, "Tell me.", model=model)

    await check_deadline_cancels_the_call_upstream(run, "pai-late")


async def test_the_deadline_cancels_a_hanging_tool_and_closes_its_wait() -> None:
    agent = Agent(
        name="hanger", instructions="Look it up.", tools=[hang], model_settings=tool_then_answer()
    )

    async def run(stack: Stack) -> None:
        await run_agent(stack.runtime, agent, "Look it up.", new_program=False)

    await check_hanging_tool_is_cancelled(run, "p-pai-hang")


async def run_writer(stack: Stack, writer: Tool[Any], program_id: str | None) -> Program:
    """An agent logging with ``writer``, in a new program ``program_id`` (None: the current)."""
    agent = Agent(
        name="writer",
        instructions="Log it.",
        tools=pydantic_tools([writer]),
        model_settings=tool_then_answer(),
    )
    new_program = program_id is not None
    run = await run_agent(
        stack.runtime, agent, "Log it.", program_id=program_id, new_program=new_program
    )
    return run.program


async def test_a_journaled_side_effect_is_replayed_on_a_rerun(tmp_path: Path) -> None:
    await check_side_effect_replayed_on_rerun(tmp_path, run_writer, "p-pai-dur")


async def test_a_side_effect_without_a_journal_ends_the_run_with_the_journal_error() -> None:
    await check_side_effect_without_journal_fails(run_writer)


async def test_spans_form_one_tree_under_the_program_span() -> None:
    agent = Agent(
        name="traced", instructions="Look it up.", tools=[lookup], model_settings=tool_then_answer()
    )

    async def run(stack: Stack) -> None:
        await run_agent(stack.runtime, agent, "Look it up.")

    await check_spans_form_one_tree(run, "traced")


async def test_errors_are_agentrt_errors() -> None:
    agent = Agent(name="plain", instructions="Hi.")
    async with running_stack(max_retries=0) as stack:
        with pytest.raises(LLMCallError) as caught:
            await run_agent(stack.runtime, agent, "hello", model="no-such-model")
        with pytest.raises(AgentrtError, match="needs a current program"):
            await run_in_program(agent, "hello", model=chat_model(stack.runtime))
    assert caught.value.status_code == 404
