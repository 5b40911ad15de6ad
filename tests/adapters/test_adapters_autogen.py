"""The AutoGen adapter with the real ``autogen-agentchat`` / ``autogen-ext`` packages, against
the engine emulator through the controller."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import anyio
import pytest

pytest.importorskip("autogen_agentchat")
pytest.importorskip("autogen_ext")

from adapters_stack import (
    DEADLINE_S,
    add,
    agent_spans,
    blocking_lookup,
    check_first_tool_wait,
    check_llm_tool_llm,
    check_sub_agent_chain,
    recording_tracer,
    release_when_seen,
    running_stack,
    span_tree,
    tool_waiting,
    tools_waiting,
)
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.messages import (
    ModelClientStreamingChunkEvent,
    TextMessage,
    ToolCallExecutionEvent,
)
from autogen_agentchat.tools import AgentTool
from autogen_core import CancellationToken
from autogen_core.models import CreateResult, FunctionExecutionResultMessage, LLMMessage

from agentrt import ConfigError, DeadlineExceeded, LLMCallError, Runtime, RuntimeConfig
from agentrt_adapters.autogen import (
    AgentrtChatCompletionClient,
    agentrt_tools,
    run_agent,
    run_assistant_agent,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def _hint(messages: Sequence[LLMMessage], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """The emulator's ``agentrt_tool_call`` hint: a tool call until a result came back, then
    an answer — so that the runs are deterministic."""
    has_result = any(isinstance(m, FunctionExecutionResultMessage) for m in messages)
    args = dict(extra or {})
    args["extra_body"] = {**args.get("extra_body", {}), "agentrt_tool_call": not has_result}
    return args


class ToolFirstClient(AgentrtChatCompletionClient):
    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        extra_create_args: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> CreateResult:
        args = _hint(messages, extra_create_args)
        return await super().create(messages, extra_create_args=args, **kwargs)

    async def create_stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        extra_create_args: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[str | CreateResult, None]:
        args = _hint(messages, extra_create_args)
        async for item in super().create_stream(messages, extra_create_args=args, **kwargs):
            yield item


async def test_assistant_agent_runs_through_the_controller_and_shows_its_tool_wait() -> None:
    released = anyio.Event()
    seen: dict[str, Any] = {}
    async with running_stack() as stack:
        client = ToolFirstClient(stack.runtime, max_tokens=32)
        agent = AssistantAgent(
            "assistant",
            model_client=client,
            tools=[*agentrt_tools([blocking_lookup(released)])],
            max_tool_iterations=2,
        )
        async with anyio.create_task_group() as group:
            group.start_soon(
                release_when_seen, stack, tool_waiting("p-ag-react", "lookup"), released, seen
            )
            result, program = await run_agent(
                agent, "What does the archive say?", runtime=stack.runtime, program_id="p-ag-react"
            )
        after = await stack.programs()
        await client.close()
    check_first_tool_wait(seen["entry"], name="assistant", session_id=stack.runtime.session_id)
    assert all(e["program_id"] != "p-ag-react" for e in after)
    nodes = check_llm_tool_llm(program)
    assert nodes[2]["parent_ids"] == ["main:1"]
    executions = [m for m in result.messages if isinstance(m, ToolCallExecutionEvent)]
    assert len(executions) == 1 and executions[0].content[0].content.endswith(": 42")
    assert isinstance(result.messages[-1], TextMessage)
    assert result.messages[-1].source == "assistant"
    assert program.status == "ok" and program.phase_s["tool"] > 0


async def test_streaming_assistant_is_tagged_chunk_by_chunk() -> None:
    released = anyio.Event()
    released.set()
    async with running_stack() as stack:
        client = ToolFirstClient(stack.runtime, max_tokens=32)
        agent = AssistantAgent(
            "streamer",
            model_client=client,
            tools=[*agentrt_tools([blocking_lookup(released)])],
            max_tool_iterations=2,
            model_client_stream=True,
        )
        chunks: list[str] = []
        final: TaskResult | None = None
        async with stack.runtime.program("stream", program_id="p-ag-stream") as program:
            async for item in agent.run_stream(task="Look it up."):
                if isinstance(item, ModelClientStreamingChunkEvent):
                    chunks.append(item.content)
                elif isinstance(item, TaskResult):
                    final = item
            entry = await stack.wait_for_entry(lambda e: e["program_id"] == "p-ag-stream")
        await client.close()
    assert final is not None and isinstance(final.messages[-1], TextMessage)
    assert len([c for c in chunks if c]) >= 2
    assert "".join(chunks).strip() == final.messages[-1].content.strip()
    assert entry["calls_finished"] == 2 and entry["threads"] == {"main": 2}
    assert [n.kind for n in program.nodes.values()] == ["llm", "tool", "llm"]


async def test_parallel_tool_runs_wait_in_two_threads_at_once() -> None:
    both_seen = anyio.Event()

    async def slow(name: str) -> str:
        """Wait until the test saw both tools waiting."""
        await both_seen.wait()
        return name

    (tool,) = agentrt_tools([slow])

    class TwoCalls:
        """Stands in for an agent whose model asked for two tool calls in one turn."""

        name = "two-calls"

        async def run(self, *, task: str) -> list[Any]:
            results: list[Any] = []

            async def one(label: str) -> None:
                token = CancellationToken()
                results.append(await tool.run_json({"name": label}, token, f"call-{label}"))

            async with anyio.create_task_group() as group:
                for label in ("a", "b"):
                    group.start_soon(one, label)
            return results

    seen: dict[str, Any] = {}
    async with running_stack() as stack, anyio.create_task_group() as group:
        group.start_soon(release_when_seen, stack, tools_waiting("p-ag-tools", 2), both_seen, seen)
        results, program = await run_agent(
            TwoCalls(), "go", runtime=stack.runtime, program_id="p-ag-tools"
        )
    assert sorted(results) == ["a", "b"]
    assert sorted(w["thread_id"] for w in seen["entry"]["tool_waits"]) == ["main", "main.0"]
    nodes = [n for n in program.nodes.values() if n.kind == "tool"]
    assert sorted(n.tool_call_id for n in nodes) == ["call-a", "call-b"]
    assert all(n.status == "ok" for n in nodes)


async def test_a_failing_tool_is_an_error_node_and_closes_its_wait() -> None:
    async def broken(x: int) -> int:
        """Always fails."""
        raise ValueError("no")

    (tool,) = agentrt_tools([broken])
    async with running_stack() as stack:
        async with stack.runtime.program("broken", program_id="p-ag-broken") as program:
            with pytest.raises(ValueError, match="no"):
                await tool.run_json({"x": 1}, CancellationToken(), "call-1")
            entry = await stack.wait_for_entry(lambda e: e["program_id"] == "p-ag-broken")
        # Outside any program the tool just runs.
        with pytest.raises(ValueError, match="no"):
            await tool.run_json({"x": 1}, CancellationToken(), "call-2")
    (node,) = program.nodes.values()
    assert node.kind == "tool" and node.status == "error" and "ValueError" in (node.error or "")
    assert entry["tool_waits"] == [] and entry["tool_wait_s"] > 0


async def test_run_assistant_agent_entry_point() -> None:
    async with running_stack() as stack:
        run = await run_assistant_agent(stack.runtime, "Add 2 and 3.", [add])
    assert run.program.status == "ok" and run.program.id.startswith("p-")
    assert run.program.name == "autogen-assistant"
    assert run.llm_calls >= 1
    assert run.stop_reason in ("answer", "max_steps")
    assert (run.answer is not None) == (run.stop_reason == "answer")


async def test_errors_are_agentrt_errors() -> None:
    async with running_stack() as stack:
        client = AgentrtChatCompletionClient(stack.runtime, "no-such-model")
        agent = AssistantAgent("assistant", model_client=client)
        with pytest.raises(LLMCallError) as caught:
            await run_agent(agent, "hello", runtime=stack.runtime)
        await client.close()
    assert caught.value.status_code == 404
    with pytest.raises(ConfigError, match="no model"):
        AgentrtChatCompletionClient(Runtime(RuntimeConfig(base_url="http://127.0.0.1:9/v1")))
    with pytest.raises(ConfigError, match="not a tool"):
        agentrt_tools([42])  # type: ignore[list-item]


async def test_the_program_deadline_cancels_a_hanging_tool() -> None:
    async def hang(topic: str) -> str:
        """Never answers."""
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with running_stack() as stack:
        client = ToolFirstClient(stack.runtime, max_tokens=16)
        agent = AssistantAgent("hanger", model_client=client, tools=[*agentrt_tools([hang])])
        with pytest.raises(DeadlineExceeded):
            async with stack.runtime.program(
                "hang", program_id="p-ag-hang", timeout_s=DEADLINE_S
            ) as p:
                await agent.run(task="Look it up.")
        after = await stack.programs()
        await client.close()
    assert p.status == "deadline_exceeded"
    assert [(n.kind, n.status) for n in p.nodes.values()] == [("llm", "ok"), ("tool", "cancelled")]
    assert all(e["program_id"] != "p-ag-hang" for e in after)


async def test_spans_form_one_tree_under_the_program_span() -> None:
    async def lookup(topic: str) -> str:
        """Look a topic up."""
        return topic

    provider, exporter = recording_tracer()
    async with running_stack(tracer_provider=provider) as stack:
        client = ToolFirstClient(stack.runtime, max_tokens=16)
        agent = AssistantAgent(
            "traced", model_client=client, tools=[*agentrt_tools([lookup])], max_tool_iterations=2
        )
        await run_agent(agent, "Look it up.", runtime=stack.runtime)
        await client.close()
    model = stack.runtime.config.model
    assert span_tree(exporter) == agent_spans(model, "traced")


async def test_an_agent_used_as_a_tool_is_a_tool_node_its_calls_chain_off() -> None:
    async with running_stack() as stack:
        sub_client = ToolFirstClient(stack.runtime, max_tokens=16)
        lead_client = ToolFirstClient(stack.runtime, max_tokens=16, parallel_tool_calls=False)
        researcher = AssistantAgent(
            "research",
            model_client=sub_client,
            tools=[*agentrt_tools([add])],
            description="Ask the researcher a question.",
            max_tool_iterations=2,
        )
        lead = AssistantAgent(
            "lead",
            model_client=lead_client,
            tools=[*agentrt_tools([AgentTool(researcher, return_value_as_last_message=True)])],
            max_tool_iterations=2,
        )
        _, program = await run_agent(lead, "Add 2 and 3.", runtime=stack.runtime)
        await sub_client.close()
        await lead_client.close()
    check_sub_agent_chain(program)
