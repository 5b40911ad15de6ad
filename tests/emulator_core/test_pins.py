"""Retention pins: pinned blocks survive memory pressure until expiry or unpin
(docs/engine-model.md)."""

from __future__ import annotations

import math

import pytest

from agentrt.errors import InvalidRequest
from agentrt_emulator.core import EngineCore

from .helpers import engine, request, run

pytestmark = pytest.mark.timeout(10)

CONTEXT = list(range(100, 108))  # 2 full blocks of 4 tokens


def _warm(num_gpu_blocks: int = 8) -> EngineCore:
    core = engine(block_size=4, num_gpu_blocks=num_gpu_blocks)
    core.add_request(request("ctx", CONTEXT, 1))
    run(core)
    assert core.cached_prefix_tokens(CONTEXT, None) == 8
    return core


def _pressure(core: EngineCore, rid: str, now_s: float, blocks: int = 6) -> None:
    """Two fresh requests in a row that use ``blocks`` blocks of 4 tokens each: the second
    one reuses every block the first freed and then the least recently used cached ones."""
    for round_ in range(2):
        first = 1000 + 100 * round_
        tokens = list(range(first, first + 4 * blocks))
        core.add_request(request(f"{rid}-{round_}", tokens, 1, arrival_s=now_s))
        now_s = run(core, now_s=now_s).now_s


@pytest.mark.parametrize("pinned", [True, False])
def test_pin_survives_memory_pressure(pinned: bool) -> None:
    core = _warm()
    if pinned:
        assert core.pin("prog-1", CONTEXT, cache_salt=None, ttl_s=30.0, now_s=0.0) == 2
        stats = core.stats()
        assert stats.pinned_blocks == 2
        assert stats.kv_cache_usage == pytest.approx(2 / 8)  # pins count as used memory
    _pressure(core, "big", now_s=1.0)  # takes all 6 unpinned blocks; would evict the context
    assert core.cached_prefix_tokens(CONTEXT, None) == (8 if pinned else 0)


def test_pin_expires_then_blocks_are_evictable() -> None:
    core = _warm()
    core.pin("prog-1", CONTEXT, cache_salt=None, ttl_s=30.0, now_s=0.0)
    assert core.next_pin_expiry_s == 30.0
    assert core.expire_pins(29.999) == 0
    _pressure(core, "before", now_s=10.0)
    assert core.cached_prefix_tokens(CONTEXT, None) == 8
    # each step expires pins first
    _pressure(core, "after", now_s=30.0)
    assert core.stats().pinned_blocks == 0
    assert core.next_pin_expiry_s == math.inf
    assert core.cached_prefix_tokens(CONTEXT, None) == 0


def test_unpin_makes_blocks_evictable() -> None:
    core = _warm()
    core.pin("prog-1", CONTEXT, cache_salt=None, ttl_s=math.inf, now_s=0.0)
    _pressure(core, "p1", now_s=1.0)
    assert core.cached_prefix_tokens(CONTEXT, None) == 8
    assert core.unpin("prog-1") is True
    assert core.unpin("prog-1") is False
    assert core.stats().pinned_blocks == 0
    _pressure(core, "p2", now_s=2.0)
    assert core.cached_prefix_tokens(CONTEXT, None) == 0


def test_repinning_refreshes_the_ttl() -> None:
    core = _warm()
    core.pin("prog-1", CONTEXT, cache_salt=None, ttl_s=10.0, now_s=0.0)
    core.pin("prog-1", CONTEXT, cache_salt=None, ttl_s=10.0, now_s=5.0)
    assert core.stats().pinned_blocks == 2  # the same blocks, pinned once
    assert core.expire_pins(12.0) == 0
    assert core.expire_pins(15.0) == 1
    assert core.stats().pinned_blocks == 0


def test_overlapping_pins_hold_a_block_until_the_last_goes() -> None:
    core = _warm()
    core.pin("whole", CONTEXT, cache_salt=None, ttl_s=10.0, now_s=0.0)
    assert core.pin("half", CONTEXT[:4], cache_salt=None, ttl_s=20.0, now_s=0.0) == 1
    assert core.expire_pins(10.0) == 1
    assert core.stats().pinned_blocks == 1
    _pressure(core, "p", now_s=11.0, blocks=7)
    assert core.cached_prefix_tokens(CONTEXT, None) == 4


@pytest.mark.parametrize(
    ("tokens", "salt", "expected_blocks"),
    [
        (CONTEXT, None, 2),
        ([*CONTEXT, 1, 2, 3, 4], None, 2),  # only blocks already cached are pinned
        (CONTEXT[:7], None, 1),  # only full blocks
        ([7, 7, 7, 7, *CONTEXT], None, 0),  # prefix must match from the start
        (CONTEXT, "other-tenant", 0),
    ],
)
def test_pin_covers_only_cached_full_blocks(
    tokens: list[int], salt: str | None, expected_blocks: int
) -> None:
    core = _warm()
    assert core.pin("p", tokens, cache_salt=salt, ttl_s=5.0, now_s=0.0) == expected_blocks
    assert core.stats().pinned_blocks == expected_blocks


def test_pinned_memory_can_block_admission_until_expiry() -> None:
    core = _warm(num_gpu_blocks=3)
    core.pin("p", CONTEXT, cache_salt=None, ttl_s=40.0, now_s=0.0)
    core.add_request(request("needs-two-blocks", list(range(500, 508)), 1))
    assert core.step(1.0) is None
    assert core.has_unfinished() and core.num_waiting == 1
    trace = run(core, now_s=core.next_pin_expiry_s)
    assert trace.tokens == {"needs-two-blocks": 1}


def test_a_request_can_hit_pinned_blocks() -> None:
    core = _warm()
    core.pin("p", CONTEXT, cache_salt=None, ttl_s=40.0, now_s=0.0)
    core.add_request(request("next-turn", [*CONTEXT, 1, 2, 3], 2))
    trace = run(core)
    assert trace.cached["next-turn"] == 8
    assert core.stats().pinned_blocks == 2  # still pinned after the request left
    assert core.num_free_blocks == 6


@pytest.mark.parametrize(("ttl_s", "salt"), [(-1.0, None), (math.nan, None), (1.0, "")])
def test_bad_pin_arguments(ttl_s: float, salt: str | None) -> None:
    core = _warm()
    with pytest.raises(InvalidRequest):
        core.pin("p", CONTEXT, cache_salt=salt, ttl_s=ttl_s, now_s=0.0)
