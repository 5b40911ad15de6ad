"""The KV CPU tier: offload on eviction and preemption, reload at PCIe cost, LRU bound."""

from __future__ import annotations

import pytest

from agentrt.errors import ConfigError
from agentrt_emulator.core import EngineCore, get_profile, step_time_s

from .helpers import engine, request, run

pytestmark = pytest.mark.timeout(10)

A100 = get_profile("a100-llama3-8b")
BS = 16


def _evict_then_return(num_cpu_blocks: int | None) -> tuple[EngineCore, float]:
    """A (64 tokens) runs, B (112 other tokens) evicts 3 of A's 4 blocks from an 8-block GPU
    cache, A's prompt comes back; returns the engine and the duration of A's return step."""
    core = engine("a100-llama3-8b", num_gpu_blocks=8, num_cpu_blocks=num_cpu_blocks)
    core.add_request(request("a", 64, 1))
    run(core)
    core.add_request(request("b", list(range(1000, 1112)), 1))
    run(core)
    core.add_request(request("a2", 64, 1))
    trace = run(core)
    assert len(trace.steps) == 1
    return core, trace.steps[0].duration_s


# A's blocks 1, 2, 3 are evicted (3, 2, 1 in that order); block 0 stays on the GPU; the last
# prompt token is always computed, so blocks 1 and 2 (32 tokens) are what can be reused.
@pytest.mark.parametrize(
    ("num_cpu_blocks", "reloaded", "recomputed", "computed"),
    [
        (None, 0, 32, 48),  # tier off: blocks 1 and 2 are recomputed
        (16, 32, 0, 16),  # both come back from the CPU tier
        (1, 16, 16, 32),  # the tier kept only the last evicted block (block 1)
    ],
)
def test_evicted_prefix_is_reloaded(
    num_cpu_blocks: int | None, reloaded: int, recomputed: int, computed: int
) -> None:
    core, duration_s = _evict_then_return(num_cpu_blocks)
    stats = core.stats()
    assert stats.reloaded_tokens == reloaded
    assert stats.evicted_prefix_tokens == recomputed
    assert stats.prefix_cache_hits == BS  # block 0, still on the GPU
    reload_s = reloaded * A100.kv_bytes_per_token / A100.pcie_bytes_per_s
    assert duration_s == pytest.approx(step_time_s(A100, computed, 0, 64) + reload_s)
    assert stats.reload_s == pytest.approx(reload_s)
    assert stats.cpu_blocks_used <= stats.num_cpu_blocks


def test_reload_beats_recompute_on_a_long_prefix() -> None:
    # 8,192 tokens: recompute is compute bound (~0.7 s on an A100), reload is 1 GiB over PCIe
    recompute_s = step_time_s(A100, 8192, 0, 8192)
    reload_s = 8192 * A100.kv_bytes_per_token / A100.pcie_bytes_per_s
    assert reload_s < recompute_s


def test_lru_bound_holds() -> None:
    core = engine("a100-llama3-8b", num_gpu_blocks=8, num_cpu_blocks=3)
    for i in range(6):  # each prompt fills 7 blocks and evicts the previous one's
        core.add_request(request(f"r{i}", list(range(1000 * i, 1000 * i + 112)), 1))
        run(core)
        stats = core.stats()
        assert stats.cpu_blocks_used <= 3
    stats = core.stats()
    assert stats.cpu_blocks_used == 3
    assert stats.offloaded_tokens > 3 * BS  # more went through than it holds


def _preempting_pair(num_cpu_blocks: int | None) -> EngineCore:
    """Two 48-token prompts decoding 40 tokens each on 8 blocks: the second is preempted."""
    core = engine("a100-llama3-8b", num_gpu_blocks=8, num_cpu_blocks=num_cpu_blocks)
    core.add_request(request("r1", 48, 40))
    core.add_request(request("r2", list(range(500, 548)), 40, first_token=7))
    trace = run(core)
    assert trace.tokens == {"r1": 40, "r2": 40}
    return core


@pytest.mark.parametrize(("num_cpu_blocks", "offloads"), [(None, False), (64, True)])
def test_preemption_offloads(num_cpu_blocks: int | None, offloads: bool) -> None:
    core = _preempting_pair(num_cpu_blocks)
    stats = core.stats()
    assert stats.num_preemptions >= 1
    assert (stats.offloaded_tokens > 0) is offloads
    assert (stats.reloaded_tokens > 0) is offloads
    off = _preempting_pair(None).stats()
    if offloads:
        # what came back over PCIe was not computed again
        assert stats.recomputed_prompt_tokens < off.recomputed_prompt_tokens
        assert stats.recomputed_prompt_tokens + stats.reloaded_tokens >= (
            off.recomputed_prompt_tokens
        )


def test_tier_without_eviction_changes_nothing() -> None:
    def durations(num_cpu_blocks: int | None) -> list[float]:
        core = engine("a100-llama3-8b", num_cpu_blocks=num_cpu_blocks)
        core.add_request(request("a", 300, 20))
        core.add_request(request("b", [*range(300), *range(900, 950)], 5))
        return [s.duration_s for s in run(core).steps]

    assert durations(1000) == durations(None)


def test_size_in_gib_is_converted_to_blocks() -> None:
    core = engine("a100-llama3-8b", kv_offloading_size=1.0)
    # 1 GiB / (128 KiB per token x 16 tokens per block) = 512 blocks
    assert core.stats().num_cpu_blocks == 512
    assert engine("a100-llama3-8b").stats().num_cpu_blocks == 0


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"kv_offloading_size": 129.0}, "exceeds the host memory"),  # A100 host: 128 GiB
        ({"kv_offloading_size": -1.0}, "kv_offloading_size"),
        ({"kv_offloading_size": float("nan")}, "kv_offloading_size"),
        ({"num_cpu_blocks": -1}, "num_cpu_blocks"),
        ({"num_cpu_blocks": 8, "enable_prefix_caching": False}, "prefix caching"),
    ],
)
def test_bad_tier_config_is_refused(config: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        engine("a100-llama3-8b", **config)


@pytest.mark.parametrize(("salt", "reloaded"), [("tenant-a", 48), ("tenant-b", 0), (None, 0)])
def test_offloaded_blocks_keep_their_salt(salt: str | None, reloaded: int) -> None:
    core = engine("a100-llama3-8b", num_gpu_blocks=8, num_cpu_blocks=16)
    core.add_request(request("a", 64, 1, cache_salt="tenant-a"))
    run(core)
    core.add_request(request("b", list(range(1000, 1128)), 1))  # evicts all of A's blocks
    run(core)
    # A's first 3 blocks are reusable (never the last prompt token)
    core.add_request(request("a2", 64, 1, cache_salt=salt))
    run(core)
    assert core.stats().reloaded_tokens == reloaded
