"""What the controller relies on in a real vLLM (CPU build): prefix caching and its metrics,
`cache_salt` tenant separation, and abort on disconnect (priority: test_priority.py).

Every test runs against the one shared server (``--max-num-seqs 2 --scheduling-policy
priority``); tests in this module are sequential, so metric deltas belong to them alone.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
import httpx
import pytest
from openai import AsyncOpenAI, BadRequestError

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.timeout(300)]

LABELS = '{engine="0",model_name="tiny-llama"}'
RUNNING = "vllm:num_requests_running" + LABELS
WAITING = "vllm:num_requests_waiting" + LABELS
HITS = "vllm:prefix_cache_hits_total" + LABELS
QUERIES = "vllm:prefix_cache_queries_total" + LABELS
GENERATED = "vllm:generation_tokens_total" + LABELS


def client_for(server: Any) -> AsyncOpenAI:
    return AsyncOpenAI(
        base_url=server.openai_base_url, api_key="unused", max_retries=0, timeout=120.0
    )


def code_text(lines: int, tag: str = "") -> str:
    """Python-like text (the tiny tokenizer was trained on Python sources), ~9 tokens a line."""
    return "\n".join(f"value_{tag}{i} = compute(value_{tag}{i - 1}, {i})" for i in range(lines))


async def prompt_tokens(server: Any, content: str) -> int:
    """Exact prompt length (tokens) of one user message, chat template included."""
    async with httpx.AsyncClient(timeout=30.0) as http:
        response = await http.post(
            server.base_url + "/tokenize",
            json={"model": server.model, "messages": [{"role": "user", "content": content}]},
        )
    response.raise_for_status()
    count: int = response.json()["count"]
    return count


async def chat_usage(
    client: AsyncOpenAI, server: Any, content: str, **extra: Any
) -> tuple[int, int]:
    """Send one user message (1 output token); return (prompt_tokens, cached_tokens)."""
    response = await client.chat.completions.create(
        model=server.model,
        messages=[{"role": "user", "content": content}],
        max_tokens=1,
        extra_body=extra or None,
    )
    usage = response.usage
    assert usage is not None and usage.prompt_tokens_details is not None
    return usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens or 0


async def wait_for_metrics(
    vllm_metrics: Any, ok: Any, timeout_s: float, what: str
) -> dict[str, float]:
    """Poll /metrics until ok(samples) holds; fail after timeout_s seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples: dict[str, float] = await vllm_metrics()
        if ok(samples):
            return samples
        if time.monotonic() > deadline:
            shown = {k: samples.get(k) for k in (RUNNING, WAITING)}
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}; metrics: {shown}")
        await anyio.sleep(0.02)


