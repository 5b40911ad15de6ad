"""What one backend holds in the prefix index: chain elements in *runs*, touched a run at a time.

A chain is recorded from its head, every element with the same time and the head touched
last (:mod:`agentrt_controller.routing.prefix_index`). Kept per element, that costs a write
per element of the chain on every insert — at a 128 K-token prompt 8,192 writes, twice per
call, although an agent's next prompt repeats its last one and adds a few blocks. Here the
elements a backend holds form a tree of **runs**: a run is consecutive elements of one chain
that were always touched together (one last-use time, one place in the least-recently-used
order); its parent run holds the elements before its first one. Recording a chain then costs
its *new* elements plus one touch per run on its path:

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

__all__ = ["BackendChains", "Run"]


class Run:
    """Consecutive elements of one chain, last used at :attr:`last_s`, evicted tail first."""

    __slots__ = ("children", "elements", "last_s", "newer", "older", "parent", "start")

    def __init__(self, elements: list[int], start: int, last_s: float, parent: Run | None):
        #: The elements, in chain order.
        self.elements = elements
        #: The chain position (0-based) of ``elements[0]``.
        self.start = start
        #: Last use of every element here (seconds, the index's clock).
        self.last_s = last_s
        #: The run holding the elements before ``elements[0]``; ``None`` at a chain's head.
        self.parent = parent
        #: The runs whose parent this is.
        self.children: set[Run] = set()
        #: Neighbours in the least-recently-used ring (the backend's sentinel closes it).
        self.older: Run = self
        self.newer: Run = self


class BackendChains:
    """The runs one backend holds: element -> its run, and the runs least recently used first
    (a ring through a sentinel). ``now_s`` never goes backwards."""

    __slots__ = ("_ring", "run_of", "written_total")

    def __init__(self) -> None:
        #: Element -> the run holding it.
        self.run_of: dict[int, Run] = {}
        self._ring = Run([], 0, float("-inf"), None)
        #: Element entries written: new elements, and those moved to a run of their own when
        #: a run is split. What recording chains cost, in elements (tests read it).
        self.written_total = 0

    def __len__(self) -> int:
        return len(self.run_of)

    def oldest_s(self) -> float | None:
        """Last use of the least recently used element; ``None`` when nothing is held."""
        oldest = self._ring.newer
        return None if oldest is self._ring else oldest.last_s

    def held_run(self, hashes: Sequence[int]) -> int:
        """How many leading elements of ``hashes`` are held where the chain puts them
        (bisection: held elements form a prefix of any chain)."""
        run_of = self.run_of
        length = len(hashes)
        if not length or not _at(run_of, hashes[0], 0):
            return 0
        if _at(run_of, hashes[-1], length - 1):  # all of it: a call's finish, a retry
            return length
        low, high = 1, length - 1  # hashes[:low] held; hashes[high:] not (or unknown)
        while low < high:
            middle = (low + high + 1) // 2
            if _at(run_of, hashes[middle - 1], middle - 1):
                low = middle
            else:
                high = middle - 1
        return low

    def record(self, hashes: Sequence[int], now_s: float) -> Sequence[int]:
        """Touch ``hashes`` at ``now_s`` (head last), adding what is new; returns the elements
        added. Call :meth:`expire` first: a stale element would be touched back to life."""
        run_of = self.run_of
        held = self.held_run(hashes)
        tip: Run | None = None
        if held:
            tip = run_of[hashes[held - 1]]
            if held - tip.start < len(tip.elements):
                tip = self._split(tip, held - tip.start)
        added: Sequence[int] = ()
        if held < len(hashes):
            extend = tip is not None and not tip.children
            run = tip if extend else Run([], held, now_s, tip)
            assert run is not None
            elements = run.elements
            before = len(elements)
            for h in hashes[held:]:
                if h in run_of:  # not a chain (module docstring): record up to here
                    break
                run_of[h] = run
                elements.append(h)
            added = elements[before:]
            self.written_total += len(added)
            if added and not extend:
                if tip is not None:
                    tip.children.add(run)
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
            for h in run.elements:
                del self.run_of[h]
            dropped.extend(run.elements)
            self._remove(run)
        return dropped

    def evict_to(self, capacity: int) -> list[int]:
        """Drop least recently used elements (a run's tail first) until at most ``capacity``
        are held; returns them."""
        dropped: list[int] = []
        ring, run_of = self._ring, self.run_of
        while len(run_of) > capacity:
            run = ring.newer
            over = len(run_of) - capacity
            gone = run.elements[-over:] if over < len(run.elements) else run.elements
            for h in gone:
                del run_of[h]
            dropped.extend(reversed(gone))
            if gone is run.elements:
                self._remove(run)
            else:
                del run.elements[-over:]
        return dropped

    def stamps(self) -> Mapping[int, float]:
        """Element -> last use, read-only, live."""
        return _Stamps(self.run_of)

    # --- the ring and the tree -----------------------------------------------------------------

    def _split(self, run: Run, cut: int) -> Run:
        """Make ``run.elements[:cut]`` a run of its own, the parent of the rest; returns it.
        The rest keeps ``run`` (its children stay attached) and its place in the order; the
        head goes just after it (a parent is more recent than its children)."""
        head = Run(run.elements[:cut], run.start, run.last_s, run.parent)
        del run.elements[:cut]
        run.start += cut
        if run.parent is not None:
            run.parent.children.discard(run)
            run.parent.children.add(head)
        run.parent = head
        head.children.add(run)
        run_of = self.run_of
        for h in head.elements:
            run_of[h] = head
        self.written_total += cut
        head.older, head.newer = run, run.newer
        run.newer.older = head
        run.newer = head
        return head

    def _remove(self, run: Run) -> None:
        """Take an emptied (or dropped) run out of the ring and off its parent."""
        self._unlink(run)
        if run.parent is not None:
            run.parent.children.discard(run)

    def _unlink(self, run: Run) -> None:
        run.older.newer = run.newer
        run.newer.older = run.older
        run.older = run.newer = run

    def _link_newest(self, run: Run) -> None:
        ring = self._ring
        run.older, run.newer = ring.older, ring
        ring.older.newer = run
        ring.older = run


def _at(run_of: dict[int, Run], h: int, position: int) -> bool:
    """Whether ``h`` is held at chain ``position``."""
    run = run_of.get(h)
    if run is None:
        return False
    offset = position - run.start
    return 0 <= offset < len(run.elements) and run.elements[offset] == h


class _Stamps(Mapping[int, float]):
    """Element -> last use (seconds), over a backend's runs."""

    __slots__ = ("_run_of",)

    def __init__(self, run_of: dict[int, Run]) -> None:
        self._run_of = run_of

    def __getitem__(self, h: int) -> float:
        return self._run_of[h].last_s

    def __iter__(self) -> Iterator[int]:
        return iter(self._run_of)

    def __len__(self) -> int:
        return len(self._run_of)
