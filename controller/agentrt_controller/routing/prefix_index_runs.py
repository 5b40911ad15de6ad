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

Elements are assumed to determine their prefix (hash chains: :mod:`.hashing`). A sequence
that is not one (an element it repeats, or holds at another position than the backend does)
is recorded up to that element; the structure stays sound, its matches approximate.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from agentrt_controller.routing.chain_runs import Run, RunTree

__all__ = ["BackendChains", "StampedRun"]


class StampedRun(Run):
    """A run whose elements were last used at :attr:`last_s`, with its place in the
    least-recently-used ring; evicted tail first."""

    __slots__ = ("last_s", "newer", "older")

    def __init__(
        self, elements: list[int], start: int, last_s: float, parent: StampedRun | None
    ) -> None:
        super().__init__(elements, start, parent)
        #: Last use of every element here (seconds, the index's clock).
        self.last_s = last_s
        #: Neighbours in the least-recently-used ring (the backend's sentinel closes it).
        self.older: StampedRun = self
        self.newer: StampedRun = self

    def copy_head(self, cut: int) -> StampedRun:
        return StampedRun(self.elements[:cut], self.start, self.last_s, self.parent)


class BackendChains(RunTree[StampedRun]):
    """The runs one backend holds: element -> its run (:attr:`run_of`), and the runs least
    recently used first (a ring through a sentinel). ``now_s`` never goes backwards."""

    __slots__ = ("_ring",)

    def __init__(self) -> None:
        super().__init__()
        self._ring = StampedRun([], 0, float("-inf"), None)

    def __len__(self) -> int:
        return len(self.run_of)

    def oldest_s(self) -> float | None:
        """Last use of the least recently used element; ``None`` when nothing is held."""
        oldest = self._ring.newer
        return None if oldest is self._ring else oldest.last_s

    def held_run(self, hashes: Sequence[int]) -> int:
        """How many leading elements of ``hashes`` are held where the chain puts them
        (bisection: held elements form a prefix of any chain)."""
        return self.leading(hashes, True)

    def record(self, hashes: Sequence[int], now_s: float) -> Sequence[int]:
        """Touch ``hashes`` at ``now_s`` (head last), adding what is new; returns the elements
        added. Call :meth:`expire` first: a stale element would be touched back to life."""
        held = self.leading(hashes, True)  # the whole chain first
        tip = self.end_at(hashes, held) if held else None
        added: Sequence[int] = ()
        if held < len(hashes):
            extend = tip is not None and not tip.children
            run = tip if extend else StampedRun([], held, now_s, tip)
            assert run is not None
            before = len(run.elements)
            self.append(run, hashes[held:])  # up to an element held already: not a chain
            added = run.elements[before:]
            if added and not extend:
                self.attach(run)
                self._link_newest(run)
                tip = run
        while tip is not None:  # deepest first: the head ends most recent
            tip.last_s = now_s
            self._unlink(tip)
            self._link_newest(tip)
            tip = tip.parent
        return added

    def expire(self, oldest_s: float) -> list[int]:
        """Drop every element last used before ``oldest_s``; returns them."""
        dropped: list[int] = []
        ring = self._ring
        while (run := ring.newer) is not ring and run.last_s < oldest_s:
            dropped.extend(run.elements)
            self._unlink(run)
            self.drop(run)
        return dropped

    def evict_to(self, capacity: int) -> list[int]:
        """Drop least recently used elements (a run's tail first) until at most ``capacity``
        are held; returns them."""
        dropped: list[int] = []
        ring, run_of = self._ring, self.run_of
        while len(run_of) > capacity:
            run = ring.newer
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

    def stamps(self) -> Mapping[int, float]:
        """Element -> last use, read-only, live."""
        return _Stamps(self.run_of)

    # --- the ring --------------------------------------------------------------------------

    def split(self, run: StampedRun, cut: int) -> StampedRun:
        """:meth:`RunTree.split`; the rest keeps ``run``'s place in the order, the head goes
        just after it (a parent is more recent than its children)."""
        head = super().split(run, cut)
        head.older, head.newer = run, run.newer
        run.newer.older = head
        run.newer = head
        return head

    def _unlink(self, run: StampedRun) -> None:
        run.older.newer = run.newer
        run.newer.older = run.older
        run.older = run.newer = run

    def _link_newest(self, run: StampedRun) -> None:
        ring = self._ring
        run.older, run.newer = ring.older, ring
        ring.older.newer = run
        ring.older = run


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
