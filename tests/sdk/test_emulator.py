"""End to end against the engine emulator: deadlines abort server-side work, and the three
patterns run through the real OpenAI-compatible HTTP surface."""

from __future__ import annotations

import re

import anyio
import httpx
import pytest

import agentrt
from agentrt import DeadlineExceeded, Runtime, RuntimeConfig, tool
from agentrt_emulator.server import (
    DEFAULT_MODEL_NAME,
    EmulatorConfig,
    RunningEmulator,
    serve_engine,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def running_requests(http: httpx.AsyncClient, engine: RunningEmulator) -> float:
    text = (await http.get(engine.base_url + "/metrics")).text
    match = re.search(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", text, flags=re.M)
    assert match, "vllm:num_requests_running missing from /metrics"
    return float(match.group(1))


async def test_deadline_aborts_the_request_in_the_engine() -> None:
    async with (
        serve_engine(EmulatorConfig(time_scale=1.0)) as engine,
        httpx.AsyncClient() as http,
    ):
        config = RuntimeConfig(
            base_url=engine.openai_base_url, model=DEFAULT_MODEL_NAME, controller="off"
        )
        async with Runtime(config) as rt:

            async def watch() -> float:
                peak = 0.0
                with anyio.move_on_after(3):
                    while peak < 2:
                        peak = max(peak, await running_requests(http, engine))
                        await anyio.sleep(0.02)
                return peak

            peak = 0.0
            with pytest.raises(DeadlineExceeded):
                async with rt.program("long", timeout_s=2.0), anyio.create_task_group() as tg:

                    async def long_call() -> None:
                        # ~20k output tokens: minutes of decoding at real time.
                        await agentrt.chat(
                            [{"role": "user", "content": "write a book"}],
                            extra_body={"agentrt_output_tokens": 20000},
                        )

                    tg.start_soon(agentrt.gather, long_call, long_call)

                    async def record() -> None:
                        nonlocal peak
                        peak = await watch()

                    tg.start_soon(record)
            assert peak >= 1  # the calls were running in the engine (2 unless the box is slow)
            with anyio.fail_after(3):
                while await running_requests(http, engine) > 0:  # noqa: ASYNC110 - polling HTTP
                    await anyio.sleep(0.02)
            assert engine.state.core.stats().num_running == 0


@tool
async def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return "42"


async def test_patterns_run_against_the_emulator() -> None:
    async with serve_engine(EmulatorConfig(time_scale=200.0)) as engine:
        config = RuntimeConfig(
            base_url=engine.openai_base_url, model=DEFAULT_MODEL_NAME, controller="auto"
        )
        async with Runtime(config) as rt:
            assert rt.controller_state == "absent"  # a plain engine has no program endpoints
            async with rt.program("react") as prog:
                result = await agentrt.react("what is 6*7?", [calculator], max_steps=4)
            assert result.steps >= 1 and prog.status == "ok"
            assert any(n.kind == "tool" for n in prog.nodes.values()) or result.answer

            async def summarise(chunk: str) -> str:
                reply = await agentrt.chat([{"role": "user", "content": chunk}], max_tokens=16)
                return reply.choices[0].message.content or ""

            async def combine(parts: list[str]) -> str:
                reply = await agentrt.chat(
                    [{"role": "user", "content": "\n".join(parts)}], max_tokens=16
                )
                return reply.choices[0].message.content or ""

            summary = await agentrt.map_reduce(
                [f"part {i} of the text" for i in range(4)], summarise, combine, limit=2
            )
            assert summary

            async with rt.program("lats") as tree:
                found = await agentrt.mcts("make 24 from 4 4 6 1", n=2, depth=2, iterations=2)
            assert found.tree_size >= 2 and found.steps
            assert {n.thread_id for n in tree.nodes.values()} >= {"main.0", "main.1"}
