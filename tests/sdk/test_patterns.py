"""map_reduce and mcts against the capturing server (scripted replies)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import agentrt
from agentrt import Runtime, RuntimeConfig
from agentrt.protocol import CallTags

from .fakeserver import FakeServer, FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def cfg(server: FakeServer) -> RuntimeConfig:
    return RuntimeConfig(base_url=server.base_url, model="m1", controller="off")


async def test_map_reduce_fans_out_bounded_then_reduces(
    server: FakeServer, state: FakeState
) -> None:
    state.delay_s = 0.05
    chunks = [f"chunk {i}" for i in range(5)]

    async def summarise(chunk: str) -> str:
        reply = await agentrt.chat([{"role": "user", "content": chunk}])
        return reply.choices[0].message.content or ""

    async def combine(parts: list[str]) -> str:
        reply = await agentrt.chat([{"role": "user", "content": " | ".join(parts)}])
        return reply.choices[0].message.content or ""

    async with Runtime(cfg(server)) as rt, rt.program("mr") as prog:
        result = await agentrt.map_reduce(chunks, summarise, combine, limit=2)
    assert result == "ok"
    tags = {t.node_id: t for t in (CallTags.from_headers(r.headers) for r in state.requests) if t}
    maps = [tags[f"main.{i}:0"] for i in range(5)]
    assert {t.objective for t in maps} == {"throughput"}
    reduce = tags["main:0"]
    assert reduce.objective == "latency"
    assert reduce.parent_ids == tuple(f"main.{i}:0" for i in range(5))
    assert state.peak_running <= 2
    assert state.requests[-1].body["messages"][0]["content"] == " | ".join(["ok"] * 5)
    assert prog.status == "ok"


def _mcts_reply(solve_at_depth: int) -> Any:
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        text = body["messages"][-1]["content"]
        if body.get("response_format"):
            solved = "Answer" in text
            return {
                "role": "assistant",
                "content": json.dumps({"score": 0.95 if solved else 0.4, "solved": solved}),
            }
        if "This attempt failed" in text:
            return {"role": "assistant", "content": "Try smaller numbers first."}
        depth = len(re.findall(r"^\d+\. ", text, flags=re.M))
        step = "Answer: 24" if depth + 1 >= solve_at_depth else "multiply 4 by 6"
        return {"role": "assistant", "content": step}

    return reply


async def test_mcts_expands_in_parallel_threads_and_stops_when_solved(
    server: FakeServer, state: FakeState
) -> None:
    state.reply = _mcts_reply(solve_at_depth=1)
    async with Runtime(cfg(server)) as rt, rt.program("lats") as prog:
        result = await agentrt.mcts("make 24 from 4 4 6 1", n=3, depth=3, iterations=5)
    assert result.solved and result.steps == ["Answer: 24"] and result.iterations == 1
    assert result.tree_size == 3
    threads = {n.thread_id for n in prog.nodes.values()}
    assert threads == {"main.0", "main.1", "main.2"}
    graded = [r for r in state.requests if r.body.get("response_format")]
    assert len(graded) == 3
    assert graded[0].body["response_format"]["json_schema"]["name"] == "evaluation"


async def test_mcts_reflects_on_failures_and_respects_the_budget(
    server: FakeServer, state: FakeState
) -> None:
    state.reply = _mcts_reply(solve_at_depth=2)
    async with Runtime(cfg(server)) as rt, rt.program("lats"):
        result = await agentrt.mcts(
            "make 24", n=2, depth=2, iterations=3, verify=lambda steps: False
        )
    assert not result.solved and result.iterations == 3
    assert result.reflections and result.reflections[0] == "Try smaller numbers first."
    proposals = [r for r in state.requests if "Lessons" in r.body["messages"][-1]["content"]]
    assert any("Try smaller numbers first." in r.body["messages"][-1]["content"] for r in proposals)
