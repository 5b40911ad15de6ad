"""How many counted chains hold each element, kept per run: what the memory ledger's shared
prefixes cost per call is the call's new elements, not its whole chain.

The memory ledger (:mod:`agentrt_controller.scheduling.memory`) counts, per backend, how many
resident programs' chains (:mod:`.hashing`) hold each element: a prefix several residents hold
is counted once, and a new program's call is charged past the prefix they hold. Counted per
element, a resident's arrival and its end each walk its whole chain — 8,192 elements for a
128 K-token prompt — although its elements are mostly those of the program before it.

Here the elements form a tree of runs (:mod:`.chain_runs`, the tree the prefix index's
last-use times use too) whose payload is a count: every counted chain ends at the end of a
run, so one count per run says how many counted chains hold each of its elements. Adding a
chain touches the runs of its path past what was counted before, plus its new elements;
removing one touches the runs of its path. Runs no chain holds any more are kept (up to
``idle_elements`` elements, the longest idle dropped first, always a leaf): the next program
with the same history finds them.

The counts are exactly the per-element ones. Elements are assumed to determine their prefix
(hash chains); a sequence that is not one (an element repeated, or held at another position)
switches the instance to per-element counts for good — exact, at the old cost.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence

from agentrt_controller.routing.chain_runs import Run, RunTree

__all__ = ["ChainCounts"]

#: Elements of idle runs kept by default (65,536 blocks of 16 tokens: 1 M tokens).
DEFAULT_IDLE_ELEMENTS = 65_536


class ChainCounts(Mapping[int, int]):
    """Per element of counted chains, how many hold it: a read-only mapping of the elements
    held (reading it whole walks every element: for tests and views, not per call)."""

    def __init__(self, idle_elements: int = DEFAULT_IDLE_ELEMENTS) -> None:
        self._runs = _CountedRuns(idle_elements)
        #: Per-element counts, once a sequence that is not a chain came (module docstring).
        self._flat: dict[int, int] | None = None

    @property
    def idle_elements(self) -> int:
        """Elements of runs no counted chain holds that are kept (>= 0)."""
        return self._runs.idle_elements

    @property
    def written_total(self) -> int:
        """Elements written to runs: new ones, and a split run's head. What counting costs,
        in elements (tests read it)."""
        return self._runs.written_total

    @property
    def per_run(self) -> bool:
        """Whether counts are kept per run (``False`` once a sequence that is not a chain
        switched them to per element)."""
        return self._flat is None

    def count(self, h: int) -> int:
        """How many counted chains hold element ``h``."""
        if self._flat is not None:
            return self._flat.get(h, 0)
        run = self._runs.run_of.get(h)
        return 0 if run is None else run.count

    def __getitem__(self, h: int) -> int:
        held = self.count(h)
        if not held:
            raise KeyError(h)
        return held

    def __iter__(self) -> Iterator[int]:
        if self._flat is not None:
            return iter(list(self._flat))
        return iter([h for h, run in self._runs.run_of.items() if run.count])

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
        return self._runs.leading(chain, held=_counted_at)

    def add(self, chain: Sequence[int], counted: int = 0) -> int:
        """Count ``chain`` once more, past its first ``counted`` elements (counted already:
        the same chain's earlier part). Returns how many of the elements it adds to were held
        before (by other chains)."""
        if self._flat is None:
            shared = self._runs.add(chain, counted)
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
            still = self._runs.remove(chain)
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

    def _go_flat(self) -> None:
        runs = self._runs
        self._flat = {h: run.count for h, run in runs.run_of.items() if run.count}
        runs.clear()


class _CountedRun(Run):
    """A run with the number of counted chains that hold every element of it."""

    __slots__ = ("count",)

    def __init__(
        self, elements: list[int], start: int, count: int, parent: _CountedRun | None
    ) -> None:
        super().__init__(elements, start, parent)
        #: Counted chains holding every element here.
        self.count = count

    def copy_head(self, cut: int) -> _CountedRun:
        return _CountedRun(self.elements[:cut], self.start, self.count, self.parent)


def _counted_at(run_of: Mapping[int, _CountedRun], chain: Sequence[int], position: int) -> bool:
    """:func:`~.chain_runs.held_at`, in a run some counted chain holds (inlined: it is asked
    once per bisection step)."""
    h = chain[position]
    run = run_of.get(h)
    if run is None or run.count == 0:
        return False
    offset = position - run.start
    return 0 <= offset < len(run.elements) and run.elements[offset] == h


class _CountedRuns(RunTree[_CountedRun]):
    """The runs, with the idle ones (count 0) kept up to ``idle_elements`` elements."""

    __slots__ = ("idle", "idle_elements", "idle_held")

    def __init__(self, idle_elements: int) -> None:
        super().__init__()
        self.idle_elements = idle_elements
        #: Runs no counted chain holds, the longest idle first.
        self.idle: OrderedDict[_CountedRun, None] = OrderedDict()
        #: Elements of the idle runs.
        self.idle_held = 0

    def add(self, chain: Sequence[int], counted: int) -> int | None:
        """:meth:`ChainCounts.add` on the runs; ``None``, changing nothing, when ``chain`` is
        not one."""
        present = self.leading(chain)
        if present < counted:
            return None
        run: _CountedRun | None = None
        if present < len(chain):
            run = _CountedRun([], present, 0, None)
            new = chain[present:]
            if self.append(run, new) < len(new):  # not a chain: undo
                self.drop(run)
                self.written_total -= len(run.elements)
                return None
        if counted:
            self.end_at(chain, counted)
        tip = self.end_at(chain, present) if present else None
        if run is not None:
            run.parent = tip
            self.attach(run)
            tip = run
        shared = 0
        idle = self.idle
        while tip is not None and tip.start >= counted:
            if tip.count:
                shared += len(tip.elements)
            elif tip in idle:
                del idle[tip]
                self.idle_held -= len(tip.elements)
            tip.count += 1
            tip = tip.parent
        return shared

    def remove(self, chain: Sequence[int]) -> int | None:
        """:meth:`ChainCounts.remove` on the runs; ``None``, changing nothing, when ``chain``
        is not one counted here."""
        if not chain:
            return 0
        run = self.run_of.get(chain[-1])
        end = len(chain) - 1
        if (
            run is None
            or run.count < 1
            or run.start + len(run.elements) - 1 != end
            or run.elements[-1] != chain[-1]
        ):
            return None
        still = 0
        tip: _CountedRun | None = run
        while tip is not None:  # deepest first: a child goes idle before its parent
            tip.count -= 1
            if tip.count > 0:
                still += len(tip.elements)
            else:
                self.idle[tip] = None
                self.idle_held += len(tip.elements)
            tip = tip.parent
        self._trim_idle()
        return still

    def split(self, run: _CountedRun, cut: int) -> _CountedRun:
        """:meth:`RunTree.split`; a split idle run's head is idle too, and goes last: it must
        outlive the rest (its child)."""
        head = super().split(run, cut)
        if run in self.idle:
            self.idle[head] = None
        return head

    def clear(self) -> None:
        """Forget every run (``written_total`` stays: what counting cost so far)."""
        self.run_of.clear()
        self.idle.clear()
        self.idle_held = 0

    def _trim_idle(self) -> None:
        idle = self.idle
        while self.idle_held > self.idle_elements and idle:
            run, _ = idle.popitem(last=False)
            self.idle_held -= len(run.elements)
            self.drop(run)
