"""An approximate per-backend prefix index: which prompt blocks each backend probably caches.

The controller cannot see an engine's cache, so it remembers what it sent where: when a call
is routed to a backend its prompt's chain (``CallFacts.block_hashes``, see
:mod:`agentrt_controller.routing.hashing`) is recorded there, and when it finishes the (possibly
extended, prompt + output) chain is recorded again. A later call's *match* on a backend is the
length of the leading run of its chain found there.

Approximations, and how they are bounded:

* the engine may evict what we recorded: an element not touched for ``ttl_s`` seconds counts
  as gone, and each backend keeps at most ``capacity_blocks`` elements, least recently used
  evicted first — set it to the engine's KV blocks to mimic its LRU;
* the engine may hold what we did not record (other clients): we never claim those.

Memory is O(recorded elements): at most ``capacity_blocks`` per backend (default
:data:`DEFAULT_CAPACITY_BLOCKS`; ``None`` = no cap, only the TTL bounds it) plus
``popularity_capacity`` program counts; expired elements are purged as new ones arrive.
:meth:`PrefixIndex.size` reports the elements held; about 100 bytes each (measured in
docs/benchmarks.md, "Decision cost at many backends").

**Match by bisection.** Every recorded chain is recorded from its head, all its elements with
the same (non-decreasing) time and the head touched last. So on each backend, for any chain,
the elements present and fresh form a *prefix* of it: an element is never more recent than
its predecessor, in time or in LRU order, and eviction (LRU or TTL) takes a successor before
its predecessor. :meth:`PrefixIndex.match` therefore bisects the chain — O(log n) lookups per
backend instead of walking the matched run, which a prompt's shared head (a system prompt held
by every backend) would make O(backends × head) per routing decision.

**Cost per insert: what is new.** A backend's elements are kept in runs touched a run at a
time (:mod:`~agentrt_controller.routing.prefix_index_runs`, on the run tree of
:mod:`~agentrt_controller.routing.chain_runs` that the memory ledger's counts share): recording
a chain writes the elements the backend lacks and touches each run on the chain's path, with
the same result as touching every element — an agent's next call, which repeats its history
and adds a few blocks, costs those blocks, not its whole prompt, twice per call.

**Per salt.** Chains are salted (:func:`~agentrt_controller.routing.hashing.request_block_hashes`
takes the body's ``cache_salt``, which the controller sets per tenant or cache group), so the
index holds one disjoint set of elements per salt: a tenant's call never matches, and never
counts as sharing, another tenant's blocks — as in the engine, whose prefix cache the same
salt separates (docs/security.md, "Isolation").

**Shared prefixes.** The index also notes, for the first ``SHARED_HEAD_BLOCKS`` elements of
every routed chain, how many different programs used each one (approximately: a change of
program counts). :meth:`PrefixIndex.shared_prefix` is the leading run of a chain that at least
``shared_programs`` programs used — a system prompt, tool schemas: recomputing it on another
backend is paid once and then serves every program that shares it, unlike a program's own
history (:class:`~agentrt_controller.routing.scorers.PrefixCostScorer` discounts it). The
counts are kept in runs too (:class:`~agentrt_controller.routing.prefix_index_runs.ProgramCounts`):
a program noting its next call's head costs its new elements and a touch per run, and since
every program noting an element notes its prefix, counts never grow along a chain, so the
shared run is found by bisection — the same answers as counting every element, at a cost
that does not grow with the head (up to 512 lookups per call before). Pure: ``now_s`` comes
in.

**Holders, for pruning.** The index also keeps, per element, the backends that hold it (the
reverse of the per-backend maps, updated on every insert and eviction; kept from the first
:meth:`PrefixIndex.purge_stale` on, so an index nobody prunes with pays nothing for them), and
:meth:`PrefixIndex.purge_stale` drops every element past its TTL on every backend (amortised
O(1) per element ever recorded: a heap of each backend's oldest entry). After it, an element's
holders are exactly the backends holding it fresh, and — by the prefix property — the holders
of a chain's elements shrink along the chain, so :meth:`PrefixIndex.match_levels` finds every
distinct match length among all backends with O(levels × log chain) lookups, not one bisection
per backend. The router's exact pruning (docs/routing.md, "Cost at many backends") is built on
it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.prefix_index_runs import BackendChains, ProgramCounts
from agentrt_controller.scheduling.call import CallEntry

__all__ = ["DEFAULT_CAPACITY_BLOCKS", "SHARED_HEAD_BLOCKS", "PrefixIndex"]

#: Chain elements per call whose program counts are tracked (16-token blocks: 8,192 tokens).
SHARED_HEAD_BLOCKS = 512
#: Elements remembered per backend by default: 65,536 blocks of 16 tokens = 1M tokens, more
#: than one 80 GB GPU holds for an 8B model (the simulator's A100 profile: 27,804 blocks), so
#: the cap only forgets what the engine has surely evicted; about 6-7 MB per backend.
DEFAULT_CAPACITY_BLOCKS = 65_536
#: What a backend that holds nothing holds.
_NOTHING: Mapping[int, float] = MappingProxyType({})


class PrefixIndex:
    """Chain elements per backend with their last use (seconds, driver's clock)."""

    def __init__(
        self,
        *,
        ttl_s: float = 600.0,
        capacity_blocks: int | None = DEFAULT_CAPACITY_BLOCKS,
        shared_programs: int = 3,
        popularity_capacity: int = 200_000,
    ) -> None:
        """``ttl_s`` > 0 (``math.inf`` = never stale); ``capacity_blocks`` >= 1 or ``None``
        (unbounded); ``shared_programs`` >= 2: programs that must have used an element for it
        to count as shared; ``popularity_capacity``: elements whose program count is kept
        (least recently used forgotten first). Raises :class:`ConfigError` otherwise."""
        if not ttl_s > 0:
            raise ConfigError(f"prefix index ttl_s must be > 0 seconds, got {ttl_s!r}")
        if capacity_blocks is not None and (
            isinstance(capacity_blocks, bool)
            or not isinstance(capacity_blocks, int)
            or capacity_blocks < 1
        ):
            raise ConfigError(f"capacity_blocks must be an integer >= 1, got {capacity_blocks!r}")
        if isinstance(shared_programs, bool) or not isinstance(shared_programs, int):
            raise ConfigError(f"shared_programs must be an integer, got {shared_programs!r}")
        if shared_programs < 2 or popularity_capacity < 1:
            raise ConfigError("shared_programs must be >= 2 and popularity_capacity >= 1")
        self.ttl_s = float(ttl_s)
        #: Whether elements go stale (``ttl_s`` finite; checked once, not per insert).
        self._expires = math.isfinite(self.ttl_s)
        self.capacity_blocks = capacity_blocks
        self.shared_programs = shared_programs
        self.popularity_capacity = popularity_capacity
        self._chains: dict[str, BackendChains] = {}
        #: Per head element, how many programs used it (approximately), in runs.
        self._programs = ProgramCounts(popularity_capacity)
        #: element -> the backends holding it: one backend id, or a set when several (most
        #: elements are one program's history, held by one backend: a plain id is smaller);
        #: ``None`` until :meth:`purge_stale` is first called (nobody reads them before).
        self._holders: dict[int, str | set[str]] | None = None
        #: (time of a backend's oldest entry, or earlier, backend id), a heap with stale
        #: duplicates; every backend holding something has an entry at or before its oldest.
        self._fronts: list[tuple[float, str]] = []

    def shared_prefix(self, hashes: Sequence[int]) -> int:
        """How many leading elements of ``hashes`` at least ``shared_programs`` programs used
        (at most :data:`SHARED_HEAD_BLOCKS`)."""
        return self._programs.shared(hashes[:SHARED_HEAD_BLOCKS], self.shared_programs)

    def note_program(self, program: ProgramKey, hashes: Sequence[int]) -> None:
        """``program`` used the chain ``hashes`` (its head counts toward sharing): its new
        elements and a touch per run (:class:`~.prefix_index_runs.ProgramCounts`)."""
        if hashes:
            self._programs.note(program, hashes[:SHARED_HEAD_BLOCKS])

    def match(self, backend_id: str, hashes: Sequence[int], now_s: float) -> int:
        """How many leading elements of ``hashes`` ``backend_id`` holds (fresh ones only):
        a bisection (module docstring, "Match by bisection")."""
        return self.match_all((backend_id,), hashes, now_s)[0]

    def match_all(
        self, backend_ids: Sequence[str], hashes: Sequence[int], now_s: float
    ) -> list[int]:
        """:meth:`match` for each of ``backend_ids``, aligned with them (one call per routing
        decision: the per-backend part is a dictionary lookup when the backend lacks the
        chain's head, a bisection otherwise)."""
        if not hashes:
            return [0] * len(backend_ids)
        oldest = now_s - self.ttl_s
        head = hashes[0]
        length = len(hashes)
        by_backend = self._chains
        out = []
        for backend_id in backend_ids:
            chains = by_backend.get(backend_id)
            run = chains.run_of.get(head) if chains is not None else None
            if run is None or run.last_s < oldest:
                out.append(0)
                continue
            get = chains.run_of.get  # type: ignore[union-attr]  # run is not None: chains exist
            low, high = 1, length  # hashes[:low] held; hashes[high:] not (or unknown)
            while low < high:
                middle = (low + high + 1) // 2
                run = get(hashes[middle - 1])
                if run is not None and not run.last_s < oldest:  # the walk's test, NaN included
                    low = middle
                else:
                    high = middle - 1
            out.append(low)
        return out

    def insert(self, backend_id: str, hashes: Sequence[int], now_s: float) -> None:
        """Record ``hashes`` as cached on ``backend_id`` now (touching each). Costs the
        elements the backend lacks plus one touch per run on the chain's path, not one write
        per element (:mod:`~agentrt_controller.routing.prefix_index_runs`)."""
        if not hashes:
            return
        chains = self._chains.get(backend_id)
        if chains is None:
            chains = self._chains[backend_id] = BackendChains()
        holders = self._holders
        # Stale elements go first (a touch would revive them); then the least recently used
        # past the capacity: the same elements go as when the TTL purge ran after the cap.
        # (Holders are told only when kept: most controllers never prune, and every routed
        # call inserts twice.)
        if self._expires:
            expired = chains.expire(now_s - self.ttl_s)
            if holders is not None:
                self._dropped(backend_id, expired)
        added = chains.record(hashes, now_s)
        if holders is not None:
            for h in added:
                _add_holder(holders, h, backend_id)
        capacity = self.capacity_blocks
        if capacity is not None and len(chains.run_of) > capacity:
            evicted = chains.evict_to(capacity)
            if holders is not None:
                self._dropped(backend_id, evicted)
        if holders is not None and chains and self._expires:
            self._push_front(backend_id, chains)

    @property
    def written_total(self) -> int:
        """Element entries written by inserts so far, all backends (new elements, and those
        moved when a run is split): what recording costs, in elements."""
        return sum(chains.written_total for chains in self._chains.values())

    def forget_backend(self, backend_id: str) -> None:
        """Drop everything recorded for a backend (it restarted or was removed)."""
        chains = self._chains.pop(backend_id, None)
        if chains is not None:
            self._dropped(backend_id, chains.run_of)

    # --- holders: what the router's pruning reads (module docstring, "Holders") -------------

    def purge_stale(self, now_s: float) -> None:
        """Drop every element not used for ``ttl_s`` seconds, on every backend (those count
        as evicted already: :meth:`match` answers the same). Afterwards :meth:`holders`,
        :meth:`holder_count` and :meth:`elements` speak of fresh elements only. ``now_s`` must not
        go backwards (as for every method here). The first call starts keeping the holders
        (one pass over the index): until then an insert does not pay for them."""
        if self._holders is None:
            self._track_holders()
        if not math.isfinite(self.ttl_s):
            return
        oldest = now_s - self.ttl_s
        fronts = self._fronts
        while fronts and fronts[0][0] < oldest:
            _, backend_id = heapq.heappop(fronts)
            chains = self._chains.get(backend_id)
            if chains:
                self._dropped(backend_id, chains.expire(oldest))
                if chains:
                    self._push_front(backend_id, chains)

    def holder_count(self, h: int) -> int:
        """Backends holding element ``h`` (fresh ones only after :meth:`purge_stale`; none
        before its first call)."""
        held = self._holders.get(h) if self._holders is not None else None
        return 0 if held is None else 1 if isinstance(held, str) else len(held)

    def holders(self, h: int) -> Collection[str]:
        """The backends holding element ``h`` (fresh ones only after :meth:`purge_stale`);
        read-only."""
        held = self._holders.get(h) if self._holders is not None else None
        return () if held is None else (held,) if isinstance(held, str) else held

    def elements(self, backend_id: str) -> Mapping[int, float]:
        """What ``backend_id`` holds: element -> last use (seconds), read-only (fresh only
        after :meth:`purge_stale`)."""
        chains = self._chains.get(backend_id)
        return chains.stamps() if chains else _NOTHING

    def match_levels(self, hashes: Sequence[int]) -> list[int]:
        """Every value :meth:`match` takes for ``hashes`` over all backends, 0 included,
        ascending — call :meth:`purge_stale` first. The backends with match ``k`` (0 < k <
        ``len(hashes)``) are those holding ``hashes[k - 1]`` but not ``hashes[k]``; with
        match ``len(hashes)`` those holding its last element; with 0, all others. By the
        prefix property the holder counts along the chain never grow, so the lengths where
        they drop are found by bisection: O(levels × log len(hashes)) lookups."""
        levels = [0]
        length = len(hashes)
        if self._holders is None:
            raise RuntimeError("match_levels() needs purge_stale() first")
        count = self.holder_count
        first = count(hashes[0]) if length else 0
        if first == 0:
            return levels
        last = count(hashes[length - 1])
        # (lo, hi, count at lo, count at hi), chain positions 1-based: count at k is the
        # holders of hashes[k - 1]; a drop between k and k + 1 makes k a level.
        stack = [(1, length, first, last)]
        while stack:
            low, high, at_low, at_high = stack.pop()
            if at_low == at_high:
                continue
            if high == low + 1:
                levels.append(low)
                continue
            middle = (low + high) // 2
            at_middle = count(hashes[middle - 1])
            stack.append((middle, high, at_middle, at_high))
            stack.append((low, middle, at_low, at_middle))
        if last > 0:
            levels.append(length)
        levels.sort()
        return levels

    def size(self, backend_id: str | None = None) -> int:
        """Elements recorded (for one backend, or in total)."""
        if backend_id is not None:
            return len(self._chains.get(backend_id, ()))
        return sum(len(b) for b in self._chains.values())

    # --- RouteObserver: the driver's facts keep the index up to date ----------------------

    def on_routed(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        """The prompt will be prefilled there: count its chain as cached from now."""
        self.insert(backend_id, call.facts.block_hashes, now_s)
        self.note_program(call.facts.program, call.facts.block_hashes)

    def on_finish(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        """Refresh the chain (the driver may have extended it over the output)."""
        self.insert(backend_id, call.facts.block_hashes, now_s)

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        """Nothing: cached prefixes outlive their program (others may share them)."""

    def _dropped(self, backend_id: str, elements: Collection[int]) -> None:
        """``backend_id`` no longer holds ``elements``: their holders forget it."""
        if self._holders is not None:
            for h in elements:
                self._drop_holder(h, backend_id)

    def _drop_holder(self, h: int, backend_id: str) -> None:
        holders = self._holders
        held = holders.get(h) if holders is not None else None
        if held is None:
            return
        assert holders is not None
        if isinstance(held, str):
            if held == backend_id:
                del holders[h]
            return
        held.discard(backend_id)
        if len(held) == 1:
            holders[h] = next(iter(held))

    def _track_holders(self) -> None:
        """Start keeping the holders and the heap of oldest entries, from what is held."""
        holders: dict[int, str | set[str]] = {}
        for backend_id, chains in self._chains.items():
            for h in chains.run_of:
                _add_holder(holders, h, backend_id)
        self._holders = holders
        self._rebuild_fronts()

    def _push_front(self, backend_id: str, chains: BackendChains) -> None:
        """Note ``backend_id``'s oldest entry; rebuild the heap when stale duplicates (one per
        insert) outnumber the backends: O(backends) per O(backends) inserts."""
        fronts = self._fronts
        oldest = chains.oldest_s()
        assert oldest is not None  # callers push a backend holding something
        heapq.heappush(fronts, (oldest, backend_id))
        if len(fronts) > 2 * len(self._chains) + 64:
            self._rebuild_fronts()

    def _rebuild_fronts(self) -> None:
        """The heap of oldest entries, one per backend holding something, without stale
        duplicates; rebuilt in place (:meth:`purge_stale` holds the list while it pops)."""
        fronts = self._fronts
        fronts[:] = [(c.oldest_s(), i) for i, c in self._chains.items() if c]  # type: ignore[misc]
        heapq.heapify(fronts)


def _add_holder(holders: dict[int, str | set[str]], h: int, backend_id: str) -> None:
    """Note ``backend_id`` as a holder of element ``h`` (one holder is kept as its id, several
    as a set: most elements have one)."""
    held = holders.get(h)
    if held is None:
        holders[h] = backend_id
    elif isinstance(held, str):
        holders[h] = {held, backend_id}
    else:
        held.add(backend_id)
