"""A backend's KV memory read from its ``/metrics`` (docs/backends.md, "What the controller
reads from a backend's metrics"): vLLM's ``vllm:cache_config_info`` (samples as the installed
vLLM build renders its ``CacheConfig``), SGLang's ``sglang:max_total_num_tokens``, and what a
malformed or missing exposition gives (unknown, never an error)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest

from agentrt.protocol import EVENTS_PREFIX
from agentrt_controller.backends.http import VllmBackend
from agentrt_controller.backends.kv_capacity import (
    DEFAULT_KV_BYTES_PER_TOKEN,
    KvCapacity,
    sglang_capacity,
    vllm_capacity,
)
from agentrt_controller.backends.prometheus_text import labelled_samples
from agentrt_controller.backends.sglang import SGLangBackend
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.backends.transport import HttpPool
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller

from .fake_vllm import FakeVllm, build_app
from .servers import serve_app

pytestmark = [pytest.mark.timeout(30)]
async_test = pytest.mark.anyio

#: ``vllm:cache_config_info`` as vLLM renders it (``CacheConfig.metrics_info()`` through
#: ``prometheus_client``), GPU only: 27,804 blocks of 16 tokens, no CPU tier.
VLLM_INFO = (
    'vllm:cache_config_info{_block_size_resolved="True",block_size="16",cache_dtype="auto",'
    'cache_hit_alignment_tokens="None",effective_attention_block_size="None",'
    'enable_mamba_shared_prefix_checkpoint="False",enable_prefix_caching="True",engine="0",'
    'gpu_memory_utilization="0.92",hash_block_size="None",is_attention_free="False",'
    'kv_cache_dtype_skip_layers="[]",kv_cache_layout="None",kv_cache_max_concurrency="None",'
    'kv_cache_memory_bytes="None",kv_cache_size_tokens="444864",kv_offloading_backend="native",'
    'kv_offloading_size="None",kv_sharing_fast_prefill="False",mamba_block_size="None",'
    'mamba_cache_dtype="auto",mamba_cache_mode="none",mamba_page_size_padded="None",'
    'mamba_ssm_cache_dtype="auto",num_cpu_blocks="None",num_gpu_blocks="27804",'
    'num_gpu_blocks_override="None",prefix_cache_retention_interval="0",'
    'prefix_caching_hash_algo="sha256",prefix_match_unit="None",replayssm_buffer_len="16",'
    'skip_page_size_padded="None",sliding_window="None",swa_bounded_replay="True",'
    'use_kda_recoverssm="False",use_replayssm="False",user_specified_block_size="True"} 1.0'
)

VLLM_METRICS = f"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}} 0.42
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
{VLLM_INFO}
"""


def _offloading(info: str) -> str:
    """The same server started with ``--kv-offloading-size 8`` on a vLLM that does not
    publish ``kv_cache_size_tokens`` (older builds): the capacity is blocks x block size."""
    return info.replace('kv_offloading_size="None"', 'kv_offloading_size="8.0"').replace(
        'kv_cache_size_tokens="444864"', 'kv_cache_size_tokens="None"'
    )


def test_stock_vllm_publishes_its_gpu_capacity_and_no_tier() -> None:
    assert vllm_capacity(VLLM_METRICS) == KvCapacity(gpu_tokens=444_864)


@async_test
async def test_the_vllm_kind_keeps_the_capacity_on_its_load() -> None:
    pool = HttpPool.create(read_timeout_s=5)
    try:
        load = VllmBackend("v", "http://127.0.0.1:9", pool).load_from_metrics(VLLM_METRICS)
    finally:
        await pool.aclose()
    assert load.num_running == 3
    assert load.kv_cache_usage == pytest.approx(0.42)
    assert load.capacity is not None and load.capacity.gpu_tokens == 444_864


