"""Must-show, as the demo runs them: LangGraph and AutoGen agents running at the same time in
one runtime, sharing one model object each, are separate programs in the controller's process
table, each seen in its own tool wait."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytest.importorskip("langgraph")
pytest.importorskip("autogen_agentchat")

from adapters_stack import running_stack
from autogen_agentchat.agents import AssistantAgent
from langchain.agents import create_agent
from test_adapters_autogen import ToolFirstClient
from test_adapters_langchain import ToolFirstChatOpenAI

from agentrt_adapters.autogen import agentrt_tools, run_agent
from agentrt_adapters.langchain import chat_model, run_graph

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PROGRAMS = {"p-lg-1": "lookup", "p-lg-2": "lookup", "p-ag-1": "lookup", "p-ag-2": "lookup"}


async def test_langgraph_and_autogen_agents_wait_on_tools_side_by_side() -> None:
    all_seen = anyio.Event()

    async def lookup(topic: str) -> str:
        """Look a topic up in the archive.

        Args:
            topic: what to look up
        """
        await all_seen.wait()
        return f"{topic}: 42"

    def waiting(entries: list[dict[str, Any]]) -> set[str]:
        return {
            e["program_id"]
            for e in entries
            if e["program_id"] in PROGRAMS and [w["tool_name"] for w in e["tool_waits"]]
        }

    async with running_stack() as stack:
        rt = stack.runtime
        llm = chat_model(rt, model_class=ToolFirstChatOpenAI, max_tokens=16)
        graph = create_agent(llm, tools=[lookup])
        client = ToolFirstClient(rt, max_tokens=16)
        tools = agentrt_tools([lookup])
        outcomes: dict[str, Any] = {}
        snapshot: list[dict[str, Any]] = []

        async def langgraph_agent(program_id: str) -> None:
            inputs = {"messages": [{"role": "user", "content": f"Look up {program_id}."}]}
            _, program = await run_graph(graph, inputs, runtime=rt, program_id=program_id)
            outcomes[program_id] = program

        async def autogen_agent(program_id: str) -> None:
            agent = AssistantAgent(
                "assistant", model_client=client, tools=[*tools], max_tool_iterations=2
            )
            _, program = await run_agent(
                agent, f"Look up {program_id}.", runtime=rt, program_id=program_id
            )
            outcomes[program_id] = program

        async def watch() -> None:
            with anyio.fail_after(30):
                while True:
                    entries = await stack.programs()
                    if waiting(entries) == set(PROGRAMS):
                        snapshot.extend(entries)
                        all_seen.set()
                        return
                    await anyio.sleep(0.01)

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            for program_id in PROGRAMS:
                runner = langgraph_agent if program_id.startswith("p-lg") else autogen_agent
                group.start_soon(runner, program_id)
        await client.close()
    # All four were in the table at once, each in its own tool wait on its own main thread.
    by_id = {e["program_id"]: e for e in snapshot if e["program_id"] in PROGRAMS}
    for program_id, entry in by_id.items():
        (wait,) = entry["tool_waits"]
        assert (wait["tool_name"], wait["thread_id"], wait["node_id"]) == (
            "lookup",
            "main",
            "main:1",
        )
        assert entry["threads"] == {"main": 1}, program_id
    assert by_id["p-ag-1"]["name"] == "assistant"
    # Each program's DAG holds only its own calls.
    for program_id, program in outcomes.items():
        kinds = [(n.kind, n.status) for n in program.nodes.values()]
        assert kinds == [("llm", "ok"), ("tool", "ok"), ("llm", "ok")], program_id
