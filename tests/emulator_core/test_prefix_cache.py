"""Prefix cache: chain hashes of full blocks, output blocks, LRU eviction, salts."""

from __future__ import annotations

import pytest

from agentrt.errors import InvalidRequest
from agentrt_emulator.core import EngineCore
from agentrt_emulator.core.kv_cache import extend_hashes, salt_seed

from .helpers import engine, request, run

pytestmark = pytest.mark.timeout(10)


def test_shared_long_prefix_hits() -> None:
    core = engine()
    core.add_request(request("a", 64, 4))
    run(core)
    core.add_request(request("b", [*range(64), *range(1000, 1010)], 2))
    trace = run(core)
    # the 4 full blocks of the shared 64 tokens are reused; the 10 new tokens are computed
    assert trace.cached["b"] == 64
    assert [p.num_computed_tokens for p in trace.steps[0].progress] == [10]
    stats = core.stats()
    assert stats.prefix_cache_queries == 64 + 74
    assert stats.prefix_cache_hits == 64


@pytest.mark.parametrize(
    ("prompt_len", "block_size", "expected_hit"),
    [
        (64, 16, 48),  # whole prompt cached in 4 blocks: the last block is computed again
        (65, 16, 64),
        (15, 16, 0),  # no full block
        (16, 16, 0),  # the only full block holds the last token
        (17, 16, 16),
        (9, 4, 8),
        (8, 4, 4),
    ],
)
def test_identical_prompt_always_computes_its_last_token(
    prompt_len: int, block_size: int, expected_hit: int
) -> None:
    core = engine(block_size=block_size)
    core.add_request(request("first", prompt_len, 3))
    run(core)
    core.add_request(request("again", prompt_len, 3))
    trace = run(core)
    assert trace.cached["again"] == expected_hit
    assert trace.steps[0].progress[0].num_computed_tokens == prompt_len - expected_hit
    full_blocks = prompt_len // block_size
    assert core.cached_prefix_tokens(range(prompt_len), None) == full_blocks * block_size


def test_output_blocks_are_cached_for_the_next_turn() -> None:
    core = engine()
    core.add_request(request("turn1", 40, 30, first_token=1000))
    run(core)
    # the next turn's prompt = previous prompt + previous output + a new message
    turn2 = [*range(40), *range(1000, 1030), *range(5000, 5005)]
    core.add_request(request("turn2", turn2, 2))
    trace = run(core)
    # 69 tokens of KV were computed in turn 1 (the last output token never is): 4 full
    # blocks = 40 prompt tokens + 24 output tokens; prompt blocks alone would give 32.
    assert trace.cached["turn2"] == 64


def test_identical_prompts_in_the_same_step_share_blocks() -> None:
    """Blocks are registered when scheduled, so a request admitted later in the same step
    reuses them (vLLM v1 behaviour)."""
    core = engine()
    core.add_request(request("a", 64, 2))
    core.add_request(request("b", 64, 2))
    first = core.step(0.0)
    assert first is not None
    computed = {p.request_id: p.num_computed_tokens for p in first.progress}
    assert computed == {"a": 64, "b": 16}
    assert {p.request_id: p.num_cached_tokens for p in first.progress} == {"a": 0, "b": 48}


def _lru_setup(touch: str, probe_between: bool) -> tuple[list[int], list[int], EngineCore]:
    """8 blocks of 4 tokens; X then Y cached (2 blocks each); one of them touched again."""
    core = engine(block_size=4, num_gpu_blocks=8)
    x = list(range(100, 108))
    y = list(range(200, 208))
    core.add_request(request("x", x, 1))
    run(core)
    core.add_request(request("y", y, 1))
    run(core)
    if probe_between:
        # read-only probes must not refresh anything
        for _ in range(3):
            assert core.cached_prefix_tokens(x if touch == "y" else y, None) == 8
    touched = x if touch == "x" else y
    core.add_request(request("touch", [*touched, 999], 1))
    trace = run(core)
    assert trace.cached["touch"] == 8
    # 20 fresh prompt tokens need 5 blocks: 3 never-cached ones, then the 2 oldest cached
    core.add_request(request("pressure", list(range(300, 320)), 1))
    run(core)
    return x, y, core


@pytest.mark.parametrize(("touch", "probe_between"), [("x", False), ("y", False), ("x", True)])
def test_lru_evicts_least_recently_used_blocks_first(touch: str, probe_between: bool) -> None:
    x, y, core = _lru_setup(touch, probe_between)
    kept, evicted = (x, y) if touch == "x" else (y, x)
    assert core.cached_prefix_tokens(kept, None) == 8
    assert core.cached_prefix_tokens(evicted, None) == 0


