"""The controller's engine room: queued calls, the dispatch loop and the probe loop.

Every admission decision is made by the pure :class:`~agentrt_controller.scheduling.dispatcher.
Dispatcher` (STYLE.md rule 1); this module only feeds it facts with ``now_s`` from one
monotonic clock and carries its decisions out. All methods run on the event loop's thread;
the two loops run in the task group of the app's lifespan (:meth:`ControllerCore.run`).

A call's life here::

    submit(call) -> PendingCall          queued in the scheduler, dispatch loop woken
    await admitted(pending) -> Admission  the dispatch loop chose a backend (or the deadline
                                          passed: DeadlinePassed; or no backend: NoBackend)
    ... the proxy forwards it ...
    finish(call, backend_id, service_s)   in-flight released, service charged, loop woken
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus

from agentrt_controller.backends.api import Backend
from agentrt_controller.backends.breaker import BreakerConfig
from agentrt_controller.scheduling.api import Call
from agentrt_controller.scheduling.dispatcher import Admission, Dispatcher
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.errors import DeadlinePassed, NoBackend, ServiceError
from agentrt_controller.service.metrics import ServiceMetrics
from agentrt_controller.service.pool import BackendPool
from agentrt_controller.service.retention import RetentionDriver

__all__ = ["ControllerCore", "PendingCall"]

_log = logging.getLogger("agentrt.controller")


@dataclass(slots=True, eq=False)
class PendingCall:
    """A call waiting for the dispatch loop's verdict."""

    call: Call
    #: Set once :attr:`admission` or :attr:`error` is.
    decided: anyio.Event = field(default_factory=anyio.Event)
    admission: Admission | None = None
    error: ServiceError | None = None


