"""The OpenAI Agents SDK adapter with the real ``openai-agents`` package, against the engine
emulator through the controller: the Responses model (the SDK's default, through the
controller's ``/v1/responses``) and the Chat Completions model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("agents")

from adapters_stack import (
    DEADLINE_S,
    Stack,
    add,
    blocking_lookup,
    check_deadline_cancels_the_call_upstream,
    check_first_tool_wait,
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
    wait_for_upstream_abort,
)
from agents import Agent, ModelSettings, function_tool
from openai.types.responses import ResponseTextDeltaEvent

from agentrt import DeadlineExceeded, LLMCallError, Program, Tool
from agentrt.errors import AgentrtError
from agentrt_adapters import AgentRun
from agentrt_adapters.openai_agents import (
    ModelAPI,
    function_tools,
    run_agent,
    run_config,
    run_in_program,
    stream_in_program,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

APIS: list[ModelAPI] = ["responses", "chat_completions"]


def tool_then_answer(**extra_body: Any) -> ModelSettings:
    """Settings that make the scripted model call a tool in its first turn (``required``; the
    SDK resets the choice after a tool ran) and answer, briefly, in the next."""
    body = {"agentrt_tool_call": False, "agentrt_output_tokens": 8, **extra_body}
    return ModelSettings(tool_choice="required", max_tokens=256, extra_body=body)


def archivist(gate: anyio.Event) -> Agent[Any]:
    """An agent whose ``lookup`` tool answers once ``gate`` is set."""
    return Agent(
        name="archivist",
        instructions="Answer from the archive.",
        tools=function_tools([blocking_lookup(gate)]),
        model_settings=tool_then_answer(),
    )


@pytest.mark.parametrize("api", APIS)
async def test_agent_runs_through_the_controller_and_shows_its_tool_wait(api: ModelAPI) -> None:
    async def run(stack: Stack, gate: anyio.Event) -> AgentRun:
        agent = archivist(gate)
        return await run_agent(
            stack.runtime, agent, "What does it say?", api=api, new_program=False
        )

    run = await check_tool_wait_is_shown(run, "oa-agent", f"p-oa-{api[:4]}")
    assert run.program.phase_s["tool"] > 0


async def test_a_tools_next_wait_carries_the_duration_predicted_from_its_last_run() -> None:
    async def run(stack: Stack, gate: anyio.Event, program_id: str, prompt: str) -> None:
        await run_agent(stack.runtime, archivist(gate), prompt, program_id=program_id)

    await check_tool_duration_is_predicted(run, "p-oa-pred")


# The scripted model is deterministic: with these seeds its first answer calls both tools.
@pytest.mark.parametrize(("api", "seed"), [("responses", 0), ("chat_completions", 8)])
async def test_parallel_tool_calls_wait_in_two_threads_at_once(api: ModelAPI, seed: int) -> None:
    async def run(stack: Stack, gate: anyio.Event) -> AgentRun:
        settings = tool_then_answer(seed=seed).resolve(ModelSettings(parallel_tool_calls=True))
        agent = Agent(
            name="both",
            instructions="Use both tools.",
            tools=function_tools(gated_pair(gate)),
            model_settings=settings,
        )
        return await run_agent(
            stack.runtime, agent, "Look up agentrt and fetch its page.", api=api,
            program_id="p-oa-par",
        )  # fmt: skip

    await check_parallel_tool_calls(run, "p-oa-par")


@pytest.mark.parametrize("api", APIS)
async def test_streamed_run_reports_its_tool_and_delivers_text_deltas(api: ModelAPI) -> None:
    released = anyio.Event()
    seen: dict[str, Any] = {}
    program_id = f"p-oa-stream-{api[:4]}"
    agent = Agent(
        name="writer",
        instructions="Look it up, then answer.",
        tools=function_tools([blocking_lookup(released)]),
        model_settings=tool_then_answer(agentrt_output_tokens=12),
    )
    deltas: list[str] = []
    async with (
        running_stack() as stack,
        anyio.create_task_group() as group,
        stack.runtime.program("oa-stream", program_id=program_id) as program,
    ):
        group.start_soon(
            release_when_seen, stack, tool_waiting(program_id, "lookup"), released, seen
        )
        # The SDK runs the streamed agent in a task of its own: the tool still gets its
        # node and wait, the calls their tags.
        async with stream_in_program(agent, "Say something.", config=run_config(api=api)) as result:
            async for event in result.stream_events():
                if event.type == "raw_response_event" and isinstance(
                    event.data, ResponseTextDeltaEvent
                ):
                    deltas.append(event.data.delta)
        entry = await stack.wait_for_entry(lambda e: e["program_id"] == program_id)
    check_first_tool_wait(seen["entry"], name="oa-stream", session_id=stack.runtime.session_id)
    assert len([d for d in deltas if d]) > 1
    assert result.final_output == "".join(deltas)
    assert entry["calls_finished"] == 2 and entry["threads"] == {"main": 2}
    check_llm_tool_llm(program)


async def test_a_handoff_continues_the_thread_and_its_target_reports_its_tools() -> None:
    specialist = Agent(
        name="specialist",
        instructions="Add numbers with the tool.",
        # The SDK's own function tool, not reported by us: run_agent reports the tools of
        # every agent the run can hand off to.
        tools=[function_tool(add)],
        model_settings=tool_then_answer(),
    )
    triage = Agent(
        name="triage",
        instructions="Hand arithmetic to the specialist.",
        handoffs=[specialist],
        model_settings=ModelSettings(tool_choice="required", max_tokens=64),
    )
    async with running_stack() as stack:
        run = await run_agent(stack.runtime, triage, "Add 2 and 3.", program_id="p-oa-handoff")
    kinds = [(n.kind, n.name, n.thread_id) for n in run.program.nodes.values()]
    model = stack.runtime.config.model
    assert kinds == [
        ("llm", model, "main"),  # triage: the handoff
        ("llm", model, "main"),  # specialist: calls add
        ("tool", "add", "main"),
        ("llm", model, "main"),  # specialist: answers
    ]
    assert run.stop_reason == "answer" and run.raw.last_agent.name == "specialist"


async def test_an_agent_used_as_a_tool_is_a_tool_node_its_calls_chain_off() -> None:
    researcher = Agent(
        name="researcher",
        instructions="Add numbers with the tool.",
        tools=function_tools([add]),
        model_settings=tool_then_answer(),
    )
    lead = Agent(
        name="lead",
        instructions="Ask the researcher.",
        tools=[researcher.as_tool("research", "Ask the researcher a question.")],
        model_settings=tool_then_answer(),
    )
    async with running_stack() as stack:
        run = await run_agent(stack.runtime, lead, "Add 2 and 3.", program_id="p-oa-sub")
    check_sub_agent_chain(run.program)


RAMBLER = Agent(
    name="rambler",
    instructions="Go on.",
    model_settings=ModelSettings(max_tokens=4000, extra_body={"agentrt_output_tokens": 4000}),
)


async def test_the_deadline_cancels_the_streamed_call_upstream() -> None:
    async def stream(_stack: Stack) -> None:
        async with stream_in_program(RAMBLER, "Tell me everything.") as result:
            async for _ in result.stream_events():
                pass

    await check_deadline_cancels_the_call_upstream(stream, "oa-late")


async def test_the_deadline_cancels_a_call_in_flight_upstream() -> None:
    # At the modelled GPU's own speed, 4000 tokens take far longer than the budget.
    async with running_stack(time_scale=1.0) as stack:
        with pytest.raises(DeadlineExceeded):
            await run_agent(stack.runtime, RAMBLER, "Tell me everything.", timeout_s=DEADLINE_S)
        await wait_for_upstream_abort(stack)


async def test_the_deadline_cancels_a_hanging_tool_and_closes_its_wait() -> None:
    agent = Agent(
        name="hanger",
        instructions="Look it up.",
        tools=function_tools([hang]),
        model_settings=tool_then_answer(),
    )

    async def run(stack: Stack) -> None:
        await run_agent(stack.runtime, agent, "Look it up.", new_program=False)

    await check_hanging_tool_is_cancelled(run, "p-oa-hang")


async def run_writer(stack: Stack, writer: Tool[Any], program_id: str | None) -> Program:
    """An agent logging with ``writer``, in a new program ``program_id`` (None: the current)."""
    agent = Agent(
        name="writer",
        instructions="Log it.",
        tools=function_tools([writer]),
        model_settings=tool_then_answer(),
    )
    new_program = program_id is not None
    run = await run_agent(
        stack.runtime, agent, "Log it.", program_id=program_id, new_program=new_program
    )
    return run.program


async def test_a_journaled_side_effect_is_replayed_on_a_rerun(tmp_path: Path) -> None:
    await check_side_effect_replayed_on_rerun(tmp_path, run_writer, "p-oa-dur")


async def test_a_side_effect_without_a_journal_ends_the_run_with_the_journal_error() -> None:
    await check_side_effect_without_journal_fails(run_writer)


async def test_spans_form_one_tree_under_the_program_span() -> None:
    agent = Agent(
        name="traced",
        instructions="Look it up.",
        tools=function_tools([lookup]),
        model_settings=tool_then_answer(),
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
            await run_in_program(agent, "hello", config=run_config(stack.runtime))
    assert caught.value.status_code == 404
