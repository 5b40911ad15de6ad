"""The exact prefix index fed by vLLM's KV events (pure: no sockets, no clock)."""

from __future__ import annotations

import tracemalloc

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.routing.hashing import token_block_hashes
from agentrt_controller.routing.kv_index import (
    BYTES_PER_BLOCK,
    AllBlocksCleared,
    ApplyOutcome,
    BlockRemoved,
    BlockStored,
    ExactPrefixIndex,
    KvEventBatch,
)
from agentrt_controller.scheduling.call import CallEntry

pytestmark = pytest.mark.timeout(30)

BS = 4  # tokens per block in these tests
B = "gpu1:8000"


def stored(tokens: list[int], hashes: list[int], parent: int | None = None,
           salt: str | None = None, **extra: object) -> BlockStored:  # fmt: skip
    keys = None
    if salt is not None:
        keys = tuple([(salt,)] + [None] * (len(hashes) - 1))
    return BlockStored(
        block_hashes=tuple(hashes),
        parent_block_hash=parent,
        token_ids=tuple(tokens),
        block_size=BS,
        medium="GPU",
        extra_keys=keys,
        **extra,  # type: ignore[arg-type]
    )


def batch(seq: int, *events: object) -> KvEventBatch:
    return KvEventBatch(seq=seq, ts=0.0, events=tuple(events))  # type: ignore[arg-type]


PROMPT = list(range(100, 116))  # 4 blocks
CHAIN = token_block_hashes(PROMPT, BS)


def synced_index() -> ExactPrefixIndex:
    index = ExactPrefixIndex()
    index.replay_done(B)  # nothing published yet: an empty, synced cache
    return index


def test_stored_blocks_match_the_prompt_chain_hashed_our_way() -> None:
    index = synced_index()
    # vLLM stores the first two blocks, then the next two chained to its hash 11.
    assert index.apply(B, batch(0, stored(PROMPT[:8], [10, 11]))) is ApplyOutcome.APPLIED
    assert index.match(B, CHAIN, BS) == 2
    index.apply(B, batch(1, stored(PROMPT[8:], [12, 13], parent=11)))
    assert index.match(B, CHAIN, BS) == 4
    # Another prompt sharing the first block only.
    other = [*PROMPT[:4], 9, 9, 9, 9]
    assert index.match(B, token_block_hashes(other, BS), BS) == 1
    # Another block size is not this backend's: the index cannot say.
    assert index.match(B, token_block_hashes(PROMPT, 8), 8) is None
    assert index.cached_blocks(B) == 4


def test_salted_prompts_match_only_their_salt() -> None:
    index = synced_index()
    index.apply(B, batch(0, stored(PROMPT, [1, 2, 3, 4], salt="tenant-a")))
    assert index.match(B, token_block_hashes(PROMPT, BS, salt="tenant-a"), BS) == 4
    assert index.match(B, token_block_hashes(PROMPT, BS, salt="tenant-b"), BS) == 0
    assert index.match(B, CHAIN, BS) == 0


def test_lora_and_multimodal_blocks_never_match_a_plain_prompt() -> None:
    index = synced_index()
    index.apply(B, batch(0, stored(PROMPT[:4], [1], lora_name="adapter")))
    mm = BlockStored((2,), None, tuple(PROMPT[:4]), BS, "GPU", None, ((("img", 0),),))
    index.apply(B, batch(1, mm))
    assert index.match(B, CHAIN, BS) == 0
    assert index.cached_blocks(B) == 2


def test_removed_and_cleared_blocks_stop_matching() -> None:
    index = synced_index()
    index.apply(B, batch(0, stored(PROMPT, [1, 2, 3, 4])))
    index.apply(B, batch(1, BlockRemoved((3,), "GPU")))
    assert index.match(B, CHAIN, BS) == 2  # the leading run stops at the removed block
    index.apply(B, batch(2, AllBlocksCleared()))
    assert index.match(B, CHAIN, BS) == 0
    assert index.cached_blocks(B) == 0
    assert index.stats(B).clears == 1


def test_a_removal_on_another_medium_keeps_the_block() -> None:
    index = synced_index()
    index.apply(B, batch(0, stored(PROMPT[:4], [1])))
    index.apply(B, batch(1, BlockStored((1,), None, tuple(PROMPT[:4]), BS, "CPU")))
    index.apply(B, batch(2, BlockRemoved((1,), "GPU")))
    assert index.match(B, CHAIN, BS) == 1  # still in the CPU tier
    index.apply(B, batch(3, BlockRemoved((1,), "CPU")))
    assert index.match(B, CHAIN, BS) == 0


