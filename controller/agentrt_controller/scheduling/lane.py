"""The retained lane: a FIFO for calls of retained programs, served before a scheduler's own
order (docs/scheduling.md, "The retained lane"; docs/routing.md, "KV retention").

A call whose program's KV is retained when it arrives (it comes back from a tool within the
TTL) is cheap now and expensive later: :class:`RetainedLane` wraps a scheduler and pops such
calls (``CallEntry.lane == "retained"``, set by the Dispatcher at submission) first, in
arrival order, before the wrapped policy's next call. Both queues record in the wrapped
policy's process table, so the program's attained service, waiting time and critical path are
kept exactly as if the policy had queued the call.

Where the lane sits decides whom a retained call may overtake:

* with a bare scheduler (one tenant, or fair shares off) the Dispatcher wraps the scheduler:
  a retained call overtakes every queued call;
* under fair shares each tenant's inner policy is wrapped
  (:class:`~agentrt_controller.scheduling.tenancy.TenantFairScheduler`): the fair-share order
  picks the tenant first, and a retained call overtakes only its own tenant's calls. It is
  popped, charged (estimate, then its service) and capped like any call of its tenant — the
  lane is inside the accounting, never around it.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.api import Scheduler
from agentrt_controller.scheduling.basic import FcfsScheduler
from agentrt_controller.scheduling.call import CallEntry

__all__ = ["RetainedLane"]


class RetainedLane:
    """``policy`` plus a FIFO lane served first (module docstring). Implements
    :class:`~agentrt_controller.scheduling.api.Scheduler`."""

    def __init__(self, policy: Scheduler) -> None:
        #: The wrapped policy (it orders every call that is not retained).
        self.policy = policy
        self.name = policy.name
        self.table = policy.table
        self._lane = FcfsScheduler(policy.table)

    def _queue_of(self, call: CallEntry) -> Scheduler:
        return self._lane if call.lane == "retained" else self.policy

    def retained_queued(self) -> int:
        """Calls waiting in the lane."""
        return self._lane.queued()

    # --- Scheduler protocol -----------------------------------------------------------------

    def submit(self, call: CallEntry, now_s: float) -> None:
        self._queue_of(call).submit(call, now_s)

    def pop(self, now_s: float) -> CallEntry | None:
        if self._lane.queued():
            return self._lane.pop(now_s)
        return self.policy.pop(now_s)

    def requeue(self, call: CallEntry, now_s: float) -> None:
        self._queue_of(call).requeue(call, now_s)

    def cancel(self, call: CallEntry, now_s: float) -> bool:
        return self._queue_of(call).cancel(call, now_s)

    def queued(self) -> int:
        return self._lane.queued() + self.policy.queued()

    def backend_priority(self, call: CallEntry) -> int:
        """0 (the first level) for a lane call; the policy's priority for the others."""
        return self._queue_of(call).backend_priority(call)

    def on_tokens(self, call: CallEntry, new_tokens: int, now_s: float) -> None:
        self._queue_of(call).on_tokens(call, new_tokens, now_s)

    def token_counter(self, call: CallEntry) -> Callable[[CallEntry, int, float], None]:
        return self._queue_of(call).token_counter(call)

    def on_finish(self, call: CallEntry, service_s: float, now_s: float) -> None:
        self._queue_of(call).on_finish(call, service_s, now_s)

    def drop_expired(self, now_s: float) -> list[CallEntry]:
        dropped = self.policy.drop_expired(now_s)
        if self._lane.queued():
            dropped += self._lane.drop_expired(now_s)
        return dropped

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        self.policy.on_program_end(program, now_s)

    def snapshot(self, now_s: float) -> dict[str, object]:
        """The policy's snapshot (the lane's calls are counted by the Dispatcher's)."""
        return self.policy.snapshot(now_s)
