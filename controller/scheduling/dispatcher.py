"""Combines a scheduler, a router and an admission policy into admission decisions.

Both drivers use it the same way::

    dispatcher.submit(call, now)                       # a call arrived
    for admission in dispatcher.admit(now, backends):  # whenever something changed
        send admission.call to admission.backend_id with admission.backend_priority
    dispatcher.on_tokens(call, n, now)                 # tokens streamed
    dispatcher.on_finish(call, backend_id, service_s, now)
    dispatcher.drop_expired(now) / dispatcher.expire(now)   # periodically

plus program and tool-wait events (``on_program_start``, ``on_tool_wait_start``...), which
only update the process table (:attr:`Dispatcher.table`, shared with the scheduler).

It is pure: no clock, no I/O. ``backends`` is the driver's current view; the dispatcher counts
the calls it admits in this round so one round never overfills a backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from controller.process_table import ProcessTable, ToolWait
from controller.scheduling.api import (
    DEFAULT_SESSION,
    AdmissionPolicy,
    BackendView,
    Call,
    ProgramKey,
    Router,
    Scheduler,
)


@dataclass(frozen=True, slots=True)
class Admission:
    """One decision: send ``call`` to ``backend_id`` now."""

    call: Call
    backend_id: str
    #: Value for the backend's ``priority`` field; ``None`` when the backend must not get one.
    backend_priority: int | None


class Dispatcher:
    """Scheduler + router + admission, and the process table they share."""

    def __init__(self, scheduler: Scheduler, router: Router, admission: AdmissionPolicy) -> None:
        self.scheduler = scheduler
        self.router = router
        self.admission = admission
        #: The process table (the scheduler's): read it for introspection and metrics.
        self.table: ProcessTable = scheduler.table

    def submit(self, call: Call, now_s: float) -> None:
        self.scheduler.submit(call, now_s)

    def admit(self, now_s: float, backends: Sequence[BackendView]) -> list[Admission]:
        """Pop queued calls while some backend has room; route each one."""
        views = {b.backend_id: b for b in backends}
        admissions: list[Admission] = []
        while self.scheduler.queued():
            candidates = [b for b in views.values() if self.admission.has_room(b, now_s)]
            if not candidates:
                break
            call = self.scheduler.pop(now_s)
            if call is None:
                break
            backend_id = self.router.route(call, candidates, now_s)
            chosen = views[backend_id]
            views[backend_id] = replace(chosen, in_flight=chosen.in_flight + 1)
            priority = self.scheduler.backend_priority(call) if chosen.supports_priority else None
            self.table.bind(call, backend_id, now_s)
            admissions.append(Admission(call, backend_id, priority))
        return admissions

    def requeue(self, call: Call, now_s: float) -> None:
        """An admitted call could not be sent (its backend failed before streaming): put it
        back in its place; the next :meth:`admit` may route it elsewhere."""
        self.scheduler.requeue(call, now_s)

    def cancel(self, call: Call, now_s: float) -> bool:
        """A queued call's client went away: forget it. ``False`` if it was not queued (then
        it is running: report it with :meth:`on_finish` and the service it got)."""
        return self.scheduler.cancel(call, now_s)

    def on_tokens(self, call: Call, new_tokens: int, now_s: float) -> None:
        self.scheduler.on_tokens(call, new_tokens, now_s)

    def on_finish(self, call: Call, backend_id: str, service_s: float, now_s: float) -> None:
        self.scheduler.on_finish(call, service_s, now_s)
        self.router.on_finish(call, backend_id, now_s)

    def drop_expired(self, now_s: float) -> list[Call]:
        return self.scheduler.drop_expired(now_s)

    def on_program_start(
        self,
        program_id: str,
        now_s: float,
        *,
        session_id: str = DEFAULT_SESSION,
        name: str = "",
        deadline_s: float = math.inf,
    ) -> None:
        """A program-start event (optional: its first call creates the entry too)."""
        self.table.start((session_id, program_id), now_s, name=name, deadline_s=deadline_s)

    def on_program_end(
        self, program_id: str, now_s: float, session_id: str = DEFAULT_SESSION
    ) -> None:
        self.scheduler.on_program_end(program_id, now_s, session_id)
        self.router.on_program_end(program_id, now_s)

    def on_tool_wait_start(
        self,
        program_id: str,
        now_s: float,
        *,
        thread_id: str,
        node_id: str,
        tool_name: str,
        predicted_duration_s: float | None = None,
        kind: str = "tool",
        session_id: str = DEFAULT_SESSION,
    ) -> ToolWait:
        """The program waits on a tool / a human (BRIEF.md §5); returns the recorded wait,
        which a retention policy may read."""
        return self.table.tool_wait_start(
            (session_id, program_id),
            now_s,
            thread_id=thread_id,
            node_id=node_id,
            tool_name=tool_name,
            predicted_duration_s=predicted_duration_s,
            kind=kind,
        )

    def on_tool_wait_end(
        self,
        program_id: str,
        now_s: float,
        *,
        thread_id: str,
        node_id: str,
        session_id: str = DEFAULT_SESSION,
    ) -> ToolWait | None:
        """The tool wait is over; returns it (``None`` if unknown)."""
        return self.table.tool_wait_end(
            (session_id, program_id), now_s, thread_id=thread_id, node_id=node_id
        )

    def set_retention(
        self, program_id: str, until_s: float | None, session_id: str = DEFAULT_SESSION
    ) -> None:
        """Mark a program's KV as retained until ``until_s`` (``None`` clears): its next call
        enters Q1 while it lasts (``SchedulerConfig.boost_retained``)."""
        self.table.set_retention((session_id, program_id), until_s)

    def expire(self, now_s: float) -> list[ProgramKey]:
        """Remove idle programs from the table (and their router affinity); returns them."""
        removed = self.table.expire(now_s)
        for _, program_id in removed:
            self.router.on_program_end(program_id, now_s)
        return removed

    def snapshot(self, now_s: float) -> dict[str, Any]:
        """JSON-able queues and process table, for introspection."""
        return {
            "scheduler": self.scheduler.snapshot(now_s),
            "process_table": self.table.snapshot(now_s),
        }