def test_a_gap_unsyncs_until_a_replay_fills_it_out_of_order_arrivals_included() -> None:
    index = synced_index()
    index.apply(B, batch(0, stored(PROMPT[:4], [1])))
    # Batches 1 and 2 are lost; 3 and 4 arrive live: held, and the backend is unsynced.
    assert index.apply(B, batch(3, stored(PROMPT[12:], [4], parent=3))) is ApplyOutcome.HELD
    assert index.apply(B, batch(4, BlockRemoved((1,), "GPU"))) is ApplyOutcome.HELD
    assert index.match(B, CHAIN, BS) is None
    assert index.replay_from(B) == 1
    assert index.stats(B).gaps == 1
    # The replay brings 1..3 after the later live ones (3 a second time): applied in sequence
    # order, duplicates ignored; the held 4 follows.
    replayed = [stored(PROMPT[4:8], [2], parent=1), stored(PROMPT[8:12], [3], parent=2)]
    assert index.apply(B, batch(1, replayed[0]), replayed=True) is ApplyOutcome.APPLIED
    assert not index.is_synced(B)  # 2 still missing
    assert index.apply(B, batch(2, replayed[1]), replayed=True) is ApplyOutcome.APPLIED
    assert index.is_synced(B)
    assert index.apply(B, batch(3, AllBlocksCleared()), replayed=True) is ApplyOutcome.DUPLICATE
    index.replay_done(B)
    assert index.is_synced(B)
    # Block 1 was removed by batch 4 (applied last): nothing leads, 3 blocks stay cached.
    assert index.match(B, CHAIN, BS) == 0
    assert index.match(B, CHAIN[1:], BS) == 3
    assert index.cached_blocks(B) == 3
    assert index.replay_from(B) == 5


def test_a_replay_that_cannot_reach_back_is_a_hole() -> None:
    index = synced_index()
    index.apply(B, batch(0, stored(PROMPT[:4], [1])))
    index.apply(B, batch(5, stored(PROMPT[4:8], [2], parent=1)))  # 1..4 lost
    index.replay_done(B)  # the replay brought nothing older
    assert index.is_synced(B)
    assert index.stats(B).holes == 1
    # What the missing batches did is unknown: the blocks before the hole were dropped, and
    # the held batch's parent is unknown, so it is not indexed either (under-count only).
    assert index.match(B, CHAIN, BS) == 0
    assert index.stats(B).unresolved_blocks == 1
    assert index.replay_from(B) == 6


def test_joining_late_replays_from_zero_and_a_rolled_buffer_counts_a_hole() -> None:
    index = ExactPrefixIndex()
    # Live batch 7 arrives before any replay: held, unsynced.
    assert index.apply(B, batch(7, stored(PROMPT[:4], [1]))) is ApplyOutcome.HELD
    assert not index.is_synced(B) and index.replay_from(B) == 0
    # The replay buffer starts at 6 (0..5 rolled out).
    index.apply(B, batch(6, stored(PROMPT[4:8], [9], parent=8)), replayed=True)
    index.apply(B, batch(7, stored(PROMPT[:4], [1])), replayed=True)
    index.replay_done(B)
    assert index.is_synced(B)
    assert index.stats(B).holes == 1
    assert index.match(B, CHAIN, BS) == 1


def test_a_restarted_publisher_drops_the_old_cache() -> None:
    index = synced_index()
    for seq in range(3):
        index.apply(B, batch(seq, stored(PROMPT[:4], [seq + 1])))
    assert index.match(B, CHAIN, BS) == 1
    # The backend restarted: its numbering starts over and its cache is empty.
    assert index.apply(B, batch(0, stored(PROMPT[4:8], [5], parent=99))) is ApplyOutcome.RESTARTED
    assert index.stats(B).restarts == 1
    assert index.is_synced(B)
    assert index.match(B, CHAIN, BS) == 0
    # A restart seen late (its first batches missed) needs a replay from 0.
    index.apply(B, batch(1, stored(PROMPT[:4], [1])))
    assert index.apply(B, batch(1, AllBlocksCleared())) is ApplyOutcome.RESTARTED
    assert not index.is_synced(B) and index.replay_from(B) == 0


