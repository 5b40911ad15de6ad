"""An approximate per-backend prefix index: which prompt blocks each backend probably caches.

The controller cannot see an engine's cache, so it remembers what it sent where: when a call
is routed to a backend its prompt's chain (``Call.block_hashes``, see
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
history (:class:`~agentrt_controller.routing.scorers.PrefixCostScorer` discounts it). Pure:
``now_s``
comes in.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.api import Call

__all__ = ["DEFAULT_CAPACITY_BLOCKS", "SHARED_HEAD_BLOCKS", "PrefixIndex"]

#: Chain elements per call whose program counts are tracked (16-token blocks: 8,192 tokens).
SHARED_HEAD_BLOCKS = 512
#: Elements remembered per backend by default: 65,536 blocks of 16 tokens = 1M tokens, more
#: than one 80 GB GPU holds for an 8B model (the simulator's A100 profile: 27,804 blocks), so
#: the cap only forgets what the engine has surely evicted; about 6-7 MB per backend.
DEFAULT_CAPACITY_BLOCKS = 65_536


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
        self.capacity_blocks = capacity_blocks
        self.shared_programs = shared_programs
        self.popularity_capacity = popularity_capacity
        self._blocks: dict[str, OrderedDict[int, float]] = {}
        #: element -> (programs that used it, approximately; the last of them as a plain
        #: tuple of the key's fields: compared in C, where a ProgramKey's ``==`` runs Python
        #: code once per head element of every routed call)
        self._programs: OrderedDict[int, tuple[int, tuple[str, str, str | None]]] = OrderedDict()

    def shared_prefix(self, hashes: Sequence[int]) -> int:
        """How many leading elements of ``hashes`` at least ``shared_programs`` programs used
        (at most :data:`SHARED_HEAD_BLOCKS`)."""
        programs = self._programs
        needed = self.shared_programs
        count = 0
        for h in hashes[:SHARED_HEAD_BLOCKS]:
            seen = programs.get(h)
            if seen is None or seen[0] < needed:
                break
            count += 1
        return count

    def note_program(self, program: ProgramKey, hashes: Sequence[int]) -> None:
        """``program`` used the chain ``hashes`` (its head counts toward sharing)."""
        programs = self._programs
        key = (program.session_id, program.program_id, program.tenant)
        for h in hashes[:SHARED_HEAD_BLOCKS]:
            seen = programs.get(h)
            if seen is None:
                programs[h] = (1, key)
            elif seen[1] != key:
                programs[h] = (seen[0] + 1, key)
                programs.move_to_end(h)
        while len(programs) > self.popularity_capacity:
            programs.popitem(last=False)

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
        by_backend = self._blocks
        out = []
        for backend_id in backend_ids:
            blocks = by_backend.get(backend_id)
            seen = blocks.get(head) if blocks else None
            if seen is None or seen < oldest:
                out.append(0)
                continue
            get = blocks.get  # type: ignore[union-attr]  # seen is not None: blocks exist
            low, high = 1, length  # hashes[:low] held; hashes[high:] not (or unknown)
            while low < high:
                middle = (low + high + 1) // 2
                seen = get(hashes[middle - 1])
                if seen is not None and not seen < oldest:  # the walk's test, NaN included
                    low = middle
                else:
                    high = middle - 1
            out.append(low)
        return out

    def insert(self, backend_id: str, hashes: Sequence[int], now_s: float) -> None:
        """Record ``hashes`` as cached on ``backend_id`` now (touching each)."""
        if not hashes:
            return
        blocks = self._blocks.get(backend_id)
        if blocks is None:
            blocks = self._blocks[backend_id] = OrderedDict()
        # Walk backwards so the chain's head ends most recent: under LRU eviction a prefix
        # then outlives its extensions, as in the engine.
        for h in reversed(hashes):
            blocks[h] = now_s
            blocks.move_to_end(h)
        self._purge(blocks, now_s)

    def forget_backend(self, backend_id: str) -> None:
        """Drop everything recorded for a backend (it restarted or was removed)."""
        self._blocks.pop(backend_id, None)

    def size(self, backend_id: str | None = None) -> int:
        """Elements recorded (for one backend, or in total)."""
        if backend_id is not None:
            return len(self._blocks.get(backend_id, ()))
        return sum(len(b) for b in self._blocks.values())

    # --- RouteObserver: the driver's facts keep the index up to date ----------------------

    def on_routed(self, call: Call, backend_id: str, now_s: float) -> None:
        """The prompt will be prefilled there: count its chain as cached from now."""
        self.insert(backend_id, call.block_hashes, now_s)
        self.note_program(call.program_key, call.block_hashes)

    def on_finish(self, call: Call, backend_id: str, now_s: float) -> None:
        """Refresh the chain (the driver may have extended it over the output)."""
        self.insert(backend_id, call.block_hashes, now_s)

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        """Nothing: cached prefixes outlive their program (others may share them)."""

    def _purge(self, blocks: OrderedDict[int, float], now_s: float) -> None:
        capacity = self.capacity_blocks
        if capacity is not None:
            while len(blocks) > capacity:
                blocks.popitem(last=False)
        if math.isfinite(self.ttl_s):
            oldest = now_s - self.ttl_s
            while blocks:
                h, seen = next(iter(blocks.items()))
                if seen >= oldest:
                    break
                del blocks[h]
