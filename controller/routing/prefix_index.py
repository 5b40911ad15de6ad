"""An approximate per-backend prefix index: which prompt blocks each backend probably caches.

The controller cannot see an engine's cache, so it remembers what it sent where: when a call
is routed to a backend its prompt's chain (``Call.block_hashes``, see
:mod:`controller.routing.hashing`) is recorded there, and when it finishes the (possibly
extended, prompt + output) chain is recorded again. A later call's *match* on a backend is the
length of the leading run of its chain found there.

Approximations, and how they are bounded:

* the engine may evict what we recorded: an element not touched for ``ttl_s`` seconds counts
  as gone, and each backend keeps at most ``capacity_blocks`` elements, least recently used
  evicted first — set it to the engine's KV blocks to mimic its LRU;
* the engine may hold what we did not record (other clients): we never claim those.

Memory is O(recorded elements) bounded by ``capacity_blocks`` per backend; expired elements are
purged as new ones arrive. Pure: ``now_s`` comes in.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

from agentrt.errors import ConfigError
from controller.scheduling.api import Call

__all__ = ["PrefixIndex"]


class PrefixIndex:
    """Chain elements per backend with their last use (seconds, driver's clock)."""

    def __init__(self, *, ttl_s: float = 600.0, capacity_blocks: int | None = None) -> None:
        """``ttl_s`` > 0 (``math.inf`` = never stale); ``capacity_blocks`` >= 1 or ``None``
        (unbounded). Raises :class:`ConfigError` otherwise."""
        if not ttl_s > 0:
            raise ConfigError(f"prefix index ttl_s must be > 0 seconds, got {ttl_s!r}")
        if capacity_blocks is not None and (
            isinstance(capacity_blocks, bool)
            or not isinstance(capacity_blocks, int)
            or capacity_blocks < 1
        ):
            raise ConfigError(f"capacity_blocks must be an integer >= 1, got {capacity_blocks!r}")
        self.ttl_s = float(ttl_s)
        self.capacity_blocks = capacity_blocks
        self._blocks: dict[str, OrderedDict[int, float]] = {}

    def match(self, backend_id: str, hashes: Sequence[int], now_s: float) -> int:
        """How many leading elements of ``hashes`` ``backend_id`` holds (fresh ones only)."""
        blocks = self._blocks.get(backend_id)
        if not blocks:
            return 0
        oldest = now_s - self.ttl_s
        count = 0
        for h in hashes:
            seen = blocks.get(h)
            if seen is None or seen < oldest:
                break
            count += 1
        return count

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

    def on_finish(self, call: Call, backend_id: str, now_s: float) -> None:
        """Refresh the chain (the driver may have extended it over the output)."""
        self.insert(backend_id, call.block_hashes, now_s)

    def on_program_end(self, program_id: str, now_s: float) -> None:
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
