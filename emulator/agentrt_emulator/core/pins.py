"""Retention pins: which blocks each pin holds and when it expires (KV retention during tool
waits, after Continuum, arXiv 2511.02230).

The table only does the bookkeeping; the :class:`~agentrt_emulator.core.kv_cache.BlockPool` counts
pins per block. Expiry uses a lazy min-heap keyed by absolute expiry time: refreshing a pin
pushes a new entry and stale ones are skipped when popped.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from agentrt_emulator.core.kv_cache import BlockPool

__all__ = ["PinTable"]


@dataclass(slots=True)
class _Pin:
    #: Absolute expiry on the caller's clock (seconds); ``math.inf`` = until unpinned.
    expires_s: float
    #: Blocks held, in prefix order.
    blocks: list[int]
    #: Distinguishes this pin from an earlier one with the same id in the heap.
    generation: int


class PinTable:
    """Pins by id, with their expiry times."""

    __slots__ = ("_generation", "_heap", "_pins", "_pool")

    def __init__(self, pool: BlockPool) -> None:
        self._pool = pool
        self._pins: dict[str, _Pin] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._generation = 0

    def __len__(self) -> int:
        return len(self._pins)

    @property
    def next_expiry_s(self) -> float:
        """Earliest expiry of a live pin (seconds on the caller's clock); ``math.inf`` if none."""
        heap = self._heap
        pins = self._pins
        while heap:
            expires_s, generation, pin_id = heap[0]
            pin = pins.get(pin_id)
            if pin is not None and pin.generation == generation:
                return expires_s
            heapq.heappop(heap)  # stale entry of a removed or refreshed pin
        return math.inf

    def add(self, pin_id: str, blocks: list[int], expires_s: float) -> None:
        """Hold ``blocks`` under ``pin_id`` until ``expires_s`` (replacing an earlier pin)."""
        self.remove(pin_id)
        self._generation += 1
        self._pool.pin_blocks(blocks)
        self._pins[pin_id] = _Pin(expires_s, blocks, self._generation)
        if expires_s < math.inf:
            heapq.heappush(self._heap, (expires_s, self._generation, pin_id))

    def remove(self, pin_id: str) -> bool:
        """Release ``pin_id``; True if it existed."""
        pin = self._pins.pop(pin_id, None)
        if pin is None:
            return False
        self._pool.unpin_blocks(pin.blocks)
        return True

    def expire(self, now_s: float) -> int:
        """Release every pin whose expiry is ``<= now_s``; returns how many were released."""
        count = 0
        while self.next_expiry_s <= now_s:
            _, _, pin_id = heapq.heappop(self._heap)
            self.remove(pin_id)
            count += 1
        return count
