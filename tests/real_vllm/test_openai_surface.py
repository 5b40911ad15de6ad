"""A real vLLM (CPU, tiny random Llama) answers the OpenAI API and exposes the metrics the
controller scrapes. Facts recorded here are written up in docs/real-vllm.md."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.timeout(300)]

# The five metrics the controller's load estimate and prefix accounting read (docs/routing.md).
SCRAPED = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
)


def client_for(server: Any) -> AsyncOpenAI:
    return AsyncOpenAI(
        base_url=server.openai_base_url, api_key="unused", max_retries=0, timeout=60.0
    )


async def test_chat_completion_non_stream(vllm_server: Any) -> None:
    async with client_for(vllm_server) as client:
        response = await client.chat.completions.create(
            model=vllm_server.model,
            messages=[{"role": "user", "content": "Say something about agents."}],
            max_tokens=12,
            temperature=0.0,
            extra_body={"ignore_eos": True},
        )
    assert response.model == vllm_server.model
    choice = response.choices[0]
    assert choice.finish_reason == "length"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert response.usage is not None
    assert response.usage.completion_tokens == 12
    assert response.usage.prompt_tokens > 0


async def test_chat_completion_stream_with_usage(vllm_server: Any) -> None:
    deltas: list[str] = []
    usage = None
    finish_reasons: list[str] = []
    async with client_for(vllm_server) as client:
        stream = await client.chat.completions.create(
            model=vllm_server.model,
            messages=[{"role": "user", "content": "Count to ten."}],
            max_tokens=10,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.content:
                    deltas.append(choice.delta.content)
                if choice.finish_reason:
                    finish_reasons.append(choice.finish_reason)
    assert len(deltas) >= 2, "a streamed answer arrives in several chunks"
    assert finish_reasons == ["length"]
    assert usage is not None and usage.completion_tokens == 10


async def test_tokenize_counts_prompt_tokens_exactly(vllm_server: Any) -> None:
    text = "def add(a, b):\n    return a + b\n"
    async with httpx.AsyncClient(timeout=30.0) as http:
        tokenized = (
            await http.post(
                vllm_server.base_url + "/tokenize",
                json={"model": vllm_server.model, "prompt": text, "add_special_tokens": False},
            )
        ).json()
    async with client_for(vllm_server) as client:
        completion = await client.completions.create(
            model=vllm_server.model, prompt=text, max_tokens=1
        )
    assert tokenized["count"] == len(tokenized["tokens"]) > 0
    assert completion.usage is not None
    # The completions API adds no BOS for this tokenizer: /tokenize is exact.
    assert completion.usage.prompt_tokens == tokenized["count"]


async def test_metrics_expose_what_the_controller_scrapes(
    vllm_server: Any, vllm_metrics: Any
) -> None:
    samples = await vllm_metrics()
    labels = f'{{engine="0",model_name="{vllm_server.model}"}}'
    for name in SCRAPED:
        assert name + labels in samples, f"{name} missing; have {sorted(samples)[:20]}…"
    assert 0.0 <= samples["vllm:kv_cache_usage_perc" + labels] <= 1.0
    # Abort and other finish reasons are one counter with a label.
    for reason in ("stop", "length", "abort"):
        key = (
            'vllm:request_success_total{engine="0",'
            f'finished_reason="{reason}",model_name="{vllm_server.model}"}}'
        )
        assert key in samples
    # The KV block size (prefix-cache granularity) is published as an info metric.
    info = next(k for k in samples if k.startswith("vllm:cache_config_info{"))
    block = re.search(r'(?:^|[{,])block_size="(\d+)"', info)
    assert block is not None and int(block.group(1)) == vllm_server.block_size