def test_disconnect_unsyncs_and_the_replay_after_reconnect_resyncs() -> None:
    index = synced_index()
    index.apply(B, batch(0, stored(PROMPT, [1, 2, 3, 4])))
    index.disconnected(B)
    assert index.match(B, CHAIN, BS) is None
    index.apply(B, batch(1, BlockRemoved((4,), "GPU")), replayed=True)
    index.replay_done(B)
    assert index.match(B, CHAIN, BS) == 3


def test_unknown_backends_and_never_replayed_ones_answer_none() -> None:
    index = ExactPrefixIndex()
    assert index.match("nowhere", CHAIN, BS) is None
    index.disconnected(B)
    assert index.match(B, CHAIN, BS) is None
    assert index.block_sizes() == set()


def test_capacity_bounds_blocks_and_memory_is_reported() -> None:
    index = ExactPrefixIndex(capacity_blocks=3)
    index.replay_done(B)
    index.apply(B, batch(0, stored(PROMPT, [1, 2, 3, 4])))
    assert index.cached_blocks(B) == 3
    assert index.stats(B).overflow_blocks == 1
    assert index.match(B, CHAIN, BS) == 3
    with pytest.raises(ConfigError):
        ExactPrefixIndex(capacity_blocks=0)


def test_held_batches_are_bounded() -> None:
    index = ExactPrefixIndex(max_pending=2)
    index.replay_done(B)
    for seq in (2, 3, 4):
        index.apply(B, batch(seq, AllBlocksCleared()))
    assert index.stats(B).dropped_batches == 1
    assert index.replay_from(B) == 0


def test_memory_estimate_is_close_to_what_python_allocates() -> None:
    index = ExactPrefixIndex()
    index.replay_done(B)
    count = 20_000
    tokens = list(range(count * BS))
    events = [stored(tokens, list(range(1, count + 1)))]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index.apply(B, batch(0, *events))
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert index.cached_blocks(B) == count
    estimate = index.memory_bytes()
    assert estimate == count * BYTES_PER_BLOCK
    assert used / 2 <= estimate <= used * 2, (used, estimate)


def test_the_prefix_router_trusts_synced_kv_events_and_falls_back_to_the_estimate() -> None:
    from agentrt_controller.routing import build_router
    from agentrt_controller.routing.scorers import PrefixCostScorer, exact_scorer_of
    from agentrt_controller.scheduling.api import BackendView
    from tests.controller_policies.helpers import make_call

    router = build_router("prefix")
    found = exact_scorer_of(router)
    exact = found.exact if found is not None else None
    assert exact is not None
    tokens = list(range(64))
    chain = token_block_hashes(tokens, BS)

    def call_of(call_id: str, program_id: str) -> CallEntry:
        return make_call(
            program_id,
            call_id=call_id,
            prompt_tokens=64,
            block_hashes=(1, 2, 3, 4),
            token_block_hashes=chain,
            token_block_size=BS,
        )

    call = call_of("c1", "p1")
    backends = [BackendView("a", 0), BackendView("b", 0)]
    # The estimate remembers the prompt on "a" (an earlier call went there) ...
    router.on_finish(make_call("p0", call_id="c0", block_hashes=(1, 2, 3, 4)), "a", 0.0)
    assert router.route(call, backends, 1.0) == "a"
    # ... but the KV events say "a" evicted it and "b" holds it (another client sent it).
    for backend in ("a", "b"):
        exact.replay_done(backend)
    exact.apply("b", batch(0, stored(tokens, list(range(1, 17)))))
    call2 = call_of("c2", "p2")
    assert router.route(call2, backends, 2.0) == "b"
    # Both unsynced ("a" and "b" lost their streams): the estimate decides again — it has
    # the prompt on both now (c1 went to "a", c2 to "b"), and "a" wins the tie by id.
    scorer = router.scorers[0].scorer
    assert isinstance(scorer, PrefixCostScorer)
    before = dict(scorer.lookups)
    exact.disconnected("a")
    exact.disconnected("b")
    call3 = call_of("c3", "p3")
    assert router.route(call3, backends, 3.0) == "a"
    assert scorer.lookups["estimate"] - before["estimate"] == 2
    assert scorer.lookups["exact"] == before["exact"]
