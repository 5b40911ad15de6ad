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

import heapq
import itertools
import math
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from types import TracebackType

import anyio
from anyio.abc import TaskStatus

from agentrt_controller.scheduling.call import CallFacts
from agentrt_controller.service.core.clock import Clock, sleep_until
from agentrt_controller.service.errors import DeadlinePassed

__all__ = ["Deadlines"]


class _Watch:
    """One watched exchange: the context manager :meth:`Deadlines.watch` returns (a class, not
    a generator: one per call)."""

    __slots__ = ("call", "deadlines", "expired", "open", "scope")

    def __init__(self, deadlines: Deadlines, call: CallFacts) -> None:
        self.deadlines = deadlines
        self.call = call
        self.scope = anyio.CancelScope()
        #: The exchange is still running (its block has not been left).
        self.open = False
        #: Its deadline cancelled it.
        self.expired = False

    def __enter__(self) -> None:
        self.scope.__enter__()
        deadline_s = self.call.deadline_s
        deadlines = self.deadlines
        heapq.heappush(deadlines._heap, (deadline_s, next(deadlines._order), self))
        self.open = True
        deadlines._open += 1
        if deadline_s < deadlines._sleeping_until and deadlines._sleep is not None:
            deadlines._sleep.cancel()  # the loop sleeps past this deadline: wake it to re-plan

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        deadlines = self.deadlines
        self.open = False
        deadlines._open -= 1
        deadlines._compact()
        scope = self.scope
        swallowed = scope.__exit__(exc_type, exc, traceback)
        if self.expired and scope.cancelled_caught:
            deadlines._on_expired()
            raise DeadlinePassed("the call's deadline passed before its answer was complete")
        return swallowed


class _Unwatched:
    """The context manager of a call without a deadline: nothing to do."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None


_UNWATCHED = _Unwatched()


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

    def watch(self, call: CallFacts) -> AbstractContextManager[None]:
        """Run the block (``with deadlines.watch(call):``) under ``call.deadline_s``: when the
        deadline passes before the block is left, the block is cancelled and
        :class:`DeadlinePassed` (504) raised when it is left. A call without a deadline runs
        unwatched."""
        if math.isinf(call.deadline_s):
            return _UNWATCHED
        return _Watch(self, call)

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