def test_an_offloading_vllm_publishes_its_tier_in_bytes() -> None:
    capacity = vllm_capacity(_offloading(VLLM_METRICS))
    assert capacity is not None
    assert capacity.gpu_tokens == 27_804 * 16
    assert capacity.has_tier and capacity.cpu_tokens == 0
    assert capacity.cpu_bytes == 8 * 2**30
    # no bytes per token published: the reference profile's (Llama-3-8B, 128 KiB)
    assert capacity.tier_tokens() == int(8 * 2**30 // DEFAULT_KV_BYTES_PER_TOKEN) == 65_536
    assert capacity.tier_tokens(kv_bytes_per_token=512 * 1024) == 16_384


def test_a_tier_published_in_blocks_wins_over_its_bytes() -> None:
    text = _offloading(VLLM_INFO).replace('num_cpu_blocks="None"', 'num_cpu_blocks="4096"')
    capacity = vllm_capacity(text)
    assert capacity is not None
    assert (capacity.cpu_tokens, capacity.cpu_bytes) == (4096 * 16, 0)


def test_several_engines_the_smallest_counts() -> None:
    second = VLLM_INFO.replace('engine="0"', 'engine="1"').replace(
        'kv_cache_size_tokens="444864"', 'kv_cache_size_tokens="400000"'
    )
    capacity = vllm_capacity(VLLM_INFO + "\n" + second)
    assert capacity is not None and capacity.gpu_tokens == 400_000


@pytest.mark.parametrize(
    "text",
    [
        "",
        "vllm:num_requests_running 3\n",
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0',
        'vllm:cache_config_info{block_size="x",num_gpu_blocks="12"} 1.0',
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="-5"} 1.0',
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="12} 1.0',  # unclosed quote
        "vllm:cache_config_info 1.0",
    ],
)
def test_no_usable_info_means_unknown(text: str) -> None:
    assert vllm_capacity(text) is None


def test_label_values_with_escapes_are_read() -> None:
    text = 'm{a="x\\"y",b="c\\\\d",c="1,2"} 1\nm{broken 1\n'
    assert labelled_samples(text, "m") == [{"a": 'x"y', "b": "c\\d", "c": "1,2"}]


SGLANG_METRICS = """# HELP sglang:max_total_num_tokens Maximum total number of tokens.
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="meta-llama/Llama-3.1-8B-Instruct",tp_rank="0"} 161721.0
sglang:max_total_num_tokens{model_name="meta-llama/Llama-3.1-8B-Instruct",tp_rank="1"} 161700.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct",tp_rank="0"} 0.28
"""


@async_test
async def test_sglang_publishes_its_kv_pool() -> None:
    assert sglang_capacity(SGLANG_METRICS) == KvCapacity(gpu_tokens=161_700)
    assert sglang_capacity("sglang:token_usage 0.2\n") is None
    pool = HttpPool.create(read_timeout_s=5)
    try:
        load = SGLangBackend("s", "http://127.0.0.1:9", pool).load_from_metrics(SGLANG_METRICS)
    finally:
        await pool.aclose()
    assert load.capacity == KvCapacity(gpu_tokens=161_700)


async def _facts(config: ControllerConfig) -> dict[str, Any]:
    apps: list[ControllerApp] = []
    async with (
        serve_controller(config, on_app=apps.append) as url,
        httpx.AsyncClient(timeout=10) as http,
    ):
        with anyio.fail_after(10):
            while True:
                queues = (await http.get(url + EVENTS_PREFIX + "/queues")).json()
                facts: dict[str, Any] = next(iter(queues["retention"]["backends"].values()))
                if facts["published"]:
                    return facts
                await anyio.sleep(0.02)


@async_test
@pytest.mark.parametrize(
    ("cost", "bytes_per_token", "pcie"),
    [
        (None, 131_072, 25e9),  # no profile: the reference (Llama-3-8B on PCIe 4.0)
        ({"profile": "h100-llama3-8b"}, 131_072, 50e9),  # the controller's cost profile
    ],
)
async def test_a_stock_vllm_with_an_offloading_tier_over_http(
    cost: dict[str, str] | None, bytes_per_token: int, pcie: float
) -> None:
    fake = FakeVllm(metrics=_offloading(VLLM_METRICS))
    async with serve_app(build_app(fake)) as vllm_url:
        config = ControllerConfig(
            port=0,
            backends=(BackendSpec(vllm_url, kind="vllm"),),
            scrape_interval_s=0.1,
            **({"cost": cost} if cost else {}),
        )
        facts = await _facts(config)
        assert facts["kv_capacity_tokens"] == 27_804 * 16
        assert facts["cpu_kv_capacity_tokens"] == 8 * 2**30 // bytes_per_token
        assert facts["reload_s_per_token"] == pytest.approx(bytes_per_token / pcie)
        # configured values override what the backend publishes
        options = {"kv_capacity_tokens": 1000, "reload_s_per_token": 1e-5}
        overridden = await _facts(replace(config, retention_options=options))
        assert overridden["kv_capacity_tokens"] == 1000
        assert overridden["reload_s_per_token"] == 1e-5
