"""What one backend holds in the prefix index: chain elements in *runs*, touched a run at a time.

A chain is recorded from its head, every element with the same time and the head touched
last (:mod:`agentrt_controller.routing.prefix_index`). Kept per element, that costs a write
per element of the chain on every insert — at a 128 K-token prompt 8,192 writes, twice per
call, although an agent's next prompt repeats its last one and adds a few blocks. Here the
elements a backend holds form a tree of runs (:mod:`.chain_runs`, the tree the memory ledger's
counts use too) whose payload is a last-use time and a place in the least-recently-used
order: a run is consecutive elements of one chain that were always touched together.
Recording a chain then costs its *new* elements plus one touch per run on its path:

* the leading part of the chain the backend holds is found by bisection (present elements
  form a prefix of any chain: below);
* if that part ends inside a run, the run is split there (its head becomes a run of its own:
  paid once per point where two chains part, not per call);
* the new elements become one run under it, or extend it when it ends a path (the usual next
  turn: the new blocks continue the last call's chain);
* the path is touched from its deepest run up, so a parent is always more recent than its
  children, in time and in the order.

Eviction takes elements from the tail of the least recently used run, which never has
children (they are older), so a prefix outlives its extensions and what is held of any chain
stays a prefix of it — exactly the per-element least-recently-used order: the same elements
are held, with the same last use, as if each had been touched one by one.

The index's program counts (:meth:`~.prefix_index.PrefixIndex.shared_prefix`) are kept the
same way (:class:`ProgramCounts`): a run's payload is how many programs used its elements and
the last of them, so noting a call's head costs its new elements and a touch per run, not a
lookup per element.

Elements are assumed to determine their prefix (hash chains: :mod:`.hashing`). A sequence
that is not one (an element it repeats, or holds at another position than the backend does)
is recorded up to that element; the structure stays sound, its matches approximate.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Generic, TypeVar

from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.chain_runs import Run, RunTree

__all__ = ["BackendChains", "CountedRun", "LruRun", "LruRuns", "ProgramCounts", "StampedRun"]


class LruRun(Run):
    """A run with its place in a least-recently-used ring (:class:`LruRuns`)."""

    __slots__ = ("newer", "older")

    def __init__(self, elements: list[int], start: int, parent: LruRun | None) -> None:
        super().__init__(elements, start, parent)
        #: Neighbours in the least-recently-used ring (the tree's sentinel closes it).
        self.older: LruRun = self
        self.newer: LruRun = self


L = TypeVar("L", bound=LruRun)
#: What a recording touches a chain's runs with (a time, a program).
M = TypeVar("M")


class LruRuns(RunTree[L], Generic[L, M]):
    """A run tree whose runs are kept least recently used first, in a ring through a
    sentinel. Recording a chain (:meth:`_hold`) touches its path from the deepest run up,
    so a parent is always more recent than its children, and eviction (:meth:`evict_to`)
    takes the tail of the least recently used run, which has none: what is held of any chain
    stays a prefix of it. A subclass says what a touch does to a run's payload."""

    __slots__ = ("_ring",)

    def __init__(self, sentinel: L) -> None:
        super().__init__()
        self._ring = sentinel

    def __len__(self) -> int:
        return len(self.run_of)

    def _fresh(self, start: int, parent: L | None, mark: M) -> L:
        """A new run for elements from chain position ``start`` on, as a touch by ``mark``
        leaves a new element."""
        raise NotImplementedError

    def _continues(self, tip: L, mark: M) -> bool:
        """Whether new elements may join ``tip`` (a leaf the chain ends in) when ``mark``
        touches it: a touch leaves them the payload it leaves ``tip``."""
        raise NotImplementedError

    def _touch(self, run: L, mark: M) -> None:
        """Update ``run``'s payload for a touch by ``mark``."""
        raise NotImplementedError

    def _hold(self, hashes: Sequence[int], mark: M) -> Sequence[int]:
        """Touch ``hashes`` by ``mark`` (head last), adding what is new; returns the elements
        added."""
        held = self.leading(hashes, True)  # the whole chain first
        tip = self.end_at(hashes, held) if held else None
        added: Sequence[int] = ()
        if held < len(hashes):
            extend = tip is not None and not tip.children and self._continues(tip, mark)
            run = tip if extend else self._fresh(held, tip, mark)
            assert run is not None
            before = len(run.elements)
            self.append(run, hashes[held:])  # up to an element held already: not a chain
            added = run.elements[before:]
            if added and not extend:
                self.attach(run)
                self._link_newest(run)
                tip = run
        while tip is not None:  # deepest first: the head ends most recent
            self._touch(tip, mark)
            self._unlink(tip)
            self._link_newest(tip)
            tip = tip.parent
        return added

    def evict_to(self, capacity: int) -> list[int]:
        """Drop least recently used elements (a run's tail first) until at most ``capacity``
        are held; returns them."""
        dropped: list[int] = []
        ring, run_of = self._ring, self.run_of
        while len(run_of) > capacity:
            run: L = ring.newer  # type: ignore[assignment]  # the ring links runs of this tree
            over = len(run_of) - capacity
            if over < len(run.elements):
                gone = run.elements[-over:]
                for h in gone:
                    del run_of[h]
                dropped.extend(reversed(gone))
                del run.elements[-over:]
            else:
                dropped.extend(reversed(run.elements))
                self._unlink(run)
                self.drop(run)
        return dropped

    def split(self, run: L, cut: int) -> L:
        """:meth:`RunTree.split`; the rest keeps ``run``'s place in the order, the head goes
        just after it (a parent is more recent than its children)."""
        head = super().split(run, cut)
        head.older, head.newer = run, run.newer
        run.newer.older = head
        run.newer = head
        return head

    def _unlink(self, run: LruRun) -> None:
        run.older.newer = run.newer
        run.newer.older = run.older
        run.older = run.newer = run

    def _link_newest(self, run: LruRun) -> None:
        ring = self._ring
        run.older, run.newer = ring.older, ring
        ring.older.newer = run
        ring.older = run


