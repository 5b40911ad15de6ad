"""The Microsoft Agent Framework adapter with the real ``agent-framework-core`` and
``agent-framework-openai`` packages, against the engine emulator through the controller."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("agent_framework")
pytest.importorskip("agent_framework_openai")

from adapters_stack import (
    DEADLINE_S,
    HeaderLog,
    Stack,
    add,
    blocking_lookup,
    check_first_tool_wait,
    check_hanging_tool_is_cancelled,
    check_llm_tool_llm,
    hang,
    release_when_seen,
    running_stack,
    tool_waiting,
    tools_waiting,
    wait_for_upstream_abort,
)
from agent_framework import Agent, Content, Message

import agentrt_adapters
from agentrt import (
    ConfigError,
    DeadlineExceeded,
    IdempotencyKey,
    LLMCallError,
    UnknownOutcome,
    tool,
)
from agentrt.errors import AgentrtError
from agentrt.protocol import HEADER_NODE_ID, HEADER_PROGRAM_ID, HEADER_THREAD_ID
from agentrt_adapters.agent_framework import (
    AgentrtChatClient,
    agent_framework_tools,
    run_agent,
    run_chat_agent,
    run_in_program,
    run_scope,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_framework_assistant.py"


class ToolFirstClient(AgentrtChatClient):
    """Asks the scripted model for a tool call until a tool result came back, then for an
    answer (the emulator's ``agentrt_tool_call`` hint), so that the runs are deterministic."""

    def _prepare_options(
        self, messages: Sequence[Message], options: Mapping[str, Any]
    ) -> dict[str, Any]:
        request: dict[str, Any] = super()._prepare_options(messages, options)
        has_result = any(m.get("role") == "tool" for m in request["messages"])
        extra = {**(request.get("extra_body") or {}), "agentrt_tool_call": not has_result}
        request["extra_body"] = extra
        return request


async def test_agent_runs_through_the_controller_tagged_and_shows_its_tool_wait() -> None:
    released = anyio.Event()
    seen: dict[str, Any] = {}
    log = HeaderLog()
    async with running_stack(http_transport=log) as stack:
        agent = Agent(
            ToolFirstClient(stack.runtime),
            "You answer from the archive.",
            name="assistant",
            tools=[blocking_lookup(released)],
        )
        # A first run of another program gives the tool a history: a predicted duration.
        warm = anyio.Event()
        warm.set()
        warm_agent = Agent(ToolFirstClient(stack.runtime), "", tools=[blocking_lookup(warm)])
        await run_agent(warm_agent, "warm up", runtime=stack.runtime, options={"max_tokens": 32})
        log.llm_headers.clear()
        async with anyio.create_task_group() as group:
            group.start_soon(
                release_when_seen, stack, tool_waiting("p-af-react", "lookup"), released, seen
            )
            response, program = await run_agent(
                agent,
                "What does the archive say?",
                runtime=stack.runtime,
                program_id="p-af-react",
                options={"max_tokens": 32},
            )
        after = await stack.programs()
    await log.aclose()
    check_first_tool_wait(seen["entry"], name="assistant", session_id=stack.runtime.session_id)
    (wait,) = seen["entry"]["tool_waits"]
    assert wait["tool_name"] == "lookup" and wait["predicted_duration_s"] is not None
    assert all(e["program_id"] != "p-af-react" for e in after)
    nodes = check_llm_tool_llm(program)
    assert nodes[2]["parent_ids"] == ["main:1"]
    assert program.status == "ok" and program.phase_s["tool"] > 0
    assert response.text.strip()
    # Every model call carried the program's tags: its node, in its thread.
    llm_nodes = [n for n in nodes if n["kind"] == "llm"]
    assert len(log.llm_headers) == len(llm_nodes) == 2
    for headers, node in zip(log.llm_headers, llm_nodes, strict=True):
        assert headers[HEADER_PROGRAM_ID] == "p-af-react"
        assert headers[HEADER_THREAD_ID] == node["thread_id"] == "main"
        assert headers[HEADER_NODE_ID] == node["id"]


async def test_streaming_run_is_tagged_and_streams_update_by_update() -> None:
    released = anyio.Event()
    released.set()
    async with running_stack() as stack:
        agent = Agent(
            ToolFirstClient(stack.runtime),
            "Be brief.",
            name="streamer",
            tools=[blocking_lookup(released)],
        )
        texts: list[str] = []
        async with stack.runtime.program("stream", program_id="p-af-stream") as program:
            with run_scope():
                stream = agent.run("Look it up.", stream=True, options={"max_tokens": 32})
                async for update in stream:
                    if update.text:
                        texts.append(update.text)
                final = await stream.get_final_response()
            entry = await stack.wait_for_entry(lambda e: e["program_id"] == "p-af-stream")
    assert len(texts) >= 2
    assert "".join(texts).strip() == final.text.strip() != ""
    assert entry["calls_finished"] == 2 and entry["threads"] == {"main": 2}
    assert [(n.kind, n.status) for n in program.nodes.values()] == [
        ("llm", "ok"),
        ("tool", "ok"),
        ("llm", "ok"),
    ]


async def test_parallel_tool_calls_wait_in_two_threads_at_once() -> None:
    both_seen = anyio.Event()

    async def slow(name: str) -> str:
        """Wait until the test saw both tools waiting."""
        await both_seen.wait()
        return name

    class TwoCallsClient(ToolFirstClient):
        """The scripted model calls ``slow`` once in its first turn; this client makes that
        turn ask for a second call too, as a model calling tools in parallel would."""

        def _parse_response_from_openai(self, response: Any, options: Mapping[str, Any]) -> Any:
            parsed = super()._parse_response_from_openai(response, options)
            contents = parsed.messages[0].contents
            if any(c.type == "function_call" for c in contents):
                contents.append(
                    Content.from_function_call("call-b", "slow", arguments={"name": "b"})
                )
            return parsed

    seen: dict[str, Any] = {}
    async with running_stack() as stack, anyio.create_task_group() as group:
        group.start_soon(release_when_seen, stack, tools_waiting("p-af-par", 2), both_seen, seen)
        agent = Agent(TwoCallsClient(stack.runtime), "Use tools.", name="par", tools=[slow])
        _, program = await run_agent(
            agent, "go", runtime=stack.runtime, program_id="p-af-par", options={"max_tokens": 16}
        )
    assert sorted(w["thread_id"] for w in seen["entry"]["tool_waits"]) == ["main", "main.0"]
    tools = [n for n in program.nodes.values() if n.kind == "tool"]
    assert len(tools) == 2 and all(n.status == "ok" and n.tool_call_id for n in tools)
    last = list(program.nodes.values())[-1]
    # The answer's call depends on both tool runs (the threads joined).
    assert last.kind == "llm" and sorted(last.parent_ids) == sorted(n.id for n in tools)


async def test_a_sub_agent_used_as_a_tool_chains_off_its_tool_node() -> None:
    async with running_stack() as stack:
        researcher = Agent(
            ToolFirstClient(stack.runtime),
            "Answer briefly.",
            name="researcher",
            description="Looks things up.",
            tools=[add],
        )
        lead = Agent(
            ToolFirstClient(stack.runtime),
            "Delegate to the researcher.",
            name="lead",
            tools=[researcher.as_tool()],
        )
        _, program = await run_agent(lead, "Find out.", runtime=stack.runtime)
    nodes = {n.id: n for n in program.nodes.values()}
    delegated = nodes["main:1"]
    assert delegated.kind == "tool" and delegated.name == "researcher"
    # Inside the tool: the sub-agent's model call, its own tool and its answer, chained off it.
    inner = [n for n in nodes.values() if n.id not in ("main:0", "main:1")][:3]
    assert [(n.kind, n.name) for n in inner][1] == ("tool", "add")
    assert inner[0].kind == "llm" and inner[0].parent_ids == ("main:1",)
    assert inner[1].parent_ids == (inner[0].id,) and inner[2].parent_ids == (inner[1].id,)
    last = list(nodes.values())[-1]
    assert last.kind == "llm" and last.parent_ids == ("main:1",)
    assert all(n.status == "ok" for n in nodes.values())


async def test_the_program_deadline_cancels_the_model_call_upstream() -> None:
    # At the modelled GPU's real speed a 4000-token answer takes far longer than the budget.
    async with running_stack(time_scale=1.0) as stack:
        agent = Agent(AgentrtChatClient(stack.runtime), "Write at length.", name="long")
        options = {"max_tokens": 4000, "extra_body": {"ignore_eos": True}}
        with pytest.raises(DeadlineExceeded):
            await run_agent(
                agent,
                "Tell me everything.",
                runtime=stack.runtime,
                program_id="p-af-deadline",
                timeout_s=DEADLINE_S,
                options=options,
            )
        await wait_for_upstream_abort(stack)  # the emulator notices the client leaving
        after = await stack.programs()
    assert all(e["program_id"] != "p-af-deadline" for e in after)


async def test_the_program_deadline_cancels_a_hanging_tool() -> None:
    async def run(stack: Stack) -> None:
        agent = Agent(ToolFirstClient(stack.runtime), "Use tools.", name="hanger", tools=[hang])
        await run_in_program(agent, "Look it up.", options={"max_tokens": 16})

    await check_hanging_tool_is_cancelled(run, "p-af-hang")


async def test_agentrt_tools_errors_and_the_journal(tmp_path: Any) -> None:
    charged: list[str] = []

    @tool(side_effect=True)
    async def charge(amount: int, key: IdempotencyKey) -> str:
        """Charge a card."""
        charged.append(key)
        raise UnknownOutcome("sent, no answer", key=key)

    async def broken(topic: str) -> str:
        """Always fails."""
        raise ValueError("archive offline")

    journal = str(tmp_path / "journal.sqlite")
    async with running_stack(journal=journal) as stack:
        # A plain tool's exception goes back to the model (the framework's default): error node.
        agent = Agent(ToolFirstClient(stack.runtime), "Use tools.", name="b", tools=[broken])
        _, program = await run_agent(agent, "x", runtime=stack.runtime, options={"max_tokens": 32})
        # agentrt's own tool under the framework: its node, with the model's call id.
        (adder,) = agent_framework_tools([tool(add)])
        agent = Agent(ToolFirstClient(stack.runtime), "Use tools.", name="a", tools=[adder])
        _, added = await run_agent(agent, "2+3", runtime=stack.runtime)
        # An unknown outcome ends the run, raised as itself.
        agent = Agent(
            ToolFirstClient(stack.runtime),
            "Use tools.",
            name="p",
            tools=agent_framework_tools([charge]),
        )
        with pytest.raises(UnknownOutcome):
            await run_agent(agent, "pay", runtime=stack.runtime, program_id="p-af-pay")
    assert [(n.kind, n.status) for n in program.nodes.values()] == [
        ("llm", "ok"),
        ("tool", "error"),
        ("llm", "ok"),
    ]
    assert "ValueError" in (program.nodes["main:1"].error or "")
    (node,) = [n for n in added.nodes.values() if n.kind == "tool"]
    assert node.name == "add" and node.status == "ok" and node.tool_call_id
    assert len(charged) == 1


async def test_run_chat_agent_entry_point_and_errors() -> None:
    async with running_stack() as stack:
        run = await run_chat_agent(stack.runtime, "Add 2 and 3.", [add], max_tool_iterations=2)
        client = AgentrtChatClient(stack.runtime, "no-such-model")
        with pytest.raises(LLMCallError) as caught:
            await run_agent(Agent(client, "hi"), "hello", runtime=stack.runtime)
        with pytest.raises(AgentrtError, match="current program"):
            await run_in_program(Agent(client, "hi"), "hello")
        with pytest.raises(ConfigError, match="max_tool_iterations"):
            await run_chat_agent(stack.runtime, "x", [add], max_tool_iterations=0)
    assert run.program.status == "ok" and run.program.name == "agent-framework-assistant"
    assert run.llm_calls >= 1
    assert run.stop_reason in ("answer", "max_steps")
    assert (run.answer is not None) == (run.stop_reason == "answer")
    assert caught.value.status_code == 404


async def test_the_model_is_discovered_when_none_is_configured() -> None:
    async with running_stack(model=None) as stack:
        client = AgentrtChatClient(stack.runtime)
        assert not client.model
        response, program = await run_agent(
            Agent(client, "hi", name="discover"), "hello", runtime=stack.runtime
        )
    assert response.text.strip() and client.model
    assert [n.kind for n in program.nodes.values()] == ["llm"]


@pytest.mark.timeout(90)
async def test_example_runs_against_the_embedded_controller(tmp_path: Path) -> None:
    command = [sys.executable, "-W", "error", str(EXAMPLE), "--time-scale", "200"]
    with anyio.fail_after(80):
        done = await anyio.run_process(command, cwd=tmp_path, check=False)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert ": ok," in out and "process table: program p-" in out, out
    assert "(agent-framework-assistant)" in out, out
    assert "  tool wait: slow_search (thread main" in out, out


def test_available_names_the_adapter() -> None:
    assert agentrt_adapters.available()["agent_framework"] is True
