"""The one place the controller enforces a call's deadline.

A call carries one absolute deadline on the core's clock (``CallFacts.deadline_s``, seconds;
``math.inf`` = none), set once when the call is parsed. While the call's exchange runs it is
*watched* here (:meth:`Deadlines.watch`); one loop (:meth:`Deadlines.run`) sleeps on the core's
:data:`~agentrt_controller.service.core.clock.Clock` until the earliest deadline of the watched
calls and then expires what is due (``expire(now_s)`` of the
:class:`~agentrt_controller.service.core.calls.CallQueue`):

* a call still queued leaves the queues — the dispatcher's pure ``drop_expired`` step, the
  same the simulator takes — and its waiting client gets :class:`DeadlinePassed`;
* any other watched call (waiting for its tenant's quota, sent, streaming) has its cancel scope
  cancelled: the upstream request is aborted and the client gets :class:`DeadlinePassed`
  (:meth:`Deadlines.cancel_due`).

Each dispatch round expires what is due first too, so no call is admitted past its deadline
even between two wake-ups of the loop. Nothing here reads anyio's clock, so a fake clock
drives it (tests/controller_service/test_core_fake_clock.py). Event loop thread only.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus

from agentrt_controller.scheduling.call import CallFacts
from agentrt_controller.service.core.clock import Clock, sleep_until
from agentrt_controller.service.errors import DeadlinePassed

__all__ = ["Deadlines"]


@dataclass(eq=False, slots=True)
class _Watch:
    """One watched exchange."""

    call: CallFacts
    scope: anyio.CancelScope = field(repr=False)
    #: The exchange is still running (its block has not been left).
    open: bool = True
    #: Its deadline cancelled it.
    expired: bool = False


class Deadlines:
    """The watched calls by deadline (module docstring). ``on_expired`` counts one call whose
    deadline passed while it was not queued (``deadline_drops``)."""

    def __init__(self, clock: Clock, *, on_expired: Callable[[], None]) -> None:
        self._clock = clock
        self._on_expired = on_expired
        #: ``(deadline_s, order, watch)``; closed watches are dropped lazily.
        self._heap: list[tuple[float, int, _Watch]] = []
        self._order = itertools.count()
        self._open = 0
        #: The loop's current sleep and the moment it sleeps until (``math.inf``: none).
        self._sleep: anyio.CancelScope | None = None
        self._sleeping_until = math.inf

    @contextlib.contextmanager
    def watch(self, call: CallFacts) -> Iterator[None]:
        """Run the block under ``call.deadline_s``: when the deadline passes before the block
        is left, the block is cancelled and :class:`DeadlinePassed` (504) raised here. A call
        without a deadline runs unwatched."""
        deadline_s = call.deadline_s
        if math.isinf(deadline_s):
            yield
            return
        with anyio.CancelScope() as scope:
            watch = _Watch(call, scope)
            heapq.heappush(self._heap, (deadline_s, next(self._order), watch))
            self._open += 1
            if deadline_s < self._sleeping_until and self._sleep is not None:
                self._sleep.cancel()  # the loop sleeps past this deadline: wake it to re-plan
            try:
                yield
            finally:
                watch.open = False
                self._open -= 1
                self._compact()
        if watch.expired and scope.cancelled_caught:
            self._on_expired()
            raise DeadlinePassed("the call's deadline passed before its answer was complete")

    def next_deadline_s(self) -> float:
        """The earliest deadline of a watched call still running (``math.inf``: none)."""
        heap = self._heap
        while heap and not heap[0][2].open:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def cancel_due(self, now_s: float, *, dropped: Collection[str] = ()) -> None:
        """Cancel every watched call whose deadline is ``now_s`` or earlier, except those in
        ``dropped`` (call ids the dispatcher just took out of its queues: their clients hear
        of it through the queue)."""
        heap = self._heap
        while heap and heap[0][0] <= now_s:
            _, _, watch = heapq.heappop(heap)
            if watch.open and watch.call.call_id not in dropped:
                watch.expired = True
                watch.scope.cancel()

    async def run(
        self,
        expire: Callable[[float], None],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Until cancelled: sleep on the clock until the earliest watched deadline (or until
        an earlier one is watched), then ``expire(now_s)``."""
        task_status.started()
        while True:
            target_s = self.next_deadline_s()
            with anyio.CancelScope() as scope:
                self._sleep, self._sleeping_until = scope, target_s
                await sleep_until(self._clock, target_s)
            self._sleep, self._sleeping_until = None, math.inf
            expire(self._clock())

    def _compact(self) -> None:
        """Drop closed watches once they are most of the heap (calls that finished long
        before their deadline would otherwise pile up)."""
        if len(self._heap) > 2 * self._open + 64:
            self._heap = [entry for entry in self._heap if entry[2].open]
            heapq.heapify(self._heap)
