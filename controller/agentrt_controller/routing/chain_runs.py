"""A tree of *runs* of hash-chain elements: what the prefix index and the memory ledger keep
per backend, so that a call which repeats its program's history costs its new elements.

Both structures hold elements of chains (:mod:`.hashing`) with something per element — the
prefix index its last use and place in the least-recently-used order
(:mod:`.prefix_index_runs`), the memory ledger how many resident chains hold it
(:mod:`.chain_counts`) — that is the same along long stretches of a chain: an agent's next
prompt repeats its last one and adds a few blocks. Kept per element, each arrival of a
128 K-token prompt would write 8,192 entries. Here the elements form a tree of **runs**: a run
is consecutive elements of one chain that share that something (a *payload*); its parent
holds the elements before its first. What the tree does is the same for both:

* :meth:`RunTree.leading` finds, by bisection, how many leading elements of a chain are held
  where the chain puts them (held elements form a prefix of any chain: an element determines
  its prefix);
* :meth:`RunTree.split` cuts a run where two chains part: its head becomes a run of its own,
  the parent of the rest, with the same payload (paid once per point where chains part, not
  per call); :meth:`RunTree.end_at` splits at a chain position when a run goes on past it;
* :meth:`RunTree.append` writes new elements into a run, stopping at the first one held
  already (a sequence that is not a chain);
* :meth:`RunTree.attach` and :meth:`RunTree.drop` link a run under its parent and take one
  out.

The payload, and how the path from a run up to its chain's head is walked (a touch per run, a
count per run), is the user's: a subclass of :class:`Run` adds the payload's slots and
:meth:`Run.copy_head` copies it; a subclass of :class:`RunTree` may extend :meth:`RunTree.split`
to place the new head in its own order. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Generic, Self, TypeVar

__all__ = ["Run", "RunTree", "held_at"]


class Run:
    """Consecutive elements of one chain; a subclass adds what they share (its payload)."""

    __slots__ = ("children", "elements", "parent", "start")

    def __init__(self, elements: list[int], start: int, parent: Self | None) -> None:
        #: The elements, in chain order.
        self.elements = elements
        #: The chain position (0-based) of ``elements[0]``.
        self.start = start
        #: The run holding the elements before ``elements[0]``; ``None`` at a chain's head.
        self.parent = parent
        #: The runs whose parent this is.
        self.children: set[Self] = set()

    def copy_head(self, cut: int) -> Self:
        """A new run of ``elements[:cut]`` at this run's start, under its parent, with its
        payload; not linked anywhere (:meth:`RunTree.split` does that)."""
        raise NotImplementedError


R = TypeVar("R", bound=Run)


def held_at(run_of: Mapping[int, Run], chain: Sequence[int], position: int) -> bool:
    """Whether ``chain[position]`` is held at chain position ``position``."""
    h = chain[position]
    run = run_of.get(h)
    if run is None:
        return False
    offset = position - run.start
    return 0 <= offset < len(run.elements) and run.elements[offset] == h


class RunTree(Generic[R]):
    """Element -> the run holding it, and the runs' tree. ``written_total`` counts element
    entries written (new elements, and a split run's head): what keeping them costs."""

    __slots__ = ("run_of", "written_total")

    def __init__(self) -> None:
        #: Element -> the run holding it.
        self.run_of: dict[int, R] = {}
        #: Element entries written: appended elements, and those moved to a run of their own
        #: when a run is split (tests read it).
        self.written_total = 0

    def leading(
        self,
        chain: Sequence[int],
        last_first: bool = False,
        held: Callable[[dict[int, R], Sequence[int], int], bool] = held_at,
    ) -> int:
        """How many leading elements of ``chain`` are held where the chain puts them: a
        bisection, each step asking ``held(run_of, chain, position)`` (:func:`held_at`, or a
        stricter test that holds of a run's parent when it holds of the run). ``last_first``
        tries the whole chain first (one lookup when a call's finish or a retry records a
        chain held whole). On a sequence that is not a chain the answer depends on the
        lookups made; the two orders are kept apart so that each user's answers stay as they
        were."""
        run_of = self.run_of
        length = len(chain)
        if not length or not held(run_of, chain, 0):
            return 0
        high = length  # chain[:low] held; chain[high:] not (or unknown)
        if last_first:
            if held(run_of, chain, length - 1):
                return length
            high = length - 1
        low = 1
        while low < high:
            middle = (low + high + 1) // 2
            if held(run_of, chain, middle - 1):
                low = middle
            else:
                high = middle - 1
        return low

    def end_at(self, chain: Sequence[int], length: int) -> R:
        """The run ending at ``chain[length - 1]`` (held there: ``length`` >= 1, at most
        :meth:`leading`), split after it if the run goes on."""
        run = self.run_of[chain[length - 1]]
        cut = length - run.start
        return run if cut == len(run.elements) else self.split(run, cut)

    def split(self, run: R, cut: int) -> R:
        """Make ``run.elements[:cut]`` (0 < ``cut`` < its length) a run of its own with the
        same payload, the parent of the rest; returns it. The rest stays ``run`` (its
        children stay attached to it)."""
        head = run.copy_head(cut)
        del run.elements[:cut]
        run.start += cut
        parent = run.parent
        if parent is not None:
            parent.children.discard(run)
            parent.children.add(head)
        run.parent = head
        head.children.add(run)
        run_of = self.run_of
        for h in head.elements:
            run_of[h] = head
        self.written_total += cut
        return head

    def append(self, run: R, elements: Sequence[int]) -> int:
        """Append ``elements`` to ``run`` up to the first one held already (here, or earlier
        in ``elements``: a sequence that is not a chain); returns how many were appended."""
        run_of = self.run_of
        held = run.elements
        before = len(held)
        for h in elements:
            if h in run_of:
                break
            run_of[h] = run
            held.append(h)
        added = len(held) - before
        self.written_total += added
        return added

    def attach(self, run: R) -> None:
        """Link a new run under its parent."""
        if run.parent is not None:
            run.parent.children.add(run)

    def drop(self, run: R) -> None:
        """Forget ``run``'s elements and take it off its parent (a leaf: its children are
        gone first)."""
        run_of = self.run_of
        for h in run.elements:
            del run_of[h]
        if run.parent is not None:
            run.parent.children.discard(run)