async def test_repeated_long_prompt_hits_prefix_cache_in_whole_blocks(
    vllm_server: Any, vllm_metrics: Any
) -> None:
    block = vllm_server.block_size
    content = f"{uuid.uuid4().hex}\n{code_text(70)}"
    n = await prompt_tokens(vllm_server, content)
    assert n > 3 * block, f"prompt of {n} tokens is too short for this test"
    before = await vllm_metrics()
    async with client_for(vllm_server) as client:
        first = await chat_usage(client, vllm_server, content)
        second = await chat_usage(client, vllm_server, content)
    after = await vllm_metrics()

    assert first == (n, 0), "a prompt starting with a fresh nonce cannot be cached"
    # Only whole blocks are cached, and the last prompt token is always recomputed.
    assert second == (n, (n - 1) // block * block)
    # The counters count tokens, not requests: queries = prompt tokens looked up.
    assert after[QUERIES] - before[QUERIES] == 2 * n
    assert after[HITS] - before[HITS] == second[1]


async def test_prefix_shorter_than_one_block_never_hits(vllm_server: Any) -> None:
    content = f"{uuid.uuid4().hex} short"
    n = await prompt_tokens(vllm_server, content)
    assert n < vllm_server.block_size
    async with client_for(vllm_server) as client:
        await chat_usage(client, vllm_server, content)
        assert await chat_usage(client, vllm_server, content) == (n, 0)


async def test_shared_system_prompt_hits_across_different_questions(vllm_server: Any) -> None:
    block = vllm_server.block_size
    system = f"{uuid.uuid4().hex}\n{code_text(40, 's')}\n"
    shared = await prompt_tokens(vllm_server, system)
    async with client_for(vllm_server) as client:
        await chat_usage(client, vllm_server, system + "first question")
        n, cached = await chat_usage(client, vllm_server, system + "another, different one")
    assert cached % block == 0
    # Every whole block inside the shared part hits (the tokenizer may merge across the seam,
    # so the last shared block may be lost).
    assert (shared // block - 1) * block <= cached <= shared
    assert cached >= block and cached < n


async def test_cache_salt_separates_tenants(vllm_server: Any) -> None:
    block = vllm_server.block_size
    content = f"{uuid.uuid4().hex}\n{code_text(40)}"
    n = await prompt_tokens(vllm_server, content)
    full_hit = (n - 1) // block * block
    async with client_for(vllm_server) as client:
        assert await chat_usage(client, vllm_server, content, cache_salt="tenant-a") == (n, 0)
        assert await chat_usage(client, vllm_server, content, cache_salt="tenant-a") == (
            n,
            full_hit,
        )
        # Same prompt, other tenant: nothing is shared, not even the first block.
        assert await chat_usage(client, vllm_server, content, cache_salt="tenant-b") == (n, 0)
        # No salt is a tenant of its own.
        assert await chat_usage(client, vllm_server, content) == (n, 0)
        assert await chat_usage(client, vllm_server, content) == (n, full_hit)


@pytest.mark.parametrize("salt", ["", "tenant/a", "a" * 129])
async def test_cache_salt_is_validated(vllm_server: Any, salt: str) -> None:
    """vLLM rejects an empty salt, one over 128 characters, or one with '@', '/', '\\' or
    NUL: a controller must map tenant ids to a safe salt (e.g. a hash) before forwarding."""
    async with client_for(vllm_server) as client:
        with pytest.raises(BadRequestError, match="cache_salt"):
            await chat_usage(client, vllm_server, "hello", cache_salt=salt)


async def test_client_disconnect_aborts_the_request_upstream(
    vllm_server: Any, vllm_metrics: Any
) -> None:
    max_tokens = 2000  # >= 8 s at the server's 4 ms step floor: far longer than an abort takes
    before = await wait_for_metrics(vllm_metrics, lambda m: m[RUNNING] == 0, 15, "an idle engine")
    received = 0
    async with client_for(vllm_server) as client:
        stream = await client.chat.completions.create(
            model=vllm_server.model,
            messages=[{"role": "user", "content": "Write a very long story."}],
            max_tokens=max_tokens,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        async for _chunk in stream:
            received += 1
            if received == 5:
                break
        await stream.close()  # the client goes away mid-stream
    after = await wait_for_metrics(
        vllm_metrics, lambda m: m[RUNNING] == 0, 15, "the request to leave the batch"
    )
    await anyio.sleep(1.0)  # had it kept running, hundreds more tokens would appear meanwhile
    later = await vllm_metrics()
    # It stopped early and stays stopped: no "ghost tokens" up to max_tokens.
    generated = after[GENERATED] - before[GENERATED]
    assert generated < max_tokens, f"{generated} tokens: the request ran to its end"
    assert later[GENERATED] == after[GENERATED], "tokens kept coming after the abort"
    # A client abort is not a finished request: no request_success_total series moves, not
    # even finished_reason="abort" (the API process drops a client-aborted request without
    # recording its stats; that series only counts aborts reported by the engine core).
    assert finished_total(later) == finished_total(before)


def finished_total(samples: dict[str, float]) -> float:
    return sum(v for k, v in samples.items() if k.startswith("vllm:request_success_total{"))
