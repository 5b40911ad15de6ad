"""The controller's queued and admitted calls: the :class:`Dispatcher`'s facts and verdicts.

Every admission decision is made by the pure :class:`~agentrt_controller.scheduling.dispatcher.
Dispatcher` (docs/architecture.md, "Design rules", rule 1); this object feeds it facts with
``now_s`` from the engine's clock and carries its verdicts out. It is private to
:class:`~agentrt_controller.service.core.facade.ControllerCore` (the HTTP layer never sees it) and
runs on the event loop's thread. A call's life here::

    submit(call) -> PendingCall           queued in the scheduler; admitted at once when no
                                          other call is queued or in flight, else the
                                          dispatch loop woken
    dispatch()                            one round: expired calls out, admitted calls get a
                                          backend (in flight)
    await admitted(pending) -> Admission  the verdict (or DeadlinePassed, or NoBackend)
    requeue(pending, backend_id, ...)     its backend could not answer: back in the queues
    finish(entry, backend_id, service_s)  in-flight released, service charged, loop woken

A call's deadline is enforced in one place, :meth:`expire` (with
:class:`~agentrt_controller.service.core.deadlines.Deadlines`, which wakes it at the earliest
deadline on the core's clock). In-flight counts move only through
:meth:`BackendPool.acquire` (in :meth:`dispatch`) and :meth:`BackendPool.release` (in
:meth:`requeue` and :meth:`finish`), each by the call's sequences (``CallFacts.sequences``,
at most :meth:`CallQueue.sequence_cap`, checked by :meth:`CallQueue.check_sequences`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_controller.scheduling.dispatcher import Admission, Dispatcher
from agentrt_controller.service.core.answer import BackendAnswer
from agentrt_controller.service.core.clock import Clock
from agentrt_controller.service.core.deadlines import Deadlines
from agentrt_controller.service.core.pool import BackendPool
from agentrt_controller.service.core.tenants import Tenant
from agentrt_controller.service.errors import (
    BadRequest,
    DeadlinePassed,
    ModelUnavailable,
    NoBackend,
    ServiceError,
)
from agentrt_controller.service.telemetry.metrics import ServiceMetrics

__all__ = ["DEFAULT_SEQUENCE_CAP", "CallQueue", "Forwarded", "PendingCall"]

_log = logging.getLogger("agentrt.controller")

#: The sequence cap per call when neither ``max_sequences_per_call`` nor a backend's reported
#: batch size says (vLLM's default ``--max-num-seqs``).
DEFAULT_SEQUENCE_CAP = 256


@dataclass(slots=True, eq=False)
class PendingCall:
    """One call between its arrival and its finish (holds the prompt: not in its repr)."""

    #: The call's facts (final once submitted: the token chain is added before).
    call: CallFacts
    #: The request body (the prompt; retention remembers it for the thread's next wait).
    body: Mapping[str, Any] = field(default_factory=dict, repr=False)
    #: The call carried agentrt tags; an untagged call is a program of its own.
    tagged: bool = True
    #: The authenticated tenant the call is charged to; ``None`` = no quotas apply.
    tenant: Tenant | None = None
    #: The call entered its tenant's in-flight quota (it leaves at the end of the exchange).
    quota_entered: bool = False
    #: The verdict: set by :meth:`decide` (and cleared by a requeue).
    admission: Admission | None = None
    error: ServiceError | None = None
    #: What a client waiting for its verdict waits on; made only when it has to wait (not
    #: when the verdict came before the client asked: :meth:`CallQueue.admitted`). A bare
    #: future, not an ``anyio.Event``: the event costs an async-library lookup and several
    #: frames per call, and the controller runs on asyncio only (uvicorn's loop).
    waiter: asyncio.Future[None] | None = field(default=None, repr=False)
    #: The backend retaining the call's thread context (retention's word when the call
    #: arrived), given to the Dispatcher at submission; ``None`` = not retained.
    retained_backend: str | None = None
    #: The Dispatcher's entry for the call, once submitted (the handle for its events).
    entry: CallEntry | None = None

    def decided(self) -> bool:
        """Whether :attr:`admission` or :attr:`error` is set."""
        return self.admission is not None or self.error is not None

    def decide(self, admission: Admission | None, error: ServiceError | None = None) -> None:
        """Set the verdict (one of the two) and wake the waiting client, if one waits."""
        self.admission = admission
        self.error = error
        waiter = self.waiter
        if waiter is not None and not waiter.done():  # done: its client was cancelled
            waiter.set_result(None)

    def submitted(self) -> CallEntry:
        """:attr:`entry`; raises :class:`RuntimeError` before :meth:`CallQueue.submit`."""
        if self.entry is None:
            raise RuntimeError(f"call {self.call.call_id} was never submitted")
        return self.entry


@dataclass(frozen=True, slots=True)
class Forwarded:
    """A call a backend has started to answer."""

    admission: Admission
    answer: BackendAnswer
    #: Backends that failed the call before this one answered.
    retries: int

    @property
    def backend_id(self) -> str:
        return self.admission.backend_id


class CallQueue:
    """The calls the controller holds. Not thread-safe (event loop only).

    ``wake`` asks for a dispatch round soon; ``on_admitted(facts, backend_id)`` hears of
    every admission that reached its waiting client (retention releases the thread's window
    there; ``None``: nobody listens).
    """

    def __init__(
        self,
        dispatcher: Dispatcher,
        pool: BackendPool,
        metrics: ServiceMetrics,
        clock: Clock,
        *,
        max_queued_calls: int,
        retry_after_s: int,
        wake: Callable[[], None],
        on_admitted: Callable[[CallFacts, str], None] | None = None,
        max_sequences_per_call: int | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.pool = pool
        self.metrics = metrics
        self.clock = clock
        self.max_queued_calls = max_queued_calls
        self.max_sequences_per_call = max_sequences_per_call
        self.retry_after_s = retry_after_s
        self._wake = wake
        self._on_admitted = on_admitted
        self._queued: dict[str, PendingCall] = {}
        #: The calls' deadlines (the one place they are enforced, with :meth:`expire`).
        self.deadlines = Deadlines(clock, on_expired=metrics.deadline_drops.inc)

    def expire(self, now: float) -> None:
        """Every call whose deadline is ``now`` or earlier ends: a queued one leaves the
        queues (the dispatcher's ``drop_expired``) and its client gets
        :class:`DeadlinePassed`; any other watched one is cancelled
        (:meth:`Deadlines.cancel_due`)."""
        dropped: set[str] = set()
        for call in self.dispatcher.drop_expired(now):
            self.metrics.deadline_drops.inc()
            dropped.add(call.facts.call_id)
            self._reject(call, DeadlinePassed("the call's deadline passed while it was queued"))
        self.deadlines.cancel_due(now, dropped=dropped)

    def dispatch(self) -> None:
        """One decision round: expire what is due, admit what the backends have room for."""
        now = self.clock()
        self.expire(now)
        if self._queued and not self.pool.any_healthy():
            for waiting in list(self._queued.values()):
                self._cancel(waiting, now)
                waiting.decide(None, self.no_backend())
            return
        if self._queued:
            self._refuse_models_out(now)
        self._carry_out(self.dispatcher.admit(now, self.pool.views()), now)

    def _carry_out(self, admissions: list[Admission], now: float) -> None:
        """Hand a round's admissions to their waiting clients (in flight from now on)."""
        for admission in admissions:
            self.pool.acquire(admission.backend_id, admission.call.facts.sequences)
            pending = self._queued.pop(admission.call.facts.call_id, None)
            if pending is None:  # its client left between cancel and this round
                self.finish(admission.call, admission.backend_id, 0.0)
                continue
            pending.decide(admission)
            self.metrics.admitted(admission, now)
            if self._on_admitted is not None:
                self._on_admitted(admission.call.facts, admission.backend_id)

    def _refuse_models_out(self, now: float) -> None:
        """Queued calls whose model has no healthy backend left get 503 (they would wait
        for their deadline otherwise; an SDK node with candidates then tries its next
        model). Scans the queue only when some served model is out."""
        out = {m for m in self.pool.known_model_ids() or () if not self.pool.any_healthy(m)}
        if not out:
            return
        for waiting in list(self._queued.values()):
            model = waiting.call.model
            if model in out:
                self._cancel(waiting, now)
                waiting.decide(None, self.no_backend(model))

    def sequence_cap(self) -> int:
        """The most sequences (``n``, ``best_of``) one call may ask for: the configured
        ``max_sequences_per_call``, else the largest batch a backend reports
        (``max_num_seqs``), else :data:`DEFAULT_SEQUENCE_CAP`."""
        if self.max_sequences_per_call is not None:
            return self.max_sequences_per_call
        batch = self.pool.largest_batch()
        return batch if batch is not None else DEFAULT_SEQUENCE_CAP

    def check_sequences(self, call: CallFacts) -> None:
        """Raise :class:`BadRequest` (400, ``param`` ``n``) when ``call`` asks for more
        sequences than :meth:`sequence_cap`: no backend could run them in one batch, and
        each one holds a slot of the window like a call of its own."""
        if call.sequences <= 1:  # every cap is at least 1 (config, probe: >= 1; the default)
            return
        cap = self.sequence_cap()
        if call.sequences > cap:
            raise BadRequest(
                f"the call asks for {call.sequences} sequences ('n' / 'best_of'); this "
                f"controller's cap is {cap} per call (max_sequences_per_call, or the "
                "backends' batch size)",
                param="n",
            )

    def submit(self, pending: PendingCall) -> None:
        """Queue an arrived call; raises :class:`NoBackend` when no backend is healthy or
        ``max_queued_calls`` are already queued.

        A call that arrives at an idle controller — no other call queued, none in flight — is
        decided here, in its own task: the round the dispatch loop would run next holds this
        call alone, so the same ``Dispatcher.admit`` runs now, without the loop's wake-up and
        the future its client would wait on (a sequential client's call: two turns of the
        event loop fewer). Every other arrival wakes the dispatch loop, whose one round decides
        the calls of a turn in the policies' order: under load, a round per call cost more CPU
        than the wake-ups it saves (docs/benchmarks.md, "Where the CPU goes (sampled)")."""
        call = pending.call
        if not self.pool.any_healthy(call.model):
            raise self.no_backend(call.model)
        queued = self._queued
        if len(queued) >= self.max_queued_calls:
            self.metrics.overloaded.inc()
            raise NoBackend(
                f"the controller already holds {len(queued)} queued calls",
                retry_after_s=self.retry_after_s,
                code="overloaded",
            )
        queued[call.call_id] = pending
        now = self.clock()
        pending.entry = self.dispatcher.submit(call, now, retained_backend=pending.retained_backend)
        if len(queued) == 1 and not self.pool.calls_in_flight and call.deadline_s > now:
            # :meth:`dispatch`'s round for this one call: its model has a healthy backend
            # (checked above) and no other call waits whose deadline or model it would check.
            try:
                self._carry_out(self.dispatcher.admit(now, self.pool.views()), now)
            except Exception:  # as in the dispatch loop: a policy bug must not fail the call
                self.metrics.internal_errors.inc()
                _log.exception("dispatch round failed")
            if pending.admission is not None:
                return
        self._wake()

    async def admitted(self, pending: PendingCall) -> Admission:
        """Wait for the call's admission. Raises :class:`DeadlinePassed` when :meth:`expire`
        dropped it, :class:`NoBackend` when every backend went down. If the waiting task is
        cancelled (client gone, deadline), the call leaves the queues — or, if it was just
        admitted, its slot is released."""
        if not pending.decided():
            loop = self.pool.loop or asyncio.get_running_loop()  # the core's, cached
            pending.waiter = waiter = loop.create_future()
            try:
                await waiter
            except BaseException:
                self._abandon(pending)
                raise
        if pending.admission is not None:
            return pending.admission
        assert pending.error is not None  # decided: admitted or refused
        raise pending.error

    def _abandon(self, pending: PendingCall) -> None:
        """The client waiting for ``pending``'s verdict went away: the call leaves the queues,
        or, if it was just admitted, its slot is released."""
        if pending.admission is not None:
            self.finish(pending.admission.call, pending.admission.backend_id, 0.0)
        else:
            self._cancel(pending, self.clock())

    def requeue(
        self, pending: PendingCall, backend_id: str, backend_down: bool, reason: str
    ) -> None:
        """The admitted call could not be answered by ``backend_id`` and nothing reached the
        client: put it back in the queues at its old place. The failure counts against the
        backend's circuit; ``backend_down`` trips it (out of routing at once). Raises
        :class:`NoBackend` (the call finished) when no backend is left."""
        entry = pending.submitted()
        now = self.clock()
        self.metrics.backend_failures.inc(1.0, backend_id)
        if backend_down:
            self.pool.mark_down(backend_id, reason or "unreachable")
        else:
            self.pool.record_outcome(backend_id, False, reason or "no answer")
        self.pool.release(backend_id, entry.facts.sequences)
        if not self.pool.any_healthy(entry.facts.model):
            self.dispatcher.on_finish(entry, backend_id, 0.0, now)
            raise self.no_backend(entry.facts.model)
        pending.admission = None
        pending.waiter = None
        self._queued[pending.call.call_id] = pending
        self.dispatcher.requeue(entry, now)
        self.metrics.retries.inc(1.0, backend_id)
        self._wake()

    def tokens(self, call: CallEntry, new_tokens: int) -> None:
        """Output tokens streamed for an admitted call (quantum accounting)."""
        if new_tokens:
            self.dispatcher.on_tokens(call, new_tokens, self.clock())

    def finish(
        self,
        call: CallEntry,
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
        self.pool.release(backend_id, call.facts.sequences)
        self.dispatcher.on_finish(call, backend_id, service_s, self.clock())
        self.metrics.service_charged.inc(service_s)
        if self._queued:  # room for a queued call; with none queued a round has nothing to do
            self._wake()

    def queued(self) -> int:
        """Calls waiting for admission now."""
        return len(self._queued)

    def no_backend(self, model: str | None = None) -> NoBackend:
        """The 503 for "no healthy backend" — of ``model`` when given (counted)."""
        self.metrics.no_backend.inc()
        if model is not None and self.pool.any_healthy():
            return ModelUnavailable(model)
        return NoBackend("no healthy backend is available", retry_after_s=self.retry_after_s)

    def _cancel(self, pending: PendingCall, now: float) -> None:
        if self._queued.pop(pending.call.call_id, None) is not None:
            self.dispatcher.cancel(pending.submitted(), now)

    def _reject(self, call: CallEntry, error: ServiceError) -> None:
        pending = self._queued.pop(call.facts.call_id, None)
        if pending is not None and not pending.decided():
            pending.decide(None, error)
