"""An agentrt SDK program runs end to end against a REAL vLLM: Runtime -> controller (ATLAS,
priority passthrough) -> vLLM. Its calls arrive tagged (the controller's process table shows
the program, its threads and its tool wait while it runs) and all of them are served by vLLM.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import agentrt
from agentrt import Runtime, RuntimeConfig, tool

from .controller_helpers import controller_for

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.timeout(300)]

TOOL_S = 0.5  # long enough for the watcher below to see the tool wait several times


@tool
async def lookup(topic: str) -> str:
    """Look a topic up in the notes (a slow read-only tool).

    Args:
        topic: what to look up.
    """
    await anyio.sleep(TOOL_S)
    return f"notes on {topic}"


async def agent(rt: Runtime) -> agentrt.Program:
    """Plan, call a tool, work on two branches in parallel, reduce: 4 LLM calls, 1 tool."""

    def ask(text: str) -> Any:
        return agentrt.chat([{"role": "user", "content": text}], max_tokens=16)

    async with rt.program("real-vllm-agent", timeout_s=120) as prog:
        await ask("plan the work")
        notes = await lookup(topic="prefix caching")
        await agentrt.gather(lambda: ask(f"branch one: {notes}"), lambda: ask("branch two"))
        await ask("reduce the branches")
    return prog


async def test_sdk_program_through_the_controller_to_vllm(
    vllm_server: Any, vllm_metrics: Any
) -> None:
    def served(samples: dict[str, float]) -> float:
        return sum(v for k, v in samples.items() if k.startswith("vllm:request_success_total{"))

    before = served(await vllm_metrics())
    seen: dict[str, Any] = {"entry": None, "threads": set(), "tool_waits": set()}
    async with controller_for(vllm_server, priority=True, policy="atlas") as controller:
        config = RuntimeConfig(
            base_url=controller.openai_url, model=vllm_server.model, controller="required"
        )
        finished = anyio.Event()

        async def watch() -> None:
            while not finished.is_set():
                for entry in (await controller.get("/agentrt/v1/programs"))["entries"]:
                    seen["entry"] = entry
                    seen["threads"] |= set(entry["threads"])
                    seen["tool_waits"] |= {w["tool_name"] for w in entry["tool_waits"]}
                await anyio.sleep(0.02)

        async with Runtime(config) as rt, anyio.create_task_group() as group:
            group.start_soon(watch)
            try:
                prog = await agent(rt)
            finally:
                finished.set()
        after_table = await controller.get("/agentrt/v1/programs")
        queues = await controller.get("/agentrt/v1/queues")
    llm = [n for n in prog.nodes.values() if n.kind == "llm"]
    tools = [n for n in prog.nodes.values() if n.kind == "tool"]
    assert prog.status == "ok"
    assert len(llm) == 4 and len(tools) == 1
    assert all(n.status == "ok" and n.output_tokens for n in llm)
    # While it ran, the controller's process table held the program with its tags: the
    # session, the main thread and the two forked ones, the tool wait, the vLLM binding.
    entry = seen["entry"]
    assert entry is not None, "the program never showed up in the process table"
    assert entry["program_id"] == prog.id and entry["name"] == "real-vllm-agent"
    assert entry["session_id"] == rt.session_id
    assert seen["threads"] == {"main", "main.0", "main.1"}, seen["threads"]
    assert seen["tool_waits"] == {"lookup"}
    assert set(entry["backends"]) == {controller.backend_id}
    # The program-end event removed it; every call went to vLLM and was served there.
    assert after_table["programs"] == 0
    (backend,) = queues["backends"]
    assert backend["admitted_total"] == 4 and backend["in_flight"] == 0
    assert served(await vllm_metrics()) - before == 4
