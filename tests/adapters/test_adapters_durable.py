"""agentrt tools inside framework agents: the SDK runs them (node, tool wait, journal), so a
side effect is recorded before it runs and a re-run of the program replays it instead of
repeating it; and the one-call entry points run inside a program the caller opened."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("autogen_agentchat")

from adapters_stack import add, log_writer, running_stack
from autogen_agentchat.agents import AssistantAgent
from langchain.agents import create_agent
from test_adapters_autogen import ToolFirstClient
from test_adapters_langchain import ToolFirstChatOpenAI

from agentrt.errors import JournalUnavailable
from agentrt_adapters.autogen import agentrt_tools, run_agent, run_assistant_agent, run_in_program
from agentrt_adapters.langchain import chat_model, langchain_tools, run_graph, run_react_agent

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_langgraph_rerun_replays_a_journaled_side_effect(tmp_path: Path) -> None:
    target, keys = tmp_path / "log.txt", []
    writer = langchain_tools([log_writer(target, keys)])
    statuses = []
    async with running_stack(journal=str(tmp_path / "journal.sqlite")) as stack:
        llm = chat_model(stack.runtime, model_class=ToolFirstChatOpenAI, max_tokens=16)
        agent = create_agent(llm, tools=writer)
        inputs = {"messages": [{"role": "user", "content": "Log it."}]}
        for _ in range(2):
            _, program = await run_graph(agent, inputs, runtime=stack.runtime, program_id="p-dur")
            statuses.append([(n.kind, n.status) for n in program.nodes.values()])
    assert target.read_text() == "line\n" and len(keys) == 1 and keys[0]
    assert statuses[0] == [("llm", "ok"), ("tool", "ok"), ("llm", "ok")]
    assert statuses[1] == [("llm", "ok"), ("tool", "replayed"), ("llm", "ok")]
    tool_node = next(n for n in program.nodes.values() if n.kind == "tool")
    assert tool_node.tool_call_id  # the model's call id reached the SDK's node


async def test_autogen_rerun_replays_a_journaled_side_effect(tmp_path: Path) -> None:
    target, keys = tmp_path / "log.txt", []
    tools = agentrt_tools([log_writer(target, keys)])
    statuses = []
    async with running_stack(journal=str(tmp_path / "journal.sqlite")) as stack:
        client = ToolFirstClient(stack.runtime, max_tokens=16)
        for _ in range(2):
            agent = AssistantAgent(
                "writer", model_client=client, tools=[*tools], max_tool_iterations=2
            )
            _, program = await run_agent(agent, "Log it.", runtime=stack.runtime, program_id="p-d")
            statuses.append([(n.kind, n.status) for n in program.nodes.values()])
        await client.close()
    assert target.read_text() == "line\n" and len(keys) == 1
    assert statuses[0] == [("llm", "ok"), ("tool", "ok"), ("llm", "ok")]
    assert statuses[1] == [("llm", "ok"), ("tool", "replayed"), ("llm", "ok")]


async def test_side_effect_tools_fail_closed_without_a_journal_and_end_the_run() -> None:
    keys: list[str] = []
    writer = log_writer(Path("/nonexistent/never-written"), keys)
    inputs = {"messages": [{"role": "user", "content": "Log it."}]}
    async with running_stack() as stack:
        llm = chat_model(stack.runtime, model_class=ToolFirstChatOpenAI, max_tokens=16)
        graph = create_agent(llm, tools=langchain_tools([writer]))
        with pytest.raises(JournalUnavailable):
            await run_graph(graph, inputs, runtime=stack.runtime, program_id="p-nj-lg")
        # AutoGen would hand the error to the model (which may call the tool again); the
        # adapter stops the run and raises it instead.
        client = ToolFirstClient(stack.runtime, max_tokens=16)
        agent = AssistantAgent(
            "writer", model_client=client, tools=agentrt_tools([writer]), max_tool_iterations=3
        )
        async with stack.runtime.program("no-journal") as program:
            with pytest.raises(JournalUnavailable):
                await run_in_program(agent, "Log it.")
        await client.close()
    assert keys == []
    assert [(n.kind, n.status) for n in program.nodes.values()] == [
        ("llm", "ok"),
        ("tool", "error"),
    ]


async def test_entry_points_run_inside_the_callers_program() -> None:
    async with running_stack() as stack:
        rt = stack.runtime
        async with rt.program("mixed", program_id="p-mixed") as program:
            first = await run_react_agent(rt, "Add 2 and 3.", [add], new_program=False)
            second = await run_assistant_agent(rt, "Add 4 and 5.", [add], new_program=False)
            entry = await stack.wait_for_entry(lambda e: e["program_id"] == "p-mixed")
    assert first.program is program and second.program is program
    llm_nodes = [n for n in program.nodes.values() if n.kind == "llm"]
    assert len(llm_nodes) == first.llm_calls == second.llm_calls >= 2
    assert entry["calls_finished"] == len(llm_nodes)
    assert program.status == "ok"
