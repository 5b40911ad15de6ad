"""Prefix caching, cache_salt isolation, retention pins, priority order and time scale over HTTP."""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx
import pytest
from openai import AsyncOpenAI

from agentrt_emulator.core.profiles import get_profile

from .helpers import (
    MODEL,
    make_config,
    metric,
    poll_until,
    scrape,
    serving,
    wait_metric,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

LONG_SYSTEM = "You are the planning agent. " + " ".join(f"rule{i} applies here" for i in range(120))


def conversation(topic: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": LONG_SYSTEM},
        {"role": "user", "content": f"Plan the {topic} trip in detail."},
    ]


async def cached(openai: AsyncOpenAI, messages: list[dict[str, Any]], **extra: Any) -> int:
    completion = await openai.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=8, extra_body=extra or None
    )
    assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
    return completion.usage.prompt_tokens_details.cached_tokens or 0


async def test_repeated_long_prompt_reports_cached_tokens() -> None:
    async with serving() as (engine, openai):
        first = await cached(openai, conversation("Lisbon"))
        second = await cached(openai, conversation("Lisbon"))
        assert first == 0
        assert second > 300
        text = await scrape(engine)
        assert metric(text, "vllm:prefix_cache_hits_total") >= second
        assert metric(text, "vllm:prefix_cache_queries_total") > metric(
            text, "vllm:prefix_cache_hits_total"
        )


async def test_next_turn_hits_previous_prompt_and_reply() -> None:
    async with serving() as (_, openai):
        turn1 = conversation("Porto")
        reply = await openai.chat.completions.create(
            model=MODEL, messages=turn1, extra_body={"agentrt_output_tokens": 64}
        )
        assert reply.usage is not None
        turn2 = [
            *turn1,
            {"role": "assistant", "content": reply.choices[0].message.content},
            {"role": "user", "content": "Shorter, please."},
        ]
        hit = await cached(openai, turn2)
        # The whole first prompt and the reply are cached, up to the last full block.
        assert hit >= reply.usage.prompt_tokens + reply.usage.completion_tokens - 16


async def test_cache_salt_isolates_tenants() -> None:
    async with serving() as (_, openai):
        messages = conversation("Madrid")
        assert await cached(openai, messages, cache_salt="tenant-a") == 0
        assert await cached(openai, messages, cache_salt="tenant-b") == 0
        assert await cached(openai, messages) == 0
        assert await cached(openai, messages, cache_salt="tenant-a") > 300


async def test_pin_round_trip_and_expiry() -> None:
    async with serving(make_config(time_scale=1000)) as (engine, openai):
        messages = conversation("Rome")
        await cached(openai, messages)
        async with httpx.AsyncClient(base_url=engine.base_url) as http:
            created = await http.post(
                "/agentrt/engine/v1/pins",
                json={"pin_id": "prog-1", "messages": messages, "ttl_s": 3600},
            )
            assert created.status_code == 200, created.text
            body = created.json()
            assert body["pin_id"] == "prog-1" and body["blocks"] > 10
            listed = (await http.get("/agentrt/engine/v1/pins")).json()
            assert [p["pin_id"] for p in listed["pins"]] == ["prog-1"]
            assert listed["pinned_blocks"] == body["blocks"]
            assert metric(await scrape(engine), "agentrt_engine_pinned_blocks") == body["blocks"]
            assert (await http.delete("/agentrt/engine/v1/pins/prog-1")).status_code == 200
            assert (await http.delete("/agentrt/engine/v1/pins/prog-1")).status_code == 404
            short = await http.post(
                "/agentrt/engine/v1/pins",
                json={"pin_id": "prog-2", "messages": messages, "ttl_s": 2.0},
            )
            assert short.json()["blocks"] > 10

            # 2 model seconds = 2 ms of wall time at --time-scale 1000.
            async def lapsed() -> bool:
                return not (await http.get("/agentrt/engine/v1/pins")).json()["pins"]

            await poll_until(lapsed, 5)
            assert (await http.get("/agentrt/engine/v1/pins")).json()["pinned_blocks"] == 0