class StampedRun(LruRun):
    """A run whose elements were last used at :attr:`last_s`."""

    __slots__ = ("last_s",)

    def __init__(
        self, elements: list[int], start: int, last_s: float, parent: StampedRun | None
    ) -> None:
        super().__init__(elements, start, parent)
        #: Last use of every element here (seconds, the index's clock).
        self.last_s = last_s

    def copy_head(self, cut: int) -> StampedRun:
        return StampedRun(self.elements[:cut], self.start, self.last_s, self.parent)


class BackendChains(LruRuns[StampedRun, float]):
    """The runs one backend holds: element -> its run (:attr:`run_of`), and the runs least
    recently used first. ``now_s`` never goes backwards."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(StampedRun([], 0, float("-inf"), None))

    def oldest_s(self) -> float | None:
        """Last use of the least recently used element; ``None`` when nothing is held."""
        oldest: StampedRun = self._ring.newer  # type: ignore[assignment]  # runs of this tree
        return None if oldest is self._ring else oldest.last_s

    def held_run(self, hashes: Sequence[int]) -> int:
        """How many leading elements of ``hashes`` are held where the chain puts them
        (bisection: held elements form a prefix of any chain)."""
        return self.leading(hashes, True)

    def record(self, hashes: Sequence[int], now_s: float) -> Sequence[int]:
        """Touch ``hashes`` at ``now_s`` (head last), adding what is new; returns the elements
        added. Call :meth:`expire` first: a stale element would be touched back to life."""
        return self._hold(hashes, now_s)

    def _fresh(self, start: int, parent: StampedRun | None, mark: float) -> StampedRun:
        return StampedRun([], start, mark, parent)

    def _continues(self, tip: StampedRun, mark: float) -> bool:
        return True  # a touch leaves every element of the path the same time

    def _touch(self, run: StampedRun, mark: float) -> None:
        run.last_s = mark

    def expire(self, oldest_s: float) -> list[int]:
        """Drop every element last used before ``oldest_s``; returns them."""
        dropped: list[int] = []
        ring = self._ring
        while (run := ring.newer) is not ring and run.last_s < oldest_s:  # type: ignore[attr-defined]
            dropped.extend(run.elements)
            self._unlink(run)
            self.drop(run)  # type: ignore[arg-type]  # the ring links runs of this tree
        return dropped

    def stamps(self) -> Mapping[int, float]:
        """Element -> last use, read-only, live."""
        return _Stamps(self.run_of)


class CountedRun(LruRun):
    """A run whose elements :attr:`count` programs used (a change of program counts), the
    last of them :attr:`last`."""

    __slots__ = ("count", "last")

    def __init__(
        self,
        elements: list[int],
        start: int,
        parent: CountedRun | None,
        count: int,
        last: ProgramKey | None,
    ) -> None:
        super().__init__(elements, start, parent)
        self.count = count
        self.last = last

    def copy_head(self, cut: int) -> CountedRun:
        return CountedRun(self.elements[:cut], self.start, self.parent, self.count, self.last)


class ProgramCounts(LruRuns[CountedRun, ProgramKey]):
    """How many programs used each element of the chains noted (approximately: each change
    of program counts, so one program calling again and again counts once), per run; at
    most ``capacity`` elements, the least recently noted forgotten first (a run's tail: a
    prefix outlives its extensions).

    Every program noting an element notes its whole prefix too, so counts never grow along
    a chain: the elements used by at least ``n`` programs are a leading run of it
    (:meth:`shared`), the same as counted one element at a time."""

    __slots__ = ("capacity",)

    def __init__(self, capacity: int) -> None:
        super().__init__(CountedRun([], 0, None, 0, None))
        self.capacity = capacity

    def note(self, program: ProgramKey, hashes: Sequence[int]) -> None:
        """``program`` used the chain ``hashes``."""
        self._hold(hashes, program)
        if len(self.run_of) > self.capacity:
            self.evict_to(self.capacity)

    def shared(self, hashes: Sequence[int], programs: int) -> int:
        """How many leading elements of ``hashes`` at least ``programs`` programs used."""
        held = self.leading(hashes)
        if not held:
            return 0
        run: CountedRun | None = self.run_of[hashes[held - 1]]
        while run is not None and run.count < programs:  # counts grow toward the head
            run = run.parent
        return 0 if run is None else min(held, run.start + len(run.elements))

    def _fresh(self, start: int, parent: CountedRun | None, mark: ProgramKey) -> CountedRun:
        return CountedRun([], start, parent, 1, mark)

    def _continues(self, tip: CountedRun, mark: ProgramKey) -> bool:
        # The program's own last elements (the usual next turn): new ones count it alone.
        return tip.count == 1 and tip.last == mark

    def _touch(self, run: CountedRun, mark: ProgramKey) -> None:
        if run.last != mark:
            run.count += 1
            run.last = mark


class _Stamps(Mapping[int, float]):
    """Element -> last use (seconds), over a backend's runs."""

    __slots__ = ("_run_of",)

    def __init__(self, run_of: dict[int, StampedRun]) -> None:
        self._run_of = run_of

    def __getitem__(self, h: int) -> float:
        return self._run_of[h].last_s

    def __iter__(self) -> Iterator[int]:
        return iter(self._run_of)

    def __len__(self) -> int:
        return len(self._run_of)
