"""The prefix index records chains a run at a time: an insert writes the elements a backend
lacks (and, once per point where chains part, the head of a split run), never the whole chain
again — and holds exactly what touching every element one by one would hold, with the same
last use, under the TTL and the least-recently-used cap."""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import pytest

from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.prefix_index import PrefixIndex
from tests.routing.per_element_counts import PerElementCounts

pytestmark = pytest.mark.timeout(60)


class PerElementIndex:
    """The index as it was: one last-use time and one LRU place per element, every element
    of a chain touched on every insert (tail first, head last)."""

    def __init__(self, ttl_s: float, capacity_blocks: int | None) -> None:
        self.ttl_s = ttl_s
        self.capacity_blocks = capacity_blocks
        self.blocks: dict[str, OrderedDict[int, float]] = {}

    def insert(self, backend_id: str, hashes: Sequence[int], now_s: float) -> None:
        if not hashes:
            return
        blocks = self.blocks.setdefault(backend_id, OrderedDict())
        for h in reversed(hashes):
            blocks[h] = now_s
            blocks.move_to_end(h)
        if self.capacity_blocks is not None:
            while len(blocks) > self.capacity_blocks:
                blocks.popitem(last=False)
        oldest = now_s - self.ttl_s
        while blocks and next(iter(blocks.values())) < oldest:
            blocks.popitem(last=False)

    def match(self, backend_id: str, hashes: Sequence[int], now_s: float) -> int:
        blocks = self.blocks.get(backend_id, {})
        count = 0
        for h in hashes:
            seen = blocks.get(h)
            if seen is None or seen < now_s - self.ttl_s:
                break
            count += 1
        return count


def _fresh(elements: Mapping[int, float], now_s: float, ttl_s: float) -> dict[int, float]:
    return {h: seen for h, seen in elements.items() if seen >= now_s - ttl_s}


def _chain(
    rng: random.Random, chains: list[tuple[int, ...]], roots: list[list[int]]
) -> tuple[int, ...]:
    """A new chain: a prefix of an earlier one (or of a shared root), extended — or an
    earlier one again, as a call's finish records it."""
    if chains and rng.random() < 0.2:
        return rng.choice(chains)
    base = list(rng.choice(chains)) if chains and rng.random() < 0.7 else rng.choice(roots)
    cut = len(base) if rng.random() < 0.5 else rng.randint(1, len(base))
    return tuple(base[:cut] + [rng.getrandbits(62) for _ in range(rng.randint(0, 6))])


@pytest.mark.parametrize("seed", range(8))
def test_runs_hold_what_touching_every_element_holds(seed: int) -> None:
    rng = random.Random(seed)
    capacity = rng.choice([None, 25, 60, 200])
    ttl_s = rng.choice([5.0, 30.0, math.inf])
    index = PrefixIndex(ttl_s=ttl_s, capacity_blocks=capacity)
    reference = PerElementIndex(ttl_s, capacity)
    if seed % 2:
        index.purge_stale(0.0)  # keep the holders from the start too
    backends = ["b0", "b1", "b2"]
    roots = [[rng.getrandbits(62) for _ in range(rng.randint(1, 30))] for _ in range(3)]
    chains: list[tuple[int, ...]] = []
    now = 0.0
    for _ in range(400):
        now += rng.choice([0.0, 0.0, 0.5, 2.0])
        chain = _chain(rng, chains, roots)
        chains.append(chain)
        backend = rng.choice(backends)
        index.insert(backend, chain, now)
        reference.insert(backend, chain, now)
        for b in backends:
            assert _fresh(index.elements(b), now, ttl_s) == _fresh(
                reference.blocks.get(b, {}), now, ttl_s
            )
            if not seed % 2:  # (purge_stale drops stale elements the reference keeps a while)
                assert index.size(b) == len(reference.blocks.get(b, {}))
        for probe in rng.sample(chains, min(8, len(chains))):
            for b in backends:
                assert index.match(b, probe, now) == reference.match(b, probe, now)
        if seed % 2:
            index.purge_stale(now)
            for h in chain:
                holding = {b for b in backends if reference.match(b, (h,), now) == 1}
                assert set(index.holders(h)) == holding


def test_a_chain_extended_by_one_block_writes_one_element() -> None:
    index = PrefixIndex()
    history = tuple(range(1, 8193))  # a 128 K-token prompt: 8,192 blocks
    index.insert("b0", history, 0.0)
    assert index.written_total == 8192
    index.insert("b0", history, 1.0)  # the same chain again (a call's finish)
    assert index.written_total == 8192
    extended = (*history, 9000)
    index.insert("b0", extended, 2.0)  # the next turn: one new block
    index.insert("b0", extended, 3.0)
    assert index.written_total == 8193
    assert index.match("b0", extended, 3.0) == 8193