async def test_pinned_prefix_survives_memory_pressure() -> None:
    # 96 blocks of 16 tokens: room for about three of these conversations at once.
    config = make_config(num_gpu_blocks=96, max_model_len=1400)

    async def flood(openai: AsyncOpenAI) -> None:
        for topic in ("Oslo", "Bergen", "Turku", "Tampere", "Espoo"):
            await cached(openai, [{"role": "user", "content": topic + " " + LONG_SYSTEM}])

    async with serving(config) as (engine, openai):
        await cached(openai, conversation("Paris"))
        await flood(openai)
        assert await cached(openai, conversation("Paris")) == 0, "LRU should have evicted it"
        async with httpx.AsyncClient(base_url=engine.base_url) as http:
            pinned = await http.post(
                "/agentrt/engine/v1/pins",
                json={"pin_id": "paris", "messages": conversation("Paris"),
                      "add_generation_prompt": True, "ttl_s": None},
            )  # fmt: skip
            assert pinned.json()["blocks"] > 10
            await flood(openai)
            assert await cached(openai, conversation("Paris")) > 300
            await http.delete("/agentrt/engine/v1/pins/paris")


async def test_priority_header_and_body_order_queued_requests() -> None:
    # The blocker runs ~13 model s = ~0.6 s of wall time: the others surely queue behind it.
    config = make_config(time_scale=20, max_num_seqs=1, scheduling_policy="priority")
    async with serving(config) as (engine, openai):
        finished: list[str] = []

        async def call(name: str, priority: int, tokens: int, header: bool = False) -> None:
            extra_headers = {"X-Vllm-Priority": str(priority)} if header else None
            extra_body: dict[str, Any] = {"ignore_eos": True}
            if not header:
                extra_body["priority"] = priority
            await openai.chat.completions.create(
                model=MODEL, messages=conversation(name), max_tokens=tokens,
                extra_body=extra_body, extra_headers=extra_headers,
            )  # fmt: skip
            finished.append(name)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "blocker", 0, 1500)
            await wait_metric(engine, "vllm:num_requests_running", 1)
            tg.start_soon(call, "late-low", 5, 4)
            await wait_metric(engine, "vllm:num_requests_waiting", 1)
            tg.start_soon(call, "later-high", -3, 4, True)
        assert finished == ["blocker", "later-high", "late-low"]


async def test_fcfs_refuses_non_zero_priority_like_vllm() -> None:
    async with serving() as (_, openai):
        with pytest.raises(Exception) as caught:
            await openai.chat.completions.create(
                model=MODEL, messages=conversation("x"), extra_body={"priority": 1}
            )
        assert "Priority scheduling is not enabled" in str(caught.value)
        ok = await openai.chat.completions.create(
            model=MODEL, messages=conversation("x"), extra_body={"priority": 0}, max_tokens=2
        )
        assert ok.choices


async def test_time_scale_runs_faster_than_the_modelled_gpu() -> None:
    tokens = 200
    async with serving(make_config(time_scale=500)) as (engine, openai):
        started = time.monotonic()
        await openai.chat.completions.create(
            model=MODEL, messages=conversation("Kyoto"), max_tokens=tokens,
            extra_body={"ignore_eos": True},
        )  # fmt: skip
        wall_s = time.monotonic() - started
        text = await scrape(engine)
    model_s = metric(text, "vllm:e2e_request_latency_seconds_sum")
    profile = get_profile("a100-llama3-8b")
    # Every decode step reads all the weights once: a lower bound of the modelled time.
    assert model_s >= tokens * profile.weight_bytes / profile.mem_bytes_per_s
    assert wall_s < model_s / 5


async def test_memory_pressure_preempts_and_every_request_still_finishes() -> None:
    # 40 blocks of 16 tokens; four requests that each grow to ~22 blocks cannot all fit.
    config = make_config(time_scale=500, num_gpu_blocks=40, max_model_len=640)
    async with serving(config) as (engine, openai):
        usages: list[int] = []

        async def call(index: int) -> None:
            completion = await openai.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"story {index}"}],
                max_tokens=300, extra_body={"ignore_eos": True},
            )  # fmt: skip
            assert completion.usage is not None
            usages.append(completion.usage.completion_tokens)

        async with anyio.create_task_group() as tg:
            for index in range(4):
                tg.start_soon(call, index)
        assert usages == [300] * 4
        text = await scrape(engine)
        assert metric(text, "vllm:num_preemptions_total") > 0
        assert metric(text, "agentrt_engine_recomputed_prompt_tokens_total") > 0
