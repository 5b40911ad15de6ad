"""vLLM's per-request `priority` field, on a server with `--scheduling-policy priority` and on
one with the default FCFS policy. Facts: docs/real-vllm.md ("Priority")."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from openai import AsyncOpenAI

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.timeout(300)]

# Two fillers (priority 0) take both batch slots; F2 outlasts F1 + H + W1 + W2
# (300 + 3 * 64 decode steps), so the queued four then run strictly one at a time, and their
# completions, 64 tokens apart, cannot race on the way back.
FILLERS = [("F1", 0, 300), ("F2", 0, 600)]
# Queued in this order while both slots are busy: (name, priority, max_tokens).
QUEUED = [("W3", 12, 64), ("W2", 11, 64), ("W1", 10, 64), ("H", 1, 64)]


async def completion_order(server: Any) -> list[str]:
    """Queue FILLERS then QUEUED on a paused engine, resume it, return the queued requests'
    completion order.

    The engine is paused with the dev endpoint /pause?mode=keep while all six requests
    arrive, so the outcome does not depend on how fast or busy this machine is.
    """
    assert server.max_num_seqs == 2
    finished: list[str] = []

    async def send(client: AsyncOpenAI, name: str, priority: int, max_tokens: int) -> None:
        await client.completions.create(
            model=server.model,
            prompt=f"request {name}",
            max_tokens=max_tokens,
            extra_body={"ignore_eos": True, "priority": priority},
        )
        finished.append(name)

    async with (
        AsyncOpenAI(
            base_url=server.openai_base_url, api_key="unused", max_retries=0, timeout=120.0
        ) as client,
        httpx.AsyncClient(timeout=30.0) as http,
    ):
        paused = await http.post(server.base_url + "/pause", params={"mode": "keep"})
        paused.raise_for_status()
        try:
            async with anyio.create_task_group() as tg:
                for name, priority, max_tokens in FILLERS + QUEUED:
                    tg.start_soon(send, client, name, priority, max_tokens)
                    await anyio.sleep(0.1)  # arrival order as listed
                # Let the last request reach the engine's queue. Even if it came late, it
                # would only need to arrive within F1's 300 decode steps.
                await anyio.sleep(0.5)
                (await http.post(server.base_url + "/resume")).raise_for_status()
        finally:
            await http.post(server.base_url + "/resume")
    return [name for name in finished if not name.startswith("F")]


async def test_lower_priority_value_runs_first_when_slots_free(vllm_server: Any) -> None:
    # By priority value, lowest first: the reverse of their arrival.
    assert await completion_order(vllm_server) == ["H", "W1", "W2", "W3"]


async def test_fcfs_server_accepts_priority_and_ignores_it(vllm_fcfs_server: Any) -> None:
    # vLLM 0.32 does not reject `priority` under FCFS (HTTP 200): it serves arrival order.
    # A client cannot tell the two policies apart from the API; configure it explicitly.
    assert await completion_order(vllm_fcfs_server) == ["W3", "W2", "W1", "H"]
