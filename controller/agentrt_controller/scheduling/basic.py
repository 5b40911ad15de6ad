"""The baseline policies: FCFS scheduling and a fixed in-flight window (the round-robin router
is in :mod:`agentrt_controller.routing.round_robin`)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallEntry


class FcfsScheduler:
    """First come, first served by arrival time; ``requeue`` keeps a call's place.

    Records calls in ``table`` (a private :class:`ProcessTable` when ``None``) like every
    scheduler, so introspection works whatever the policy.
    """

    name = "fcfs"

    def __init__(self, table: ProcessTable | None = None) -> None:
        self.table = table if table is not None else ProcessTable()
        self._heap: list[tuple[float, int, CallEntry]] = []
        self._seq = itertools.count()

    def submit(self, call: CallEntry, now_s: float) -> None:
        self.table.call_arrived(call.facts, now_s)
        call.seq = next(self._seq)
        call.enqueued_s = now_s
        call.level_entered_s = now_s
        heapq.heappush(self._heap, (call.facts.arrival_s, call.seq, call))

    def pop(self, now_s: float) -> CallEntry | None:
        if not self._heap:
            return None
        _, _, call = heapq.heappop(self._heap)
        call.wait_s += now_s - call.enqueued_s
        self.table.call_started(call.facts, now_s)
        return call

    def requeue(self, call: CallEntry, now_s: float) -> None:
        call.enqueued_s = now_s
        heapq.heappush(self._heap, (call.facts.arrival_s, call.seq, call))
        self.table.call_requeued(call.facts, now_s)

    def cancel(self, call: CallEntry, now_s: float) -> bool:
        kept = [entry for entry in self._heap if entry[2] is not call]
        if len(kept) == len(self._heap):
            return False
        self._heap = kept
        heapq.heapify(self._heap)
        call.wait_s += now_s - call.enqueued_s
        self.table.call_dropped(call.facts, now_s)
        return True

    def queued(self) -> int:
        return len(self._heap)

    def backend_priority(self, call: CallEntry) -> int:
        return 0

    def on_tokens(self, call: CallEntry, new_tokens: int, now_s: float) -> None:
        call.quantum_tokens += new_tokens

    def token_counter(self, call: CallEntry) -> Callable[[CallEntry, int, float], None]:
        return self.on_tokens

    def on_finish(self, call: CallEntry, service_s: float, now_s: float) -> None:
        call.service_s += service_s
        self.table.call_finished(call.facts, service_s, now_s)

    def drop_expired(self, now_s: float) -> list[CallEntry]:
        expired = [entry for entry in self._heap if entry[2].facts.deadline_s <= now_s]
        if expired:
            self._heap = [entry for entry in self._heap if entry[2].facts.deadline_s > now_s]
            heapq.heapify(self._heap)
        for entry in expired:
            entry[2].wait_s += now_s - entry[2].enqueued_s
            self.table.call_dropped(entry[2].facts, now_s)
        return [entry[2] for entry in expired]

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        self.table.end(program, now_s)

    def snapshot(self, now_s: float) -> dict[str, object]:
        calls = [entry[2] for entry in sorted(self._heap)]
        return {
            "policy": self.name,
            "queued": len(calls),
            "queues": [
                {
                    "level": 0,
                    "length": len(calls),
                    "calls": [
                        {
                            "call_id": c.facts.call_id,
                            "session_id": c.facts.program.session_id,
                            "program_id": c.facts.program.program_id,
                            "thread_id": c.facts.thread_id,
                            "wait_s": now_s - c.facts.arrival_s,
                        }
                        for c in calls
                    ],
                }
            ],
        }


class FixedWindowAdmission:
    """A backend may hold at most ``window`` of our sequences at once (a call counts its
    ``n``; ``None`` = unlimited)."""

    name = "fixed"

    def __init__(self, window: int | None) -> None:
        if window is not None and window < 1:
            raise ConfigError(f"admission window must be >= 1 or unlimited, got {window}")
        self.window = window

    def has_room(self, backend: BackendView, now_s: float) -> bool:
        return backend.healthy and (self.window is None or backend.in_flight < self.window)

    def answer_fixed_by_view(self, backend: BackendView) -> bool:
        """Always: the answer is a function of the view alone."""
        return True
