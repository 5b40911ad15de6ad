"""Program-level Gittins index: the order that learns whether a program's age means it is nearly
done or will run long (docs/scheduling.md, "Gittins: learning the size of programs").

PLAS serves the program with the least attained service first. That is the best order a
scheduler that knows nothing can take when programs' sizes are heavy-tailed (a program that has
run long will likely run longer), and the worst when they are not: coding agents of one kind
run 20–50 calls each, so the one that has run 30 calls is the one nearly done, and PLAS hands
the engine to the newcomers instead. The Gittins index is the optimal non-clairvoyant order for
mean response time on one server whatever the size distribution (Gittins 1979; Scully et al.,
"SOAP", 2018); with a known size it is SRPT, with a heavy tail it tends to least attained
service. Here it is computed on the distribution of the program sizes the scheduler has seen.

**The rank** of a program that has attained ``a`` seconds of service, on a sample of finished
programs' total services ``S`` (lower rank = served sooner; the Gittins index is its inverse):

    rank(a) = min over Δ > 0 of  E[min(S − a, Δ) | S > a] / P(S − a ≤ Δ | S > a)

— the expected service per program finished, if the scheduler commits to serving the program
for up to Δ more seconds. It is measured in seconds of service, like PLAS's attained service and
SRPT's remaining service, so the same queues and boundaries apply. On a sample the minimum is at
one of the sample points above ``a``; with the points sorted ascending, ``s_k..s_{n-1}`` the
ones above ``a`` and ``j`` the point chosen,

    rank(a) = min over j ≥ k of  (Σ_{i=k..j} (s_i − a) + (n − 1 − j)(s_j − a)) / (j − k + 1).

A sample is a set of atoms: a program just below one would rank near 0 (as if its program were
certain to end within a moment), so the minimum is taken over the Δ that finish at least a tenth
of the programs above ``a`` — the rank smoothed to what the sample can resolve.

**What is learned.** At each program's end (its end event) its attained service is recorded
under its kind (:attr:`ProgramEntry.name`, from the program-start event) and under all kinds
together; the last ``capacity`` per kind are kept, for at most :data:`MAX_KINDS` kinds (names
come from clients). A program ranks on its kind's sample when
that sample holds ``min_samples`` programs larger than what it has attained, else on the
sample of all kinds; a program larger than nearly every program seen (fewer than
``min_samples`` larger) ranks 0 and goes first, in arrival order among such programs: under
memory pressure an old program holds much KV, and finishing it frees that memory (ranking such
programs by their attained service instead, as PLAS, cost 13 % in mean JCT on ``coding``, two
hours on one A100, seed 1: 2,183 against 1,928 s). Its calls still wait their turn behind
the tenants' fair shares, and a program's calls on one thread run one at a time, so a runaway
program takes at most a slot per thread. Until ``min_samples`` programs have finished, a call
enters with its program's attained service, as PLAS. A kind name claimed falsely buys nothing
once a program outgrows that kind: it then ranks on all kinds' sample. Programs removed idle (no
end event) teach nothing.

Calls are ordered by rank inside their queue (the queues follow the rank, so this is the global
rank order, as SRPT); the quanta do not demote (the rank already says how long a program ran);
anti-starvation (β) and the retained lane are PLAS's. Pure: no clock, no I/O.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import math
from dataclasses import dataclass
from typing import ClassVar

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.process_table import ProcessTable, ProgramEntry
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.scheduling.multilevel import MultiLevelScheduler

__all__ = ["GittinsScheduler", "SizeSample", "gittins_rank"]

#: Finished programs kept per kind (and for all kinds together).
CAPACITY = 512
#: Kinds with a sample of their own; programs of further kinds teach all kinds' sample only
#: (program names come from clients: their number must not grow memory without bound).
MAX_KINDS = 256
#: Programs above a program's attained service a sample must hold to rank it.
MIN_SAMPLES = 8
#: Δ finishes at least 1/_SMOOTHING of the programs above the attained service (in
#: :func:`gittins_rank`).
_SMOOTHING = 10
#: Attained service is bucketed by this factor for the rank cache (1 %: a rank within 1 %).
_BUCKET = math.log(1.01)


def gittins_rank(
    sorted_sizes: list[float], prefix: list[float], attained_s: float, min_above: int = 1
) -> float:
    """The rank (module docstring) of a program that attained ``attained_s``, on the sizes
    ``sorted_sizes`` (ascending) with ``prefix[i]`` = the sum of the first ``i``; ``inf`` when
    fewer than ``min_above`` sizes exceed ``attained_s``."""
    n = len(sorted_sizes)
    k = bisect.bisect_right(sorted_sizes, attained_s)
    if n - k < max(min_above, 1):
        return math.inf
    best = math.inf
    base = prefix[k]
    # Δ must finish at least a tenth of the programs above a: a sample is a set of atoms, and
    # one just above a would otherwise rank the program near 0 (an empirical hazard of
    # infinity) — the minimum over Δ smoothed to the sample's resolution.
    for j in range(k + (n - k - 1) // _SMOOTHING, n):
        left = sorted_sizes[j] - attained_s
        done = j - k + 1
        served = prefix[j + 1] - base - done * attained_s + (n - 1 - j) * left
        ratio = served / done
        if ratio < best:
            best = ratio
    return best


@dataclass(slots=True)
class _Sizes:
    """One kind's recent program sizes, with its sorted copy and rank cache built lazily."""

    recent: collections.deque[float]
    recorded: int = 0
    built_at: int = -1
    sorted: list[float] | None = None
    prefix: list[float] | None = None
    cache: dict[int, float] | None = None

    def view(self) -> tuple[list[float], list[float], dict[int, float]]:
        # Rebuilt after every 1/16th of the sample changed (at least once per record while
        # the sample is small): sorting per call would cost more than the rest of a call.
        stale = self.recorded - self.built_at
        if self.sorted is None or stale * 16 >= max(16, len(self.recent)):
            self.sorted = sorted(self.recent)
            self.prefix = [0.0, *itertools.accumulate(self.sorted)]
            self.cache = {}
            self.built_at = self.recorded
        assert self.prefix is not None and self.cache is not None
        return self.sorted, self.prefix, self.cache