class ControllerCore:
    """Drives one :class:`Dispatcher` for the service. Not thread-safe (event loop only)."""

    def __init__(
        self,
        config: ControllerConfig,
        dispatcher: Dispatcher,
        backends: list[Backend],
        metrics: ServiceMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.clock = clock
        self.pool = BackendPool(
            backends,
            self.wake,
            clock,
            interval_s=config.scrape_interval_s,
            breaker=BreakerConfig.from_mapping(dict(config.breaker)),
            on_error=metrics.internal_errors.inc,
        )
        self._queued: dict[str, PendingCall] = {}
        self._wake_event = anyio.Event()
        #: KV retention during tool waits (``config.retention = "on"``); ``None`` = off.
        self.retention: RetentionDriver | None = None

    # --- the loops ---------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Dispatch, probe backends (each in its own loop, :class:`BackendPool`) and expire idle
        programs until cancelled (the app's lifespan owns this task). Reports started after
        the first probe of every backend (health, load, models)."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._dispatch_loop)
            if self.retention is not None:
                await group.start(self.retention.run)
            await group.start(self.pool.run)
            self.expire_programs()
            group.start_soon(self._expiry_loop)
            task_status.started()

    def wake(self) -> None:
        """Something changed (arrival, finish, scrape): run the dispatcher soon."""
        self._wake_event.set()

    async def _dispatch_loop(self) -> None:
        while True:
            await self._wake_event.wait()
            self._wake_event = anyio.Event()
            try:
                self.dispatch()
            except Exception:  # a policy bug must not stop the service: log it, go on
                self.metrics.internal_errors.inc()
                _log.exception("dispatch round failed")

    async def _expiry_loop(self) -> None:
        while True:
            await anyio.sleep(self.config.scrape_interval_s)
            try:
                self.expire_programs()
            except Exception:
                self.metrics.internal_errors.inc()
                _log.exception("program expiry round failed")

    def dispatch(self) -> None:
        """One decision round: drop expired calls, admit what the backends have room for."""
        now = self.clock()
        for call in self.dispatcher.drop_expired(now):
            self.metrics.deadline_drops.inc()
            self._reject(call, DeadlinePassed("the call's deadline passed while it was queued"))
        if self._queued and not self.pool.any_healthy():
            for waiting in list(self._queued.values()):
                self._cancel(waiting, now)
                waiting.error = self._no_backend()
                waiting.decided.set()
            return
        for admission in self.dispatcher.admit(now, self.pool.views()):
            state = self.pool.states[admission.backend_id]
            state.in_flight += 1
            state.admitted_total += 1
            pending = self._queued.pop(admission.call.call_id, None)
            if pending is None:  # its client left between cancel and this round
                self.finish(admission.call, admission.backend_id, 0.0)
                continue
            pending.admission = admission
            pending.decided.set()
            self.metrics.admitted(admission, now)
            if self.retention is not None:
                self.retention.on_admitted(admission.call, admission.backend_id)

    # --- one call ----------------------------------------------------------------------------

    def submit(self, call: Call) -> PendingCall:
        """Queue an arrived call; raises :class:`NoBackend` when no backend is healthy or
        ``max_queued_calls`` are already queued."""
        if not self.pool.any_healthy():
            raise self._no_backend()
        if len(self._queued) >= self.config.max_queued_calls:
            self.metrics.overloaded.inc()
            raise NoBackend(
                f"the controller already holds {len(self._queued)} queued calls",
                retry_after_s=self.config.retry_after_s,
                code="overloaded",
            )
        pending = PendingCall(call)
        self._queued[call.call_id] = pending
        self.dispatcher.submit(call, self.clock())
        self.wake()
        return pending

    async def admitted(self, pending: PendingCall) -> Admission:
        """Wait for the call's admission. Raises :class:`DeadlinePassed` at its deadline,
        :class:`NoBackend` when every backend went down. If the waiting task is cancelled
        (client gone), the call leaves the queues — or, if it was just admitted, its slot is
        released."""
        call = pending.call
        try:
            if math.isinf(call.deadline_s):
                await pending.decided.wait()
            else:
                with anyio.move_on_after(call.deadline_s - self.clock()):
                    await pending.decided.wait()
        except BaseException:
            if pending.admission is not None:
                self.finish(call, pending.admission.backend_id, 0.0)
            else:
                self._cancel(pending, self.clock())
            raise
        if pending.admission is not None:
            return pending.admission
        if pending.error is not None:
            raise pending.error
        self._cancel(pending, self.clock())
        self.metrics.deadline_drops.inc()
        raise DeadlinePassed("the call's deadline passed while it was queued")

    def retry(
        self, pending: PendingCall, backend_id: str, backend_down: bool, reason: str = ""
    ) -> None:
        """The admitted call could not be answered by ``backend_id`` and nothing reached the
        client: put it back in the queues at its old place. The failure counts against the
        backend's circuit; ``backend_down`` trips it (out of routing at once)."""
        call = pending.call
        now = self.clock()
        self.metrics.backend_failures.inc(1.0, backend_id)
        if backend_down:
            self.pool.mark_down(backend_id, reason or "unreachable")
        else:
            self.pool.record_outcome(backend_id, False, reason or "no answer")
        self.pool.release(backend_id)
        if not self.pool.any_healthy():
            self.dispatcher.on_finish(call, backend_id, 0.0, now)
            raise self._no_backend()
        pending.admission = None
        pending.decided = anyio.Event()
        self._queued[call.call_id] = pending
        self.dispatcher.requeue(call, now)
        self.metrics.retries.inc(1.0, backend_id)
        self.wake()

    def tokens(self, call: Call, new_tokens: int) -> None:
        """Output tokens streamed for an admitted call (quantum accounting)."""
        if new_tokens:
            self.dispatcher.on_tokens(call, new_tokens, self.clock())

    def finish(
        self,
        call: Call,
        backend_id: str,
        service_s: float,
        *,
        ok: bool | None = None,
        reason: str = "",
    ) -> None:
        """The admitted call is done (answered, failed or abandoned); charge ``service_s``.
        ``ok`` feeds the backend's circuit breaker: ``True`` it answered, ``False`` it failed
        (broken connection, 5xx, timeout), ``None`` no verdict (client gone, deadline)."""
        if ok is not None:
            if not ok:
                self.metrics.backend_failures.inc(1.0, backend_id)
            self.pool.record_outcome(backend_id, ok, reason)
        self.pool.release(backend_id)
        self.dispatcher.on_finish(call, backend_id, service_s, self.clock())
        self.metrics.service_charged.inc(service_s)
        self.wake()

    # --- programs ----------------------------------------------------------------------------

    def end_program(self, session_id: str, program_id: str) -> None:
        self.dispatcher.on_program_end(program_id, self.clock(), session_id)
        if self.retention is not None:
            self.retention.on_program_end(program_id, session_id)

    def expire_programs(self) -> None:
        for session_id, program_id in self.dispatcher.expire(self.clock()):
            if self.retention is not None:
                self.retention.on_program_end(program_id, session_id)

    # --- internals ---------------------------------------------------------------------------

    def _cancel(self, pending: PendingCall, now: float) -> None:
        if self._queued.pop(pending.call.call_id, None) is not None:
            self.dispatcher.cancel(pending.call, now)

    def _reject(self, call: Call, error: ServiceError) -> None:
        pending = self._queued.pop(call.call_id, None)
        if pending is not None and not pending.decided.is_set():
            pending.error = error
            pending.decided.set()

    def _no_backend(self) -> NoBackend:
        self.metrics.no_backend.inc()
        return NoBackend("no healthy backend is available", retry_after_s=self.config.retry_after_s)

    def queued(self) -> int:
        return len(self._queued)