def test_evicted_prefix_is_counted_when_requested_again() -> None:
    _, y, core = _lru_setup("x", False)
    before = core.stats().evicted_prefix_tokens
    core.add_request(request("y-again", [*y, 1, 2, 3, 4, 5], 1))
    run(core)
    assert core.stats().evicted_prefix_tokens - before == 8


def test_a_finished_requests_tail_blocks_are_evicted_first() -> None:
    core = engine(block_size=4, num_gpu_blocks=6)
    a = list(range(100, 116))  # 4 full blocks
    core.add_request(request("a", a, 1))
    run(core)
    assert core.cached_prefix_tokens(a, None) == 16
    # 3 blocks needed: the 2 never-used free blocks, then a's tail block (freed first)
    core.add_request(request("b", list(range(500, 512)), 1))
    run(core)
    assert core.cached_prefix_tokens(a, None) == 12


@pytest.mark.parametrize(
    ("salt_a", "salt_b", "shared"),
    [
        (None, None, True),
        ("tenant-1", "tenant-1", True),
        ("tenant-1", "tenant-2", False),
        (None, "tenant-1", False),
        ("tenant-1", None, False),
    ],
)
def test_cache_salt_isolates_tenants(salt_a: str | None, salt_b: str | None, shared: bool) -> None:
    core = engine()
    core.add_request(request("a", 80, 2, cache_salt=salt_a))
    run(core)
    assert core.cached_prefix_tokens(range(80), salt_b) == (80 if shared else 0)
    core.add_request(request("b", 80, 2, cache_salt=salt_b))
    trace = run(core)
    assert trace.cached["b"] == (64 if shared else 0)


def test_prefix_caching_off() -> None:
    core = engine(enable_prefix_caching=False)
    core.add_request(request("a", 80, 2))
    run(core)
    core.add_request(request("b", 80, 2))
    trace = run(core)
    assert trace.cached["b"] == 0
    assert core.cached_prefix_tokens(range(80), None) == 0
    assert core.stats().prefix_cache_queries == 0
    assert core.pin("p", range(80), cache_salt=None, ttl_s=10.0, now_s=0.0) == 0


def test_hashes_are_deterministic_across_engines() -> None:
    """Two engines fed the same inputs take identical decisions (no hash randomisation)."""
    traces = []
    for _ in range(2):
        core = engine(block_size=4, num_gpu_blocks=12)
        for i in range(6):
            core.add_request(request(f"r{i}", [7] * (4 + 3 * i), 3, cache_salt=f"s{i % 2}"))
        traces.append((run(core).cached, core.stats()))
    assert traces[0] == traces[1]


def test_hash_probe_matches_token_probe_and_extends() -> None:
    core = engine(block_size=4)
    context = list(range(40))
    core.add_request(request("a", context, 9, first_token=500))
    run(core)
    full = [*context, *range(500, 509)]
    hashes = core.prefix_hashes(full[:20], "t")
    assert core.cached_prefix_tokens_for(hashes) == 0  # another salt
    hashes = core.prefix_hashes(full[:20], None)
    assert core.cached_prefix_tokens_for(hashes) == core.cached_prefix_tokens(full[:20], None) == 20
    # a growing context: extend the same list instead of rehashing from the start
    extend_hashes(hashes, tuple(full), 4, salt_seed(None), len(full) // 4)
    assert hashes == core.prefix_hashes(full, None)
    assert core.cached_prefix_tokens_for(hashes) == 48  # 48 of 49 tokens were computed


def test_a_prompts_chain_handed_in_changes_nothing() -> None:
    """``EngineRequest.prompt_hashes`` (the simulator's kept chain) saves the engine hashing;
    runs with the whole chain, a part of it or none are step for step the same."""
    traces = []
    for known in (None, 3, 6):
        core = engine(block_size=16)
        turn_one = request("a", 100, 20)
        core.add_request(turn_one)
        run(core)
        turn_two = request("b", [*range(100), *range(20), *range(500, 530)], 5)
        if known is not None:
            turn_two.prompt_hashes = core.prefix_hashes(turn_two.prompt_token_ids, None)[:known]
        core.add_request(turn_two)
        traces.append((run(core), core.stats()))
    (base, base_stats), *others = traces
    assert base.cached["b"] == 112  # 7 full blocks of turn one's prompt + output
    for trace, stats in others:
        assert trace.steps == base.steps
        assert stats == base_stats


def test_a_chain_longer_than_the_prompt_is_refused() -> None:
    core = engine(block_size=16)
    too_long = request("a", 40, 2)
    too_long.prompt_hashes = [1, 2, 3]  # 40 tokens hold 2 full blocks
    with pytest.raises(InvalidRequest, match="3 prompt hashes given for 2 full blocks") as caught:
        core.add_request(too_long)
    assert caught.value.param == "prompt_hashes"
    assert not core.has_unfinished()