class SizeSample:
    """The sizes (total attained service, seconds) of recently finished programs, per kind and
    for all kinds, and the Gittins rank on them (module docstring)."""

    def __init__(self, capacity: int = CAPACITY, min_samples: int = MIN_SAMPLES) -> None:
        if capacity < 1 or min_samples < 1:
            raise ConfigError(
                f"a size sample needs capacity >= 1 and min_samples >= 1, got {capacity}, "
                f"{min_samples}"
            )
        self.capacity = capacity
        self.min_samples = min_samples
        self._all = _Sizes(collections.deque(maxlen=capacity))
        self._kinds: dict[str, _Sizes] = {}

    def record(self, kind: str, size_s: float) -> None:
        """A program of ``kind`` ended after ``size_s`` seconds of service."""
        if not math.isfinite(size_s) or size_s < 0:
            return
        for sizes in (self._all, self._kind(kind)):
            if sizes is not None:
                sizes.recent.append(size_s)
                sizes.recorded += 1

    def __len__(self) -> int:
        return len(self._all.recent)

    def rank_s(self, kind: str, attained_s: float) -> float | None:
        """The rank of a ``kind`` program that attained ``attained_s``: on its kind's sample,
        else on all kinds'; 0 (first) past what all kinds' sample resolves (fewer than
        ``min_samples`` programs larger); ``None`` while fewer than ``min_samples`` programs
        have finished."""
        sizes = self._kinds.get(kind)
        if sizes is not None:
            rank = self._rank(sizes, attained_s)
            if rank is not None:
                return rank
        if len(self._all.recent) < self.min_samples:
            return None
        rank = self._rank(self._all, attained_s)
        return 0.0 if rank is None else rank

    def _rank(self, sizes: _Sizes, attained_s: float) -> float | None:
        """The rank on ``sizes``; ``None`` when it holds fewer than ``min_samples`` programs
        larger than ``attained_s``."""
        if len(sizes.recent) < self.min_samples:
            return None
        ordered, prefix, cache = sizes.view()
        bucket = round(math.log1p(max(attained_s, 0.0)) / _BUCKET)
        rank = cache.get(bucket)
        if rank is None:
            rank = cache[bucket] = gittins_rank(ordered, prefix, attained_s, self.min_samples)
        return rank if math.isfinite(rank) else None

    def _kind(self, kind: str) -> _Sizes | None:
        sizes = self._kinds.get(kind)
        if sizes is None and len(self._kinds) < MAX_KINDS:
            sizes = self._kinds[kind] = _Sizes(collections.deque(maxlen=self.capacity))
        return sizes

    def snapshot(self) -> dict[str, int]:
        """Programs held per kind (``*`` = all kinds)."""
        return {"*": len(self._all.recent), **{k: len(v.recent) for k, v in self._kinds.items()}}


class GittinsScheduler(MultiLevelScheduler):
    """Program-level Gittins index on learned program sizes (module docstring)."""

    name = "gittins"

    def __init__(
        self,
        config: SchedulerConfig | None = None,
        table: ProcessTable | None = None,
        sizes: SizeSample | None = None,
    ) -> None:
        """``sizes``: the sample to learn into (a new one when ``None``)."""
        self.sizes = sizes if sizes is not None else SizeSample()
        super().__init__(config, table)

    def entry_priority_s(self, entry: ProgramEntry, call: CallEntry) -> float:
        attained = entry.attained_service_s
        rank = self.sizes.rank_s(entry.name, attained)
        return attained if rank is None else rank

    def _queue_key(self, call: CallEntry) -> tuple[float, ...]:
        # Levels follow the rank, so ordering inside a level by it gives the global order.
        return (call.priority_s, call.facts.deadline_s, call.seq)

    #: A used-up quantum demotes no call (module docstring).
    _demotes: ClassVar[bool] = False

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        entry = self.table.end(program, now_s)
        if entry is not None and entry.calls_finished:
            self.sizes.record(entry.name, entry.attained_service_s)

    def snapshot(self, now_s: float, limit: int = 200) -> dict[str, object]:
        return {**super().snapshot(now_s, limit), "learned_programs": self.sizes.snapshot()}
