"""Client disconnects abort engine requests; /metrics carries vLLM's names; thread launcher."""

from __future__ import annotations

import anyio
import httpx
import openai as openai_module
import pytest

from agentrt_emulator.server import serve_engine_in_thread

from .helpers import (
    MODEL,
    make_config,
    metric,
    scrape,
    serving,
    wait_metric,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

VLLM_METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:request_queue_time_seconds_bucket",
    "vllm:time_to_first_token_seconds_bucket",
)
LONG = {"max_tokens": 20000, "extra_body": {"ignore_eos": True}}
MESSAGES = [{"role": "user", "content": "Write a very long story."}]


async def test_metric_names_and_counts() -> None:
    async with serving() as (engine, openai):
        completion = await openai.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=12, extra_body={"ignore_eos": True}
        )
        assert completion.usage is not None
        text = await scrape(engine)
    for name in VLLM_METRICS:
        assert metric(text, name, f'model_name="{MODEL}"') >= 0
    assert "# TYPE vllm:e2e_request_latency_seconds histogram" in text
    assert metric(text, "vllm:generation_tokens_total") == 12
    assert metric(text, "vllm:prompt_tokens_total") == completion.usage.prompt_tokens
    assert metric(text, "vllm:e2e_request_latency_seconds_count") == 1
    assert metric(text, "vllm:time_to_first_token_seconds_count") == 1
    assert metric(text, "vllm:request_success_total", 'finished_reason="length"') == 1


async def test_stream_disconnect_aborts_the_request() -> None:
    # Time scale 1: the request would run for minutes unless it is aborted.
    async with serving(make_config(time_scale=1.0)) as (engine, openai):
        stream = await openai.chat.completions.create(
            model=MODEL, messages=MESSAGES, stream=True, **LONG
        )
        received = 0
        async for chunk in stream:
            received += bool(chunk.choices and chunk.choices[0].delta.content)
            if received >= 3:
                break
        assert metric(await scrape(engine), "vllm:num_requests_running") == 1
        await stream.close()
        await wait_metric(engine, "vllm:num_requests_running", 0)
        text = await scrape(engine)
        assert metric(text, "agentrt_engine_aborted_requests_total") == 1
        assert metric(text, "vllm:kv_cache_usage_perc") == 0
        assert engine.state.core.has_unfinished() is False


async def test_non_streaming_disconnect_aborts_the_request() -> None:
    async with serving(make_config(time_scale=1.0)) as (engine, openai):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: openai.chat.completions.create(model=MODEL, messages=MESSAGES, **LONG)
            )
            await wait_metric(engine, "vllm:num_requests_running", 1)
            tg.cancel_scope.cancel()  # the client gives up: its connection closes
        await wait_metric(engine, "vllm:num_requests_running", 0)
        assert metric(await scrape(engine), "agentrt_engine_aborted_requests_total") == 1


async def test_waiting_request_disconnect_leaves_the_queue() -> None:
    config = make_config(time_scale=1.0, max_num_seqs=1)
    async with serving(config) as (engine, openai):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: openai.chat.completions.create(model=MODEL, messages=MESSAGES, **LONG)
            )
            await wait_metric(engine, "vllm:num_requests_running", 1)
            async with anyio.create_task_group() as waiting:
                waiting.start_soon(
                    lambda: openai.chat.completions.create(model=MODEL, messages=MESSAGES, **LONG)
                )
                await wait_metric(engine, "vllm:num_requests_waiting", 1)
                waiting.cancel_scope.cancel()
            await wait_metric(engine, "vllm:num_requests_waiting", 0)
            assert metric(await scrape(engine), "vllm:num_requests_running") == 1
            tg.cancel_scope.cancel()
        await wait_metric(engine, "vllm:num_requests_running", 0)


def test_thread_launcher_serves_synchronous_clients() -> None:
    with serve_engine_in_thread(make_config()) as engine:
        with openai_module.OpenAI(base_url=engine.openai_base_url, api_key="unused") as openai:
            completion = openai.chat.completions.create(
                model=MODEL, messages=MESSAGES, max_tokens=4
            )
        assert completion.choices[0].message.content is not None
        assert httpx.get(engine.base_url + "/health").status_code == 200
