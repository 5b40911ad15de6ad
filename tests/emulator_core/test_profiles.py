"""Roofline step-time model and hardware profiles: numbers within documented ranges."""

from __future__ import annotations

import math

import pytest

from agentrt.errors import ConfigError
from agentrt_emulator.core import EngineConfig, EngineCore, get_profile, step_time_s
from agentrt_emulator.core.profiles import num_gpu_blocks_for
from agentrt_serving.hardware import PROFILES

pytestmark = pytest.mark.timeout(10)

MS = 1e-3


@pytest.mark.parametrize(
    ("profile", "prefill", "decode_seqs", "kv_tokens", "low_s", "high_s", "why"),
    [
        # decode, batch 1, short context: weights / bandwidth = 16 GB / 2 TB/s = 8 ms
        ("a100-llama3-8b", 0, 1, 100, 8.0 * MS, 9.0 * MS, "memory bound decode"),
        # 16 GB / 3.35 TB/s = 4.8 ms
        ("h100-llama3-8b", 0, 1, 100, 4.7 * MS, 5.5 * MS, "memory bound decode"),
        # 16 GB / 4.8 TB/s = 3.3 ms
        ("h200-llama3-8b", 0, 1, 100, 3.3 * MS, 4.0 * MS, "memory bound decode"),
        # batch 64 x 1,000 context: + 64,000 x 128 KiB = 8.4 GB of KV read -> ~12 ms
        ("a100-llama3-8b", 0, 64, 64_000, 11.5 * MS, 13.5 * MS, "KV read adds up"),
        # 8,192-token prefill: 2 x 8e9 x 8192 / (312e12 x 0.6) = 0.70 s
        ("a100-llama3-8b", 8192, 0, 8192, 0.6, 0.8, "compute bound prefill"),
        ("h100-llama3-8b", 8192, 0, 8192, 0.18, 0.26, "compute bound prefill"),
        # a 512-token chunk is compute bound (44 ms) already
        ("a100-llama3-8b", 512, 0, 512, 40 * MS, 50 * MS, "chunk"),
        ("cpu-tiny", 0, 1, 100, 4 * MS, 7 * MS, "tiny decode"),
        ("unit-step", 0, 1, 1, 1.0, 1.0, "constant"),
        ("unit-step", 8192, 256, 10**7, 1.0, 1.0, "constant whatever the batch"),
    ],
)
def test_step_time_ranges(
    profile: str,
    prefill: int,
    decode_seqs: int,
    kv_tokens: int,
    low_s: float,
    high_s: float,
    why: str,
) -> None:
    t = step_time_s(get_profile(profile), prefill, decode_seqs, kv_tokens)
    assert low_s <= t <= high_s, (why, t)


def test_mixed_step_costs_the_larger_bound_plus_overhead() -> None:
    p = get_profile("a100-llama3-8b")
    prefill_only = step_time_s(p, 2048, 0, 2048)
    decode_only = step_time_s(p, 0, 32, 32 * 2000)
    mixed = step_time_s(p, 2048, 32, 2048 + 32 * 2000)
    assert mixed >= max(prefill_only, decode_only)
    # no double counting: the mixed step is far cheaper than both steps run one after another
    assert mixed < prefill_only + decode_only - p.step_overhead_s
    compute = 2 * p.params * (2048 + 32) / (p.peak_flops * p.efficiency)
    memory = (p.weight_bytes + p.kv_bytes_per_token * (2048 + 32 * 2000)) / p.mem_bytes_per_s
    assert mixed == pytest.approx(p.step_overhead_s + max(compute, memory), rel=1e-12)


def test_step_time_grows_with_batch_and_context() -> None:
    p = get_profile("h100-llama3-8b")
    times = [step_time_s(p, 0, b, b * 1000) for b in (1, 8, 64, 256)]
    assert times == sorted(times)
    assert step_time_s(p, 0, 8, 8 * 4000) > step_time_s(p, 0, 8, 8 * 1000)


def test_kv_capacity_from_memory() -> None:
    p = get_profile("a100-llama3-8b")
    blocks = num_gpu_blocks_for(p, 16, 0.9)
    # (80 GiB x 0.9 - 16 GB weights - 3 GB reserved) / (128 KiB x 16): about 445k tokens,
    # close to what vLLM reports for Llama-3.1-8B on an A100-80GB.
    assert 400_000 <= blocks * 16 <= 500_000
    assert num_gpu_blocks_for(p, 16, 0.5) < blocks
    assert EngineCore(EngineConfig(), p).num_blocks == blocks
    assert EngineCore(EngineConfig(num_gpu_blocks=7), p).num_blocks == 7
    assert EngineCore(EngineConfig(), get_profile("unit-step")).num_blocks == 65536


def test_all_profiles_are_consistent() -> None:
    assert {"a100-llama3-8b", "h100-llama3-8b", "unit-step"} <= set(PROFILES)
    for name, p in PROFILES.items():
        assert p.name == name
        assert p.description
        assert 0 < p.efficiency <= 1
        t = step_time_s(p, 16, 4, 1000)
        assert math.isfinite(t) and t > 0
        assert EngineCore(EngineConfig(), p).num_blocks >= 1


def test_unknown_profile_lists_valid_names() -> None:
    with pytest.raises(ConfigError) as info:
        get_profile("tpu-llama3-8b")
    for name in PROFILES:
        assert name in str(info.value)


def test_profile_without_memory_for_kv_is_a_config_error() -> None:
    p = get_profile("a100-llama3-8b")
    with pytest.raises(ConfigError, match="no room for a KV cache"):
        EngineCore(EngineConfig(gpu_memory_utilization=0.2), p)
