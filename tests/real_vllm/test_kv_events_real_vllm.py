"""The exact prefix index against a REAL vLLM (CPU build, tiny model) started with
``--kv-events-config``: the controller subscribes, replays, sees the ``BlockStored`` of a
prompt it sent (its own token chain matches vLLM's blocks, cache salt included), the
``BlockRemoved`` of evictions, and the ``AllBlocksCleared`` of a prefix-cache reset (which
vLLM publishes with its next engine step, not at the reset).

One server of its own (8 MiB of KV cache: about 31 blocks of 128 tokens, so four prompts of
~1,100 tokens evict the first), started once for this module (~60 s).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from agentrt_controller.backends import BackendSpec
from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.call import CallFacts
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_controller.service.http.app import ControllerApp

from .controller_helpers import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]

TOPIC = "agentrt-kv"


@dataclass(frozen=True)
class KvServer:
    """A running vLLM and where it publishes its KV events."""

    server: Any
    events_url: str
    replay_url: str

    @property
    def base_url(self) -> str:
        url: str = self.server.base_url
        return url

    @property
    def model(self) -> str:
        model: str = self.server.model
        return model


@pytest.fixture(scope="module")
def kv_server(vllm_server_factory: Any, vllm_launcher: Any) -> Iterator[KvServer]:
    events, replay = vllm_launcher.free_port(), vllm_launcher.free_port()
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        # vLLM binds only an endpoint with a wildcard host; a concrete host it connects to.
        "endpoint": f"tcp://*:{events}",
        "replay_endpoint": f"tcp://*:{replay}",
        "topic": TOPIC,
    }
    options = vllm_launcher.ServerOptions(
        max_num_seqs=2,
        kv_cache_bytes=8 * 1024 * 1024,
        step_floor_ms=0,
        # 8 MiB hold 4,096 tokens less vLLM's null block: shorter contexts, so it starts.
        extra_args=("--max-model-len", "2048", "--kv-events-config", json.dumps(config)),
    )
    server = vllm_server_factory(options)
    yield KvServer(server, f"tcp://127.0.0.1:{events}", f"tcp://127.0.0.1:{replay}")


def words(tag: str, count: int) -> str:
    return " ".join(f"{tag}{i % 97} w{i}" for i in range(count))


async def chat(url: str, model: str, text: str, salt: str) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 2,
        "cache_salt": salt,
    }
    async with httpx.AsyncClient(timeout=300.0) as http:
        response = await http.post(url + "/v1/chat/completions", json=body)
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer


async def test_the_exact_index_follows_a_real_vllm(kv_server: KvServer) -> None:
    apps: list[ControllerApp] = []
    backend = BackendSpec(
        kv_server.base_url,
        kind="vllm",
        priority=False,
        kv_events=kv_server.events_url,
        kv_replay=kv_server.replay_url,
        kv_topic=TOPIC,
    )
    settings = ControllerConfig(port=0, backends=(backend,), router="prefix")
    async with serve_controller(settings, on_app=apps.append) as url:
        engine = apps[0].core
        feed = engine.kv_events
        assert feed is not None
        index, backend_id = feed.index, backend.backend_id

        async def synced() -> bool:
            return index.is_synced(backend_id)

        await wait_until(synced, bool, 60.0, "the first replay")

        async def chain_of(text: str, salt: str) -> CallFacts:
            call = CallFacts(call_id="probe", program=ProgramKey.untagged("probe"))
            body = {"model": kv_server.model, "cache_salt": salt,
                    "messages": [{"role": "user", "content": text}]}  # fmt: skip
            return await feed.fill_token_chain(call, body)

        async def matched(call: CallFacts) -> int | None:
            return index.match(backend_id, call.token_block_hashes, call.token_block_size)

        first = words("a", 220)
        answer = await chat(url, kv_server.model, first, salt="tenant-a")
        prompt_tokens = answer["usage"]["prompt_tokens"]
        full_blocks = prompt_tokens // 128
        assert full_blocks >= 4, prompt_tokens
        await wait_until(lambda: anyio_value(index.block_size(backend_id)), lambda v: v == 128,
                         60.0, "the block size of a BlockStored")  # fmt: skip
        call = await chain_of(first, "tenant-a")
        assert call.token_block_size == 128 and len(call.token_block_hashes) == full_blocks
        await wait_until(lambda: matched(call), lambda m: m == full_blocks, 60.0, "BlockStored")
        # The same text under another salt is not cached (vLLM salts the first block).
        other = await chain_of(first, "tenant-b")
        assert await matched(other) == 0
        # A second call with the same prompt is a prefix-cache hit in vLLM too.
        again = await chat(url, kv_server.model, first, salt="tenant-a")
        cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached == full_blocks * 128

        # Evictions: three more prompts of the same size fill the 32 blocks; vLLM's LRU evicts
        # the first prompt's blocks and publishes BlockRemoved.
        for tag in ("b", "c", "d"):
            await chat(url, kv_server.model, words(tag, 220), salt="tenant-a")
        await wait_until(lambda: matched(call), lambda m: m is not None and m < full_blocks,
                         60.0, "BlockRemoved of the first prompt")  # fmt: skip

        # A prefix-cache reset clears everything: AllBlocksCleared.
        async with httpx.AsyncClient(timeout=60.0) as http:
            reset = await http.post(kv_server.base_url + "/reset_prefix_cache")
        assert reset.status_code == 200, reset.text
        # vLLM queues the event and publishes it with its next engine step: an idle engine
        # publishes nothing until the next request.
        await chat(url, kv_server.model, words("e", 20), salt="tenant-a")
        last = await chain_of(words("d", 220), "tenant-a")
        await wait_until(lambda: anyio_value(index.stats(backend_id).clears), lambda c: c >= 1,
                         60.0, "AllBlocksCleared")  # fmt: skip
        assert await matched(last) == 0
        stats = index.stats(backend_id)
        assert stats.holes == 0 and stats.restarts == 0
        assert feed.tokenize_failures_total == 0

        # The controller exports it all on /metrics.
        async with httpx.AsyncClient(timeout=30.0) as http:
            metrics = (await http.get(url + "/metrics")).text
        assert f'agentrt_kv_events_synced{{backend="{backend_id}"}} 1.0' in metrics
        assert "agentrt_kv_events_applied_total" in metrics


async def anyio_value(value: Any) -> Any:
    """``value`` as an awaitable (for :func:`wait_until`'s probe)."""
    return value
