"""Combines a scheduler, a router and an admission policy into admission decisions.

Both drivers use it the same way::

    dispatcher.submit(call, now)                       # a call arrived
    for admission in dispatcher.admit(now, backends):  # whenever something changed
        send admission.call to admission.backend_id with admission.backend_priority
    dispatcher.on_tokens(call, n, now)                 # tokens streamed
    dispatcher.on_finish(call, backend_id, service_s, now)

It is pure: no clock, no I/O. ``backends`` is the driver's current view; the dispatcher counts
the calls it admits in this round so one round never overfills a backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from controller.scheduling.api import AdmissionPolicy, BackendView, Call, Router, Scheduler


@dataclass(frozen=True, slots=True)
class Admission:
    """One decision: send ``call`` to ``backend_id`` now."""

    call: Call
    backend_id: str
    #: Value for the backend's ``priority`` field; ``None`` when the backend must not get one.
    backend_priority: int | None


class Dispatcher:
    def __init__(self, scheduler: Scheduler, router: Router, admission: AdmissionPolicy) -> None:
        self.scheduler = scheduler
        self.router = router
        self.admission = admission

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
            admissions.append(Admission(call, backend_id, priority))
        return admissions

    def on_tokens(self, call: Call, new_tokens: int, now_s: float) -> None:
        self.scheduler.on_tokens(call, new_tokens, now_s)

    def on_finish(self, call: Call, backend_id: str, service_s: float, now_s: float) -> None:
        self.scheduler.on_finish(call, service_s, now_s)
        self.router.on_finish(call, backend_id, now_s)

    def drop_expired(self, now_s: float) -> list[Call]:
        return self.scheduler.drop_expired(now_s)

    def on_program_end(self, program_id: str, now_s: float) -> None:
        self.scheduler.on_program_end(program_id, now_s)
        self.router.on_program_end(program_id, now_s)
