"""The LangChain / LangGraph adapter with the real ``langchain-openai``, ``langchain`` and
``langgraph`` packages, against the engine emulator through the controller."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import anyio
import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from adapters_stack import (
    DEADLINE_S,
    HeaderLog,
    add,
    agent_spans,
    blocking_lookup,
    check_first_tool_wait,
    check_llm_tool_llm,
    recording_tracer,
    release_when_seen,
    running_stack,
    span_tree,
    tool_waiting,
    tools_waiting,
)
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Send

from agentrt import ConfigError, DeadlineExceeded, LLMCallError, Runtime, RuntimeConfig
from agentrt.errors import AgentrtError
from agentrt.protocol import HEADER_PROGRAM_ID
from agentrt_adapters.langchain import (
    AgentrtCallbackHandler,
    AgentrtChatOpenAI,
    agentrt_config,
    chat_model,
    run_graph,
    run_react_agent,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class ToolFirstChatOpenAI(AgentrtChatOpenAI):
    """Asks the scripted model for a tool call until a tool result came back, then for an
    answer (the emulator's ``agentrt_tool_call`` hint), so that the runs are deterministic."""

    def _get_request_payload(
        self, input_: Any, *, stop: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        payload: dict[str, Any] = super()._get_request_payload(input_, stop=stop, **kwargs)
        has_result = any(m.get("role") == "tool" for m in payload["messages"])
        payload["extra_body"] = {
            **(payload.get("extra_body") or {}),
            "agentrt_tool_call": not has_result,
        }
        return payload


async def test_react_agent_runs_through_the_controller_and_shows_its_tool_wait() -> None:
    released = anyio.Event()
    seen: dict[str, Any] = {}
    async with running_stack() as stack:
        llm = chat_model(stack.runtime, model_class=ToolFirstChatOpenAI, max_tokens=32)
        agent = create_agent(llm, tools=[blocking_lookup(released)])
        inputs = {"messages": [{"role": "user", "content": "What does the archive say?"}]}
        async with anyio.create_task_group() as group:
            group.start_soon(
                release_when_seen, stack, tool_waiting("p-lc-react", "lookup"), released, seen
            )
            state, program = await run_graph(
                agent, inputs, runtime=stack.runtime, name="lc-react", program_id="p-lc-react"
            )
        after = await stack.programs()
    # While the tool ran, the controller's process table showed the program in a tool wait,
    # with the tagged LLM call already charged to it (tags arrived: same program id, thread).
    check_first_tool_wait(seen["entry"], name="lc-react", session_id=stack.runtime.session_id)
    assert all(e["program_id"] != "p-lc-react" for e in after)  # ended with the program
    # The DAG: llm → tool → llm, and the tool's answer reached the model.
    nodes = check_llm_tool_llm(program)
    assert nodes[1]["parent_ids"] == ["main:0"] and nodes[2]["parent_ids"] == ["main:1"]
    tool_messages = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert [m.content for m in tool_messages] == [tool_messages[0].content]
    assert tool_messages[0].content.endswith(": 42")
    assert isinstance(state["messages"][-1], AIMessage) and not state["messages"][-1].tool_calls
    assert program.status == "ok" and program.phase_s["tool"] > 0


# create_react_agent is LangGraph's own prebuilt ReAct agent; LangGraph 1.x marks it
# deprecated (moved to langchain.agents.create_agent) but still ships it — users have it.
@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
async def test_langgraph_prebuilt_react_agent_streams_messages_through_the_controller() -> None:
    from langgraph.prebuilt import create_react_agent

    released = anyio.Event()
    seen: dict[str, Any] = {}
    async with running_stack() as stack:
        llm = chat_model(stack.runtime, model_class=ToolFirstChatOpenAI, max_tokens=32)
        agent = create_react_agent(llm, tools=[blocking_lookup(released)])
        inputs = {"messages": [{"role": "user", "content": "Look it up."}]}
        chunks: list[AIMessageChunk] = []
        async with (
            anyio.create_task_group() as group,
            stack.runtime.program("prebuilt", program_id="p-lc-prebuilt") as program,
        ):
            group.start_soon(
                release_when_seen, stack, tool_waiting("p-lc-prebuilt", "lookup"), released, seen
            )
            async for chunk, _meta in agent.astream(
                inputs, config=agentrt_config(), stream_mode="messages"
            ):
                if isinstance(chunk, AIMessageChunk):
                    chunks.append(chunk)
            entry = await stack.wait_for_entry(lambda e: e["program_id"] == program.id)
    assert seen["entry"]["tool_waits"][0]["tool_name"] == "lookup"
    # Token by token: the final answer arrived as several chunks; both calls were tagged.
    answer_chunks = [c for c in chunks if c.content]
    assert len(answer_chunks) >= 2
    assert entry["calls_finished"] == 2 and entry["threads"] == {"main": 2}
    kinds = [n.kind for n in program.nodes.values()]
    assert kinds == ["llm", "tool", "llm"]


async def test_chat_model_streams_and_calls_outside_langgraph() -> None:
    async with running_stack() as stack:
        llm = chat_model(stack.runtime, max_tokens=24)
        async with stack.runtime.program("stream", program_id="p-lc-stream") as program:
            parts = [chunk async for chunk in llm.astream("Say something.")]
            whole = await llm.ainvoke("And again.")
            entry = await stack.wait_for_entry(lambda e: e["program_id"] == "p-lc-stream")
        # No program: the call is still tagged, as an ad-hoc one-call program.
        alone = await llm.ainvoke("Alone.")
    text = "".join(str(p.content) for p in parts)
    assert len([p for p in parts if p.content]) > 1 and text
    assert whole.content and alone.content
    assert entry["calls_finished"] == 2 and entry["threads"] == {"main": 2}
    usage = [p.usage_metadata for p in parts if p.usage_metadata]
    assert usage and usage[-1]["output_tokens"] > 0
    nodes = list(program.nodes.values())
    assert [n.kind for n in nodes] == ["llm", "llm"] and nodes[1].parent_ids == (nodes[0].id,)


async def test_sync_calls_are_refused_before_anything_is_sent() -> None:
    log = HeaderLog()
    async with running_stack(http_transport=log) as stack:
        llm = chat_model(stack.runtime, max_tokens=8)
        graph = create_agent(llm, tools=[add])
        inputs = {"messages": [{"role": "user", "content": "hi"}]}
        async with stack.runtime.program("sync", program_id="p-lc-sync") as program:
            with pytest.raises(AgentrtError, match=r"async only.*Use ainvoke / astream"):
                llm.invoke("On the event loop's thread.")
            with pytest.raises(AgentrtError, match="async only"):
                list(llm.stream("Streamed."))
            with pytest.raises(AgentrtError, match="async only"):
                llm.batch(["one", "two"])
            # A worker thread (the context copied into it), and a graph's sync invoke there.
            with pytest.raises(AgentrtError, match="async only"):
                await anyio.to_thread.run_sync(llm.invoke, "From a worker thread.")
            with pytest.raises(AgentrtError, match="async only"):
                await anyio.to_thread.run_sync(graph.invoke, inputs)
            answer = await llm.ainvoke("The async call works.")
    await log.aclose()
    assert answer.content
    assert [n.kind for n in program.nodes.values()] == ["llm"]
    (sent,) = log.llm_headers  # only the async call reached the server, tagged
    assert sent[HEADER_PROGRAM_ID] == "p-lc-sync"


class _MapState(TypedDict):
    chunks: list[str]
    summaries: Annotated[list[str], operator.add]
    final: str


async def test_send_fan_out_runs_branches_as_threads_and_joins_them() -> None:
    async with running_stack() as stack:
        llm = chat_model(stack.runtime, max_tokens=16)

        async def summarise(state: dict[str, str]) -> dict[str, list[str]]:
            message = await llm.ainvoke(f"Summarise: {state['chunk']}")
            return {"summaries": [str(message.content)]}

        async def reduce(state: _MapState) -> dict[str, str]:
            message = await llm.ainvoke("Combine: " + " | ".join(state["summaries"]))
            return {"final": str(message.content)}

        def fan_out(state: _MapState) -> list[Send]:
            return [Send("summarise", {"chunk": c}) for c in state["chunks"]]

        builder = StateGraph(_MapState)
        builder.add_node("summarise", summarise)
        builder.add_node("reduce", reduce)
        builder.add_conditional_edges(START, fan_out, ["summarise"])
        builder.add_edge("summarise", "reduce")
        builder.add_edge("reduce", END)
        graph = builder.compile()
        async with stack.runtime.program("map-reduce", program_id="p-lc-map") as program:
            state = await graph.ainvoke(
                {"chunks": ["one", "two", "three"], "summaries": []}, config=agentrt_config()
            )
            entry = await stack.wait_for_entry(lambda e: e["program_id"] == "p-lc-map")
    assert len(state["summaries"]) == 3 and state["final"]
    nodes = list(program.nodes.values())
    maps, reduce_node = nodes[:3], nodes[3]
    # Three concurrent LangGraph tasks → three threads; the reduce step depends on all three.
    assert sorted(n.thread_id for n in maps) == ["main", "main.0", "main.1"]
    assert all(n.parent_ids == () for n in maps)
    assert sorted(reduce_node.parent_ids) == sorted(n.id for n in maps)
    assert reduce_node.thread_id == "main"
    assert sorted(entry["threads"]) == ["main", "main.0", "main.1"]


async def test_parallel_tool_calls_of_one_step_wait_in_two_threads_at_once() -> None:
    both_seen = anyio.Event()

    async def slow(name: str) -> str:
        """Wait until the test saw both tools waiting.

        Args:
            name: a label
        """
        await both_seen.wait()
        return name

    def plan(_state: dict[str, Any]) -> dict[str, Any]:
        calls = [
            {"name": "slow", "args": {"name": label}, "id": f"call-{label}", "type": "tool_call"}
            for label in ("a", "b")
        ]
        return {"messages": [AIMessage(content="", tool_calls=calls)]}

    from langgraph.graph import MessagesState

    builder = StateGraph(MessagesState)
    builder.add_node("plan", plan)
    builder.add_node("tools", ToolNode([slow]))
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "tools")
    builder.add_edge("tools", END)
    graph = builder.compile()

    seen: dict[str, Any] = {}
    async with running_stack() as stack, anyio.create_task_group() as group:
        group.start_soon(release_when_seen, stack, tools_waiting("p-lc-tools", 2), both_seen, seen)
        state, program = await run_graph(
            graph, {"messages": []}, runtime=stack.runtime, program_id="p-lc-tools"
        )
    threads = sorted(w["thread_id"] for w in seen["entry"]["tool_waits"])
    assert threads == ["main", "main.0"]
    tool_nodes = [n for n in program.nodes.values() if n.kind == "tool"]
    assert sorted(n.tool_call_id for n in tool_nodes) == ["call-a", "call-b"]
    assert all(n.status == "ok" for n in tool_nodes)
    assert [m.content for m in state["messages"] if isinstance(m, ToolMessage)] == ["a", "b"]


async def test_run_react_agent_entry_point() -> None:
    async with running_stack() as stack:
        run = await run_react_agent(
            stack.runtime, "Add 2 and 3.", [add], max_llm_calls=3, program_id="p-lc-entry"
        )
    assert run.program.status == "ok" and run.program.id == "p-lc-entry"
    assert 1 <= run.llm_calls <= 3
    assert run.stop_reason in ("answer", "max_steps")
    assert (run.answer is not None) == (run.stop_reason == "answer")
    if run.stop_reason == "max_steps":
        assert run.llm_calls == 3


async def test_errors_are_agentrt_errors() -> None:
    async with running_stack() as stack:
        wrong = chat_model(stack.runtime, model="no-such-model", max_retries=0)
        async with stack.runtime.program("bad-model"):
            with pytest.raises(LLMCallError) as caught:
                await wrong.ainvoke("hello")
        assert caught.value.status_code == 404
        with pytest.raises(AgentrtError, match="inside a program"):
            AgentrtCallbackHandler()
    closed = Runtime(RuntimeConfig(base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(ConfigError, match="no model"):
        chat_model(closed)


async def test_the_program_deadline_cancels_a_hanging_tool_and_closes_its_wait() -> None:
    async def hang(topic: str) -> str:
        """Never answers.

        Args:
            topic: anything
        """
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with running_stack() as stack:
        llm = chat_model(stack.runtime, model_class=ToolFirstChatOpenAI, max_tokens=16)
        agent = create_agent(llm, tools=[hang])
        inputs = {"messages": [{"role": "user", "content": "Look it up."}]}
        with pytest.raises(DeadlineExceeded):
            async with stack.runtime.program(
                "hang", program_id="p-lc-hang", timeout_s=DEADLINE_S
            ) as p:
                await agent.ainvoke(inputs, config=agentrt_config())
        after = await stack.programs()
    assert p.status == "deadline_exceeded"
    assert [(n.kind, n.status) for n in p.nodes.values()] == [("llm", "ok"), ("tool", "cancelled")]
    assert all(e["program_id"] != "p-lc-hang" for e in after)


async def test_spans_form_one_tree_under_the_program_span() -> None:
    async def lookup(topic: str) -> str:
        """Look a topic up.

        Args:
            topic: anything
        """
        return topic

    provider, exporter = recording_tracer()
    async with running_stack(tracer_provider=provider) as stack:
        llm = chat_model(stack.runtime, model_class=ToolFirstChatOpenAI, max_tokens=16)
        agent = create_agent(llm, tools=[lookup])
        inputs = {"messages": [{"role": "user", "content": "Look it up."}]}
        await run_graph(agent, inputs, runtime=stack.runtime, name="traced")
    model = stack.runtime.config.model
    assert span_tree(exporter) == agent_spans(model, "traced")
    tool_span = exporter.get_finished_spans()[1]
    assert tool_span.attributes is not None
    assert tool_span.attributes["gen_ai.tool.call.id"]
