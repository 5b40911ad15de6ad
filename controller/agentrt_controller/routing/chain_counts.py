"""How many counted chains hold each element, kept per run: what the memory ledger's shared
prefixes cost per call is the call's new elements, not its whole chain.

The memory ledger (:mod:`agentrt_controller.scheduling.memory`) counts, per backend, how many
resident programs' chains (:mod:`.hashing`) hold each element: a prefix several residents hold
is counted once, and a new program's call is charged past the prefix they hold. Counted per
element, a resident's arrival and its end each walk its whole chain — 8,192 elements for a
128 K-token prompt — although its elements are mostly those of the program before it.

Here the elements form a tree of **runs** (consecutive elements of one chain; a run's parent
holds the elements before its first): every counted chain ends at the end of a run, so one
count per run says how many counted chains hold each of its elements. Adding a chain touches
the runs of its path past what was counted before, plus its new elements; removing one touches
the runs of its path. Runs no chain holds any more are kept (up to ``idle_elements``
elements, the longest idle dropped first, always a leaf): the next program with the same
history finds them.

The counts are exactly the per-element ones. Elements are assumed to determine their prefix
(hash chains); a sequence that is not one (an element repeated, or held at another position)
switches the instance to per-element counts for good — exact, at the old cost.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence

__all__ = ["ChainCounts"]

#: Elements of idle runs kept by default (65,536 blocks of 16 tokens: 1 M tokens).
DEFAULT_IDLE_ELEMENTS = 65_536


class _Run:
    __slots__ = ("children", "count", "elements", "parent", "start")

    def __init__(self, elements: list[int], start: int, count: int, parent: _Run | None):
        self.elements = elements
        #: Chain position of ``elements[0]``.
        self.start = start
        #: Counted chains holding every element here.
        self.count = count
        self.parent = parent
        self.children: set[_Run] = set()


class ChainCounts(Mapping[int, int]):
    """Per element of counted chains, how many hold it: a read-only mapping of the elements
    held (reading it whole walks every element: for tests and views, not per call)."""

    def __init__(self, idle_elements: int = DEFAULT_IDLE_ELEMENTS) -> None:
        self.idle_elements = idle_elements
        self._run_of: dict[int, _Run] = {}
        #: Runs no counted chain holds, the longest idle first.
        self._idle: OrderedDict[_Run, None] = OrderedDict()
        self._idle_held = 0
        #: Per-element counts, once a sequence that is not a chain came (module docstring).
        self._flat: dict[int, int] | None = None
        #: Elements written to runs: new ones, and a split run's head. What counting costs,
        #: in elements (tests read it).
        self.written_total = 0

    @property
    def per_run(self) -> bool:
        """Whether counts are kept per run (``False`` once a sequence that is not a chain
        switched them to per element)."""
        return self._flat is None

    def count(self, h: int) -> int:
        """How many counted chains hold element ``h``."""
        if self._flat is not None:
            return self._flat.get(h, 0)
        run = self._run_of.get(h)
        return 0 if run is None else run.count

    def __getitem__(self, h: int) -> int:
        held = self.count(h)
        if not held:
            raise KeyError(h)
        return held

    def __iter__(self) -> Iterator[int]:
        if self._flat is not None:
            return iter(list(self._flat))
        return iter([h for h, run in self._run_of.items() if run.count])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def leading(self, chain: Sequence[int]) -> int:
        """How many leading elements of ``chain`` some counted chain holds (bisection: the
        counts never grow along a chain)."""
        if self._flat is not None:
            flat, held = self._flat, 0
            for h in chain:
                if h not in flat:
                    break
                held += 1
            return held
        return self._leading(chain, counted_only=True)

    def add(self, chain: Sequence[int], counted: int = 0) -> int:
        """Count ``chain`` once more, past its first ``counted`` elements (counted already:
        the same chain's earlier part). Returns how many of the elements it adds to were held
        before (by other chains)."""
        if self._flat is None:
            shared = self._add_runs(chain, counted)
            if shared is not None:
                return shared
            self._go_flat()
        if self._flat is not None:
            flat, shared = self._flat, 0
            for h in chain[counted:]:
                held = flat.get(h, 0)
                flat[h] = held + 1
                shared += held > 0
            return shared
        return 0

    def remove(self, chain: Sequence[int]) -> int:
        """Count ``chain`` (as counted: whole) once less. Returns how many of its elements
        other chains still hold."""
        if self._flat is None:
            still = self._remove_runs(chain)
            if still is not None:
                return still
            self._go_flat()
        if self._flat is not None:
            flat, still = self._flat, 0
            for h in chain:
                held = flat.get(h, 0)
                if held <= 1:
                    flat.pop(h, None)
                else:
                    flat[h] = held - 1
                    still += 1
            return still
        return 0

    # --- runs -------------------------------------------------------------------------------

    def _leading(self, chain: Sequence[int], *, counted_only: bool) -> int:
        run_of = self._run_of

        def held(position: int) -> bool:
            run = run_of.get(chain[position])
            if run is None or (counted_only and run.count == 0):
                return False
            offset = position - run.start
            return 0 <= offset < len(run.elements) and run.elements[offset] == chain[position]

        if not chain or not held(0):
            return 0
        low, high = 1, len(chain)
        while low < high:
            middle = (low + high + 1) // 2
            if held(middle - 1):
                low = middle
            else:
                high = middle - 1
        return low

    def _add_runs(self, chain: Sequence[int], counted: int) -> int | None:
        """:meth:`add` on the runs; ``None``, changing nothing, when ``chain`` is not one."""
        run_of = self._run_of
        present = self._leading(chain, counted_only=False)
        new = chain[present:]
        if present < counted or any(h in run_of for h in new) or len(set(new)) < len(new):
            return None
        if counted:
            self._boundary(chain, counted)
        tip = self._boundary(chain, present) if present else None
        if new:
            run = _Run(list(new), present, 0, tip)
            for h in new:
                run_of[h] = run
            self.written_total += len(new)
            if tip is not None:
                tip.children.add(run)
            tip = run
        shared = 0
        idle = self._idle
        while tip is not None and tip.start >= counted:
            if tip.count:
                shared += len(tip.elements)
            elif tip in idle:
                del idle[tip]
                self._idle_held -= len(tip.elements)
            tip.count += 1
            tip = tip.parent
        return shared

    def _remove_runs(self, chain: Sequence[int]) -> int | None:
        """:meth:`remove` on the runs; ``None``, changing nothing, when ``chain`` is not one
        counted here."""
        if not chain:
            return 0
        run = self._run_of.get(chain[-1])
        end = len(chain) - 1
        if (
            run is None
            or run.count < 1
            or run.start + len(run.elements) - 1 != end
            or run.elements[-1] != chain[-1]
        ):
            return None
        still = 0
        tip: _Run | None = run
        while tip is not None:  # deepest first: a child goes idle before its parent
            tip.count -= 1
            if tip.count > 0:
                still += len(tip.elements)
            else:
                self._idle[tip] = None
                self._idle_held += len(tip.elements)
            tip = tip.parent
        self._trim_idle()
        return still

    def _boundary(self, chain: Sequence[int], length: int) -> _Run:
        """The run ending at ``chain[length - 1]`` (held), split there if it goes on."""
        run = self._run_of[chain[length - 1]]
        cut = length - run.start
        if cut == len(run.elements):
            return run
        head = _Run(run.elements[:cut], run.start, run.count, run.parent)
        del run.elements[:cut]
        run.start += cut
        if run.parent is not None:
            run.parent.children.discard(run)
            run.parent.children.add(head)
        run.parent = head
        head.children.add(run)
        for h in head.elements:
            self._run_of[h] = head
        self.written_total += cut
        if run in self._idle:  # both idle: the head must outlive the rest, so it goes last
            self._idle[head] = None
        return head

    def _trim_idle(self) -> None:
        idle, run_of = self._idle, self._run_of
        while self._idle_held > self.idle_elements and idle:
            run, _ = idle.popitem(last=False)
            self._idle_held -= len(run.elements)
            for h in run.elements:
                del run_of[h]
            if run.parent is not None:
                run.parent.children.discard(run)

    def _go_flat(self) -> None:
        self._flat = {h: run.count for h, run in self._run_of.items() if run.count}
        self._run_of.clear()
        self._idle.clear()
        self._idle_held = 0
