"""K FCFS queues of calls with O(log n) push / pop / move / remove and deadline drops.

Inside a level the default order is ``(level_entered_s, deadline_s, seq)``: first come first
served by the time the call entered the level; an earlier deadline breaks ties; then submission
order. A scheduler may pass another key (SRPT orders by remaining work); the key must be a
tuple of numbers ending with ``CallEntry.seq``.
Removal and moves are lazy (a stale heap entry is skipped when it surfaces); the heaps are
rebuilt when stale entries outnumber live ones, so memory stays proportional to queued calls.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator

from agentrt_controller.scheduling.call import CallEntry

__all__ = ["LevelQueues", "fcfs_key"]

_Key = tuple[float, ...]


def fcfs_key(call: CallEntry) -> _Key:
    """The default in-level order: entry time, then deadline, then submission order."""
    return (call.level_entered_s, call.facts.deadline_s, call.seq)


class LevelQueues:
    """Queued calls by level (0 = highest). Calls are identified by ``CallEntry.seq``."""

    def __init__(self, levels: int, key: Callable[[CallEntry], _Key] = fcfs_key) -> None:
        self._key = key
        self._heaps: list[list[_Key]] = [[] for _ in range(levels)]
        # seq -> (call, its live key, its live level)
        self._live: dict[int, tuple[CallEntry, _Key, int]] = {}
        # per level: seq -> call (so sweeps over the lower levels skip Q1)
        self._members: list[dict[int, CallEntry]] = [{} for _ in range(levels)]
        self._deadlines: list[tuple[float, int]] = []
        self._heap_entries = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, call: CallEntry) -> bool:
        live = self._live.get(call.seq)
        return live is not None and live[0] is call

    def lengths(self) -> list[int]:
        """Queued calls per level."""
        return [len(members) for members in self._members]

    def push(self, call: CallEntry) -> None:
        """Queue ``call`` at ``call.level`` with its current FCFS key (replaces any old place)."""
        if call.seq in self._live:
            self._forget(call.seq)
        key = self._key(call)
        self._live[call.seq] = (call, key, call.level)
        self._members[call.level][call.seq] = call
        heapq.heappush(self._heaps[call.level], key)
        self._heap_entries += 1
        if not math.isinf(call.facts.deadline_s):
            heapq.heappush(self._deadlines, (call.facts.deadline_s, call.seq))
        self._maybe_compact()

    def pop(self) -> CallEntry | None:
        """Remove and return the first call of the highest non-empty level."""
        for level, heap in enumerate(self._heaps):
            if not self._members[level]:
                continue
            while heap:
                key = heapq.heappop(heap)
                self._heap_entries -= 1
                live = self._live.get(int(key[-1]))
                if live is not None and live[1] == key and live[2] == level:
                    self._forget(int(key[-1]))
                    return live[0]
        return None

    def remove(self, call: CallEntry) -> bool:
        """Take ``call`` out of the queues; ``False`` if it was not queued."""
        if call not in self:
            return False
        self._forget(call.seq)
        self._maybe_compact()
        return True

    def drop_expired(self, now_s: float) -> list[CallEntry]:
        """Remove and return queued calls with ``deadline_s <= now_s``."""
        dropped: list[CallEntry] = []
        while self._deadlines and self._deadlines[0][0] <= now_s:
            deadline, seq = heapq.heappop(self._deadlines)
            live = self._live.get(seq)
            if live is not None and live[0].facts.deadline_s == deadline:
                self._forget(seq)
                dropped.append(live[0])
        return dropped

    def calls(self, min_level: int = 0) -> Iterator[CallEntry]:
        """Queued calls at ``min_level`` or below, in no particular order (a copy: the
        caller may move them)."""
        return iter([c for members in self._members[min_level:] for c in members.values()])

    def ordered(self, level: int) -> list[CallEntry]:
        """Queued calls of one level in pop order."""
        entries = sorted((self._live[seq][1], call) for seq, call in self._members[level].items())
        return [call for _, call in entries]

    def _forget(self, seq: int) -> None:
        _, _, level = self._live.pop(seq)
        del self._members[level][seq]

    def _maybe_compact(self) -> None:
        live = len(self._live)
        if self._heap_entries <= 2 * live + 64 and len(self._deadlines) <= 2 * live + 64:
            return
        self._heaps = [[] for _ in self._heaps]
        self._deadlines = []
        for call, key, level in self._live.values():
            self._heaps[level].append(key)
            if not math.isinf(call.facts.deadline_s):
                self._deadlines.append((call.facts.deadline_s, call.seq))
        for heap in self._heaps:
            heapq.heapify(heap)
        heapq.heapify(self._deadlines)
        self._heap_entries = live
