"""The run tree under the prefix index and the memory ledger: a split keeps the payload and the
children, an append stops where a sequence stops being a chain, and the bisection finds the
held prefix in either order of lookups."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from agentrt_controller.routing.chain_counts import ChainCounts
from agentrt_controller.routing.chain_runs import Run, RunTree, held_at

pytestmark = pytest.mark.timeout(30)


class LabelledRun(Run):
    """A run whose payload is a label (what a split's head must copy)."""

    __slots__ = ("label",)

    def __init__(
        self, elements: list[int], start: int, label: str, parent: LabelledRun | None
    ) -> None:
        super().__init__(elements, start, parent)
        self.label = label

    def copy_head(self, cut: int) -> LabelledRun:
        return LabelledRun(self.elements[:cut], self.start, self.label, self.parent)


def _tree(*chains: tuple[str, list[int]]) -> tuple[RunTree[LabelledRun], list[LabelledRun]]:
    """A tree with one run per chain, each under the run before it."""
    tree: RunTree[LabelledRun] = RunTree()
    runs: list[LabelledRun] = []
    start = 0
    for label, elements in chains:
        run = LabelledRun([], start, label, runs[-1] if runs else None)
        assert tree.append(run, elements) == len(elements)
        tree.attach(run)
        runs.append(run)
        start += len(elements)
    return tree, runs


def test_a_split_head_takes_the_payload_and_the_rest_keeps_its_children() -> None:
    tree, (root, middle, leaf) = _tree(("a", [1, 2]), ("b", [3, 4, 5, 6]), ("c", [7]))
    assert tree.written_total == 7
    head = tree.end_at([1, 2, 3, 4, 5, 6, 7], 4)  # inside "b": after element 4
    assert head is not middle and head.label == "b"
    assert (head.elements, head.start, head.parent) == ([3, 4], 2, root)
    assert (middle.elements, middle.start, middle.parent) == ([5, 6], 4, head)
    assert root.children == {head} and head.children == {middle} and middle.children == {leaf}
    assert tree.run_of[3] is head and tree.run_of[5] is middle
    assert tree.written_total == 7 + 2  # the head's elements, moved
    assert tree.end_at([1, 2, 3, 4], 4) is head  # a run's end: no second split
    assert tree.end_at([1, 2], 2) is root
    assert tree.written_total == 9


def test_an_append_stops_where_the_sequence_stops_being_a_chain() -> None:
    tree, (root,) = _tree(("a", [1, 2, 3]))
    branch = LabelledRun([], 1, "b", root)
    assert tree.append(branch, [8, 9, 2, 10]) == 2  # 2 is held at another position
    assert branch.elements == [8, 9] and 10 not in tree.run_of
    again = LabelledRun([], 3, "c", root)
    assert tree.append(again, [11, 12, 11]) == 2  # a repeat within the sequence
    assert tree.written_total == 3 + 2 + 2
    tree.attach(again)
    tree.drop(again)
    assert 11 not in tree.run_of and root.children == set()


@pytest.mark.parametrize("last_first", [False, True])
def test_the_leading_held_part_by_bisection(last_first: bool) -> None:
    tree, _ = _tree(("a", [1, 2, 3]), ("b", [4, 5]))
    lead = tree.leading
    assert lead([1, 2, 3, 4, 5], last_first=last_first) == 5
    assert lead([1, 2, 3, 4, 5, 6], last_first=last_first) == 5
    assert lead([1, 2, 9], last_first=last_first) == 2
    assert lead([4, 5], last_first=last_first) == 0  # held, but not at the head
    assert lead([], last_first=last_first) == 0

    def in_a(run_of: Mapping[int, LabelledRun], chain: Sequence[int], position: int) -> bool:
        return run_of[chain[position]].label == "a" and held_at(run_of, chain, position)

    assert lead([1, 2, 3, 4], last_first, in_a) == 3


def test_an_element_held_elsewhere_leaves_the_counts_as_they_were_before_per_element() -> None:
    counts = ChainCounts()
    counts.add((1, 2, 3))
    written = counts.written_total
    counts.add((4, 5, 2))  # 2 is held at another position: not a chain
    assert not counts.per_run
    assert counts.written_total == written  # the attempt on the runs was undone
    assert dict(counts) == {1: 1, 2: 2, 3: 1, 4: 1, 5: 1}
