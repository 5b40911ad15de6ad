"""The prefix index's program counts as they were before they were kept in runs: per element,
every routed call's whole head walked, a change of program counting one, the least recently
counted forgotten first past a capacity. The reference the run-kept counts are compared with
(``test_prefix_index_runs.py``, ``test_decision_equivalence.py``)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.prefix_index import SHARED_HEAD_BLOCKS


class PerElementCounts:
    """Element -> (programs that used it, the last of them), at most ``capacity`` elements."""

    def __init__(self, capacity: float = math.inf) -> None:
        self.capacity = capacity
        self.counts: OrderedDict[int, tuple[int, ProgramKey]] = OrderedDict()

    def note(self, program: ProgramKey, hashes: Sequence[int]) -> None:
        counts = self.counts
        for h in hashes[:SHARED_HEAD_BLOCKS]:
            seen = counts.get(h)
            if seen is None:
                counts[h] = (1, program)
            elif seen[1] != program:
                counts[h] = (seen[0] + 1, program)
                counts.move_to_end(h)
        while len(counts) > self.capacity:
            counts.popitem(last=False)

    def shared(self, hashes: Sequence[int], programs: int) -> int:
        count = 0
        for h in hashes[:SHARED_HEAD_BLOCKS]:
            seen = self.counts.get(h)
            if seen is None or seen[0] < programs:
                break
            count += 1
        return count
