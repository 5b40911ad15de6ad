"""The emulator publishes its KV memory under vLLM's name, ``vllm:cache_config_info`` (labels
``block_size``, ``num_gpu_blocks``, ``num_cpu_blocks``, ``kv_offloading_size``,
``kv_cache_size_tokens``: its real figures), and its CPU tier's reload cost, so a controller
learns them as from vLLM (docs/engine-emulator.md, "Metrics")."""

from __future__ import annotations

import pytest

from agentrt_controller.backends.kv_capacity import KvCapacity, vllm_capacity
from agentrt_controller.backends.prometheus_text import labelled_samples

from .helpers import make_config, scrape, serving

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.mark.parametrize("size_gib", [0.0, 1.0])
async def test_the_cache_config_info_carries_the_real_figures(size_gib: float) -> None:
    config = make_config(num_gpu_blocks=40, kv_offloading_size=size_gib)
    async with serving(config) as (engine, _):
        text = await scrape(engine)
    (labels,) = labelled_samples(text, "vllm:cache_config_info")
    assert labels["block_size"] == "16"
    assert labels["num_gpu_blocks"] == "40"
    assert labels["kv_cache_size_tokens"] == "640"
    if size_gib:
        assert labels["kv_offloading_size"] == "1.0"
        assert labels["num_cpu_blocks"] == "512"  # 1 GiB / 2 MiB blocks
        # the default profile's Llama-3-8B KV (128 KiB a token) over PCIe 4.0 x16
        capacity = vllm_capacity(text)
        assert capacity is not None
        assert (capacity.gpu_tokens, capacity.cpu_tokens, capacity.cpu_bytes) == (640, 8192, 0)
        assert capacity.reload_s_per_token == pytest.approx(131_072 / 25e9)
    else:
        assert labels["kv_offloading_size"] == labels["num_cpu_blocks"] == "None"
        assert "agentrt_engine_kv_reload_s_per_token" not in text
        assert vllm_capacity(text) == KvCapacity(gpu_tokens=640)