def test_chains_that_part_split_a_run_once() -> None:
    """Calls that repeat a history and each add a different last block: the first to part
    splits the recorded run (its head is written once more), the others write one each."""
    index = PrefixIndex(capacity_blocks=10_000)
    history = tuple(range(1, 1001))
    index.insert("b0", (*history, 5000), 0.0)
    assert index.written_total == 1001
    index.insert("b0", (*history, 5001), 1.0)
    assert index.written_total == 1001 + 1000 + 1  # the split head, the new block
    for step in range(2, 50):
        index.insert("b0", (*history, 5000 + step), float(step))
    assert index.written_total == 1001 + 1001 + 48
    assert index.match("b0", (*history, 5049), 50.0) == 1001
    assert index.match("b0", (*history, 5000), 50.0) == 1001  # held, least recently used


def test_a_sequence_that_is_not_a_chain_is_recorded_up_to_its_repeat() -> None:
    index = PrefixIndex()
    index.insert("b0", [1, 2, 3], 0.0)
    index.insert("b0", [4, 2, 5], 1.0)  # 2 is held at another place: recorded up to it
    assert index.match("b0", [4], 1.0) == 1
    assert index.match("b0", [1, 2, 3], 1.0) == 3
    index.insert("b0", [6, 7, 6, 8], 2.0)  # a repeat within the sequence
    assert index.match("b0", [6, 7], 2.0) == 2
    assert index.size("b0") == 6


# -- the program counts (PrefixIndex.shared_prefix) -----------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_program_counts_in_runs_share_what_per_element_counts_share(seed: int) -> None:
    """Programs with shared system prompts and histories of their own, calling again (their
    history extended), forking (a prefix of another's), and one-call programs: every probe
    finds the same shared head at every threshold as counting each element."""
    rng = random.Random(seed)
    shared_programs = rng.choice([2, 3, 5])
    index = PrefixIndex(shared_programs=shared_programs)
    reference = PerElementCounts()
    roots = [[rng.getrandbits(62) for _ in range(rng.randint(1, 40))] for _ in range(3)]
    chains: list[tuple[int, ...]] = []
    histories: dict[str, tuple[int, ...]] = {}
    sharing = 0  # probes with a shared head
    for step in range(500):
        name = f"p{rng.randrange(12)}" if rng.random() < 0.8 else f"once{step}"
        last = histories.get(name)
        if last is not None and rng.random() < 0.7:  # its next call: its history extended
            chain = last + tuple(rng.getrandbits(62) for _ in range(rng.randint(0, 5)))
        else:
            chain = _chain(rng, chains, roots)
        histories[name] = chain
        chains.append(chain)
        program = ProgramKey.untagged(name)
        index.note_program(program, chain)
        reference.note(program, chain)
        for probe in [chain, *rng.sample(chains, min(6, len(chains)))]:
            expected = reference.shared(probe, shared_programs)
            assert index.shared_prefix(probe) == expected
            sharing += expected > 0
            for programs in (2, 4):
                assert index._programs.shared(probe, programs) == reference.shared(probe, programs)
    assert sharing > 500  # most probes: the test compares shared heads, not only zeros


def test_counting_a_programs_next_call_writes_its_new_elements() -> None:
    """A 512-block head (an 8 K-token system prompt) three programs share, each then calling
    again with one block more: each call writes what is new, not its head again."""
    index = PrefixIndex(shared_programs=3)
    system = tuple(range(1, 501))
    counts = index._programs
    for turn in range(4):
        for p in range(3):
            history = (*system, *(10_000 * (p + 1) + t for t in range(turn + 1)))
            index.note_program(ProgramKey.untagged(f"p{p}"), history)
    # 500 + 3 programs' first blocks, 3 × 3 later blocks; the system prompt's run was split
    # once per program parting from it (its head written again, once).
    assert counts.written_total <= 500 + 3 + 9 + 500
    assert len(counts) == 500 + 3 * 4
    assert index.shared_prefix((*system, 10_001)) == 500  # the system prompt, not p0's own
    assert counts.shared((*system, 10_000, 10_001), 1) == 502
    assert index.shared_prefix((*system, 12)) == 500


def test_program_counts_forget_the_least_recently_noted_tail_first() -> None:
    """Over its capacity the counts forget from the tail of the least recently noted chain, so
    what is held of any chain stays a prefix of it and the shared head outlives the histories."""
    index = PrefixIndex(shared_programs=2, popularity_capacity=40)
    system = tuple(range(1, 21))
    for p in range(6):
        own = tuple(1000 * (p + 1) + t for t in range(10))
        index.note_program(ProgramKey.untagged(f"p{p}"), (*system, *own))
        assert len(index._programs) <= 40
        assert index.shared_prefix(system) == (20 if p else 0)  # from the second program on
    first = (*system, *(1000 + t for t in range(10)))
    held = index._programs.leading(first)
    assert held == 20  # p0's own blocks went first, its system prompt stayed
