"""Chain counts kept per run (the memory ledger's shared prefixes) equal per-element counts,
and a program that repeats the history of the one before it writes only its new elements."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from agentrt_controller.routing.chain_counts import ChainCounts
from agentrt_controller.routing.hashing import leading_matches

pytestmark = pytest.mark.timeout(60)


class PerElementCounts:
    """The ledger's counts as they were: one entry per element."""

    def __init__(self) -> None:
        self.refs: dict[int, int] = {}

    def add(self, chain: Sequence[int], counted: int = 0) -> int:
        shared = 0
        for h in chain[counted:]:
            held = self.refs.get(h, 0)
            self.refs[h] = held + 1
            shared += held > 0
        return shared

    def remove(self, chain: Sequence[int]) -> int:
        still = 0
        for h in chain:
            held = self.refs.get(h, 0)
            if held <= 1:
                self.refs.pop(h, None)
            else:
                self.refs[h] = held - 1
                still += 1
        return still


@pytest.mark.parametrize("seed", range(8))
def test_counts_per_run_equal_counts_per_element(seed: int) -> None:
    rng = random.Random(seed)
    counts = ChainCounts(idle_elements=rng.choice([0, 20, 200, 65_536]))
    reference = PerElementCounts()
    roots = [[rng.getrandbits(62) for _ in range(rng.randint(1, 25))] for _ in range(3)]
    seen: list[tuple[int, ...]] = []
    residents: dict[int, tuple[int, ...]] = {}
    for step in range(600):
        action = rng.random()
        if residents and action < 0.3:  # a resident ends
            key = rng.choice(list(residents))
            chain = residents.pop(key)
            assert counts.remove(chain) == reference.remove(chain)
        elif residents and action < 0.6:  # a resident's next turn extends its chain
            key = rng.choice(list(residents))
            old = residents[key]
            chain = old + tuple(rng.getrandbits(62) for _ in range(rng.randint(1, 5)))
            residents[key] = chain
            seen.append(chain)
            assert counts.add(chain, len(old)) == reference.add(chain, len(old))
        else:  # a new resident, often on an earlier chain's prefix
            base = list(rng.choice(seen)) if seen and rng.random() < 0.7 else rng.choice(roots)
            cut = rng.randint(1, len(base))
            chain = tuple(base[:cut] + [rng.getrandbits(62) for _ in range(rng.randint(0, 4))])
            residents[step] = chain
            seen.append(chain)
            assert counts.add(chain) == reference.add(chain)
        assert dict(counts) == reference.refs
        for probe in rng.sample(seen, min(6, len(seen))):
            assert counts.leading(probe) == leading_matches(probe, reference.refs)
    assert counts.per_run  # every sequence was a chain


def test_programs_repeating_a_history_write_their_new_blocks_only() -> None:
    """Untagged calls through the controller: each a program of its own, with the same
    128 K-token history and a new last block, resident from admission to its end."""
    counts = ChainCounts()
    history = tuple(range(1, 8193))
    for call in range(100):
        chain = (*history, 100_000 + call)
        counts.add(chain)
        assert counts.leading(chain) == 8193
        assert counts.remove(chain) == 0
    # the first call's 8,193, its history split off once (8,192), then one block a call
    assert counts.written_total == 8193 + 8192 + 99
    assert dict(counts) == {}
    assert counts.per_run


def test_a_sequence_that_is_not_a_chain_switches_to_counting_elements() -> None:
    counts = ChainCounts()
    reference = PerElementCounts()
    for chain in ((1, 2, 3), (4, 2, 5), (6, 6), (1, 2, 3)):
        assert counts.add(chain) == reference.add(chain)
    assert counts.remove((4, 2, 5)) == reference.remove((4, 2, 5))
    assert dict(counts) == reference.refs
    assert counts.leading((1, 2, 3, 9)) == 3
    assert not counts.per_run
