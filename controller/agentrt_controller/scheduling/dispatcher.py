"""Combines a scheduler, a router and an admission policy into admission decisions.

Both drivers use it the same way::

    entry = dispatcher.submit(facts, now)              # a call arrived (its CallFacts)
    for admission in dispatcher.admit(now, backends):  # whenever something changed
        send admission.call to admission.backend_id with admission.backend_priority
    dispatcher.on_tokens(entry, n, now)                # tokens streamed
    dispatcher.on_finish(entry, backend_id, service_s, now)
    dispatcher.drop_expired(now) / dispatcher.expire(now)   # periodically

plus program and tool-wait events (``on_program_start``, ``on_tool_wait_start``...), which
only update the process table (:attr:`Dispatcher.table`, shared with the scheduler).

It is pure: no clock, no I/O. ``backends`` is the driver's current view; the dispatcher counts
the calls it admits in this round so one round never overfills a backend.

**Sequences, not calls** (docs/controller.md, "Sequences, not calls"). A view's ``in_flight``
counts sequences and a call adds its ``CallFacts.sequences`` (its ``n``; 1 in the simulator).
A call of several sequences is admitted where they all fit the window, or where the backend is
idle; when no backend can take it, it goes back to its place at the head of the queues and the
round ends, so smaller calls behind it do not overtake it for ever.

**Retained lane** (docs/scheduling.md; docs/routing.md, "KV retention"). A call whose
program's KV is retained when it arrives (``set_retention``, i.e. it comes back from a tool
within the TTL) is marked ``CallEntry.lane = "retained"`` and skips its policy's order: it
waits in a FIFO lane (:class:`~agentrt_controller.scheduling.lane.RetainedLane`) served before
the policy, whatever the policy is (its context is hot and cheap now; delaying it is what makes
it expensive). The lane is *inside* the scheduler's accounting, never around it: with a bare
scheduler the Dispatcher wraps it (one tenant: the call overtakes every queued call); under
fair shares each tenant's inner policy has its own lane, so the fair-share order picks the
tenant first and the call overtakes only its own tenant's calls, is charged to its tenant's
share and counted by the per-tenant caps like any call (docs/tenancy.md, "The retained lane").
The lane shares the process table, so the program's attained service, waiting time and
critical path are kept exactly as if the policy had queued the call. A call submitted with a
``retained_backend`` goes to that backend when it is a candidate (has room), whatever the
router; otherwise the router chooses (failover).

**Per-tenant in-flight caps** (docs/tenancy.md, "Isolation of the batch"). When the scheduler
is a :class:`~agentrt_controller.scheduling.tenancy.TenantFairScheduler` with isolation on, a
tenant above its share of a backend's contended window while another tenant is active is not
admitted there (:class:`~agentrt_controller.scheduling.isolation.TenantIsolation`): each round
the Dispatcher pops only from tenants some candidate backend allows, and routes the call among
the backends that allow its tenant. Retained-lane calls are counted and held like any.

**Memory** (docs/scheduling.md, "Admission under memory pressure"). With a
:class:`~agentrt_controller.scheduling.memory.MemoryAdmission`, a call goes only to a backend
whose KV memory holds its prefill without evicting the resident programs' contexts or a pinned
one. A call that fits nowhere is passed over and keeps its place in the queues; the round goes
on with the calls behind it (mostly the resident programs' calls: their context is on the
engine), but starts no other program that has invested less (its program's attained service;
an anti-starvation promotion first) before it. Fair shares are untouched: every call still
leaves through the scheduler's (the tenants') order, and a passed-over call is put back with
its charge returned. Under memory pressure a backend that honours priorities gets the
memory priority (the program's resident KV) instead of the scheduler's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agentrt_controller.keys import ProgramKey
from agentrt_controller.process_table import ProcessTable, ToolWait
from agentrt_controller.routing.api import Router
from agentrt_controller.routing.filters import ModelDemand
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission
from agentrt_controller.scheduling.api import AdmissionPolicy, BackendView, Scheduler
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_controller.scheduling.candidates import CandidateSet
from agentrt_controller.scheduling.isolation import TenantIsolation
from agentrt_controller.scheduling.lane import RetainedLane
from agentrt_controller.scheduling.memory import MemoryAdmission
from agentrt_controller.scheduling.tenancy import TenantFairScheduler, tenant_of


@dataclass(frozen=True, slots=True)
class Admission:
    """One decision: send ``call`` to ``backend_id`` now."""

    #: The admitted call (the entry :meth:`Dispatcher.submit` returned).
    call: CallEntry
    backend_id: str
    #: Value for the backend's ``priority`` field; ``None`` when the backend must not get one.
    backend_priority: int | None


class Dispatcher:
    """Scheduler + router + admission, and the process table they share."""

    def __init__(
        self,
        scheduler: Scheduler,
        router: Router,
        admission: AdmissionPolicy,
        *,
        retained_lane: bool = True,
        memory: MemoryAdmission | None = None,
    ) -> None:
        """``retained_lane``: serve calls of retained programs first (module docstring);
        it only matters while something calls :meth:`set_retention`. ``memory``: admit only
        what the backends' KV memory holds (module docstring); ``None`` = no such rule."""
        self.scheduler = scheduler
        self.router = router
        self.admission = admission
        #: The memory-aware admission rule, or ``None``.
        self.memory = memory
        #: The process table (the scheduler's): read it for introspection and metrics.
        self.table: ProcessTable = scheduler.table
        #: Whether retained programs' calls enter the retained lane.
        self.retained_lane = retained_lane
        #: Where calls wait: the scheduler itself when it keeps the lanes (fair shares: one per
        #: tenant) or there is no lane, else the scheduler behind the Dispatcher's lane.
        self.queues: Scheduler = scheduler
        if retained_lane and not isinstance(scheduler, TenantFairScheduler):
            self.queues = RetainedLane(scheduler)
        #: Calls that entered the retained lane so far.
        self.lane_total = 0
        #: The tenancy scheduler when it caps tenants' calls in flight, else ``None``.
        self._fair: TenantFairScheduler | None = None
        #: Its isolation policy (the caps), else ``None``.
        self.isolation: TenantIsolation | None = None
        if isinstance(scheduler, TenantFairScheduler) and scheduler.isolation is not None:
            self._fair, self.isolation = scheduler, scheduler.isolation
        #: Per backend: the view the admission policy was last asked about, and its answer,
        #: while that answer cannot change until the backend's view does (:meth:`_room_of`).
        self._asked: dict[str, tuple[BackendView, bool]] = {}
        #: Queued calls per model: a round stops when none could go where there is room.
        self._demand = ModelDemand()

    def submit(
        self, facts: CallFacts, now_s: float, *, retained_backend: str | None = None
    ) -> CallEntry:
        """A call arrived: queue it and return its entry, the handle the driver passes back
        (:meth:`on_tokens`, :meth:`on_finish`, :meth:`requeue`, :meth:`cancel`).
        ``retained_backend``: the backend that retains the call's KV (the driver's retention
        says so), ``None`` = not retained."""
        call = CallEntry(facts, retained_backend=retained_backend)
        if self.isolation is not None:
            self.isolation.on_submit(tenant_of(call), now_s)
        if self.retained_lane:  # the program's KV is retained now: the retained lane
            entry = self.table.get(facts.program)
            until = entry.retained_until_s if entry is not None else None
            if until is not None and until >= now_s:
                call.lane = "retained"
                self.lane_total += 1
        self.queues.submit(call, now_s)
        self._demand.add(facts.model)
        return call

    def queued(self) -> int:
        """Calls waiting for admission (the scheduler's queues and the retained lanes)."""
        return self.queues.queued()

    def retained_queued(self) -> int:
        """Calls waiting in the retained lane (all tenants' lanes)."""
        queues = self.queues
        if isinstance(queues, RetainedLane | TenantFairScheduler):
            return queues.retained_queued()
        return 0

    def admit(self, now_s: float, backends: Sequence[BackendView]) -> list[Admission]:
        """Pop queued calls (in the scheduler's order; the retained lane first within its
        tenant) while some backend has room; route each one. ``backends``: one view per
        backend id. A driver that passes the same view object again for a backend where
        nothing changed saves asking the admission policy about it again
        (:meth:`_room_of`)."""
        admissions: list[Admission] = []
        # The backends with room, in ``backends`` order. Asked once per backend (not even that
        # for a view object asked about before, when its answer cannot have changed); after
        # that only the backend that got the last call changed, so only it is asked again (an
        # admission policy answers the same for the same view at the same ``now_s``: it reacts
        # once per metrics sample) — O(backends) per round, not per admitted call. The router
        # sees the set change one backend at a time (a router may keep state derived from it).
        # The round's last call changes nothing more: no call is left to place, so its
        # backend's new view is not made and the admission policy is not asked about it (the
        # usual round at low load admits one call). The memo then keeps the view asked last
        # (an admission policy answers the same for it), as :meth:`_room_of` requires.
        room: CandidateSet | None = None
        # Calls no candidate of their model can take this round (the router's ``eligible``):
        # put back at their places when the round ends, so calls of other models behind them
        # are admitted meanwhile (docs/routing.md, "Several models").
        waiting_for_model: list[CallEntry] = []
        blocked: set[str | None] = set()
        memory = self.memory
        #: Calls passed over this round (they did not fit in memory): put back at the end.
        passed: list[CallEntry] = []
        #: The most invested program start passed over this round (none may overtake it).
        blocked_start: tuple[int, float] | None = None
        queues = self.queues
        # The calls queued, counted down rather than asked again each turn: a turn pops one
        # call, and nothing enters the queues during a round (what it puts back, it puts back
        # when it ends, or as it stops).
        left = queues.queued()
        while left:
            if room is None:
                room = CandidateSet(self._with_room(backends, now_s))
            if not room or not self._demand.any_servable(room, blocked):
                break
            candidates: Sequence[BackendView] = room
            if self._fair is not None:
                call, candidates = self._pop_capped(now_s, candidates)
            else:
                call = queues.pop(now_s)
            if call is None:
                break
            left -= 1
            candidates = self.router.eligible(call, candidates, now_s)
            if candidates is not room and not candidates:  # the round's set is not empty
                waiting_for_model.append(call)
                blocked.add(call.facts.model)  # the room only shrinks: for the whole round
                continue
            if call.facts.sequences > 1:
                fitting = [b for b in candidates if self._fits(b, call.facts.sequences, now_s)]
                if not fitting:  # it keeps its place at the head until a backend has room
                    self.queues.requeue(call, now_s)
                    break
                candidates = fitting
            if memory is not None:
                in_memory, blocked_start = self._fitting_memory(
                    memory, call, candidates, blocked_start, now_s
                )
                if not in_memory:
                    passed.append(call)
                    memory.held_total += 1
                    if len(passed) >= memory.config.max_passed:
                        break
                    continue
                candidates = in_memory
            retained = call.retained_backend
            held = [b for b in candidates if b.backend_id == retained] if retained else []
            backend_id = self.router.route(call, held or candidates, now_s)
            chosen = room.get(backend_id)
            if chosen is None:
                raise ValueError(f"router {self.router.name!r} chose {backend_id!r}, no candidate")
            priority = self._priority(call, chosen, now_s)
            self.table.bind(call.facts, backend_id, now_s)
            if memory is not None:
                call.context = memory.on_admit(call.facts, chosen, now_s)
            if self.isolation is not None:
                self.isolation.on_admit(call.facts.call_id, tenant_of(call), backend_id, now_s)
            admissions.append(Admission(call, backend_id, priority))
            self._demand.remove(call.facts.model)
            if left:  # another call may go this round: the chosen backend's room changed
                updated = chosen.with_in_flight(chosen.in_flight + call.facts.sequences)
                if self._room_of(updated, now_s):
                    room.update(updated)
                else:
                    room.remove(backend_id)
        for call in waiting_for_model:  # in pop order: each keeps its place
            self.queues.requeue(call, now_s)
        for call in passed:
            self.queues.requeue(call, now_s)
        return admissions

    def _fitting_memory(
        self,
        memory: MemoryAdmission,
        call: CallEntry,
        candidates: Sequence[BackendView],
        blocked: tuple[int, float] | None,
        now_s: float,
    ) -> tuple[Sequence[BackendView], tuple[int, float] | None]:
        """The candidates whose memory takes ``call`` (none when it is a long program start
        that must not overtake the most invested one held this round, ``blocked``), and
        ``blocked`` updated when the call is such a start and is held.

        ``candidates`` itself when every one fits (a round's
        :class:`~agentrt_controller.scheduling.candidates.CandidateSet` stays one for the
        router). A call that fits somewhere while no start is held goes whether or not it is a
        long start, so the start is not asked about then (the usual case: no pressure)."""
        fitting: list[BackendView] = []
        some_full = False
        for view in candidates:
            if memory.fits(call.facts, view, now_s):
                fitting.append(view)
            else:
                some_full = True
        if fitting and blocked is None:
            return (fitting if some_full else candidates), None
        if not memory.is_long_start(call.facts, candidates, now_s):
            return fitting, blocked
        key = memory.invested_key(call, self._attained_s(call))
        if fitting and (blocked is None or key > blocked):
            return fitting, blocked
        return [], key if blocked is None else max(blocked, key)

    def _priority(self, call: CallEntry, chosen: BackendView, now_s: float) -> int | None:
        """The ``priority`` for ``chosen`` (``None`` when it takes none): the memory priority
        while the backend is under memory pressure, else the scheduler's."""
        if not chosen.supports_priority:
            return None
        memory = self.memory
        if memory is not None and memory.under_pressure(chosen, now_s):
            return memory.backend_priority(call.facts, chosen.backend_id, now_s)
        return self.queues.backend_priority(call)

    def _attained_s(self, call: CallEntry) -> float:
        entry = self.table.get(call.facts.program)
        return entry.attained_service_s if entry is not None else 0.0

    def _with_room(self, backends: Sequence[BackendView], now_s: float) -> list[BackendView]:
        """The backends the admission policy gives room, in ``backends`` order
        (:meth:`_room_of` for each, inlined: this loop is O(backends) per admit)."""
        asked, room_of = self._asked, self._room_of
        out = []
        for view in backends:
            memo = asked.get(view.backend_id)
            if memo is not None and memo[0] is view:
                if memo[1]:
                    out.append(view)
            elif room_of(view, now_s):
                out.append(view)
        if len(asked) > 2 * len(backends) + 16:  # backends the driver no longer has
            current = {view.backend_id for view in backends}
            for backend_id in [b for b in asked if b not in current]:
                del asked[backend_id]
        return out

    def _room_of(self, view: BackendView, now_s: float) -> bool:
        """``admission.has_room(view, now_s)``, remembered while the answer cannot change:
        the admission policy is asked again about a backend only when its view is another
        object, or when the policy says its answer for this view may change
        (``AdmissionPolicy.answer_fixed_by_view``). Exact because every ``has_room`` call goes
        through here and the memo keeps the last view asked."""
        admission = self.admission
        answer = admission.has_room(view, now_s)
        if admission.answer_fixed_by_view(view):
            self._asked[view.backend_id] = (view, answer)
        else:
            self._asked.pop(view.backend_id, None)
        return answer

    def _fits(self, view: BackendView, sequences: int, now_s: float) -> bool:
        """Whether a call of ``sequences`` sequences fits in ``view``'s window: the backend
        would still have room after ``sequences - 1`` more (it then takes the last one), or
        it is idle — a call larger than the window alone runs by itself, never waits forever.
        The admission policy is asked about a view that is not the backend's (not memoized);
        its sample was acted on already when ``view`` got into the round's candidates."""
        if view.in_flight == 0:
            return True
        bigger = view.with_in_flight(view.in_flight + sequences - 1)
        return self.admission.has_room(bigger, now_s)

    def _pop_capped(
        self, now_s: float, candidates: Sequence[BackendView]
    ) -> tuple[CallEntry | None, Sequence[BackendView]]:
        """The tenancy scheduler's next call among the tenants some candidate allows
        (per-tenant caps), and the candidates that allow its tenant."""
        assert self._fair is not None and self.isolation is not None
        isolation = self.isolation
        queued = self._fair.queued_by_tenant()
        isolation.observe(now_s, queued)
        allowed: dict[str, list[BackendView]] = {}
        for tenant in queued:
            allowed[tenant] = [
                b
                for b in candidates
                if isolation.allows(tenant, b.backend_id, self._window(b), now_s, queued)
            ]
        held = {tenant for tenant, backends in allowed.items() if not backends}
        call = self._fair.pop(now_s, exclude=held)
        if call is None:
            return None, candidates
        return call, allowed.get(tenant_of(call)) or candidates

    def _window(self, backend: BackendView) -> float:
        """The window the tenants' caps share on ``backend`` (calls; ``math.inf`` =
        unbounded): a fixed admission window, or the adaptive window's bound (not its current
        value: a window the caps keep from filling would never grow), and at most the
        backend's batch size when known."""
        admission = self.admission
        window = math.inf
        if isinstance(admission, AdaptiveWindowAdmission):
            window = math.floor(admission.bound(backend))
        elif isinstance(admission, FixedWindowAdmission) and admission.window is not None:
            window = admission.window
        if backend.max_num_seqs is not None and backend.max_num_seqs >= 1:
            window = min(window, backend.max_num_seqs)
        return window

    def requeue(self, call: CallEntry, now_s: float) -> None:
        """An admitted call could not be sent (its backend failed before streaming): put it
        back in its place; the next :meth:`admit` may route it elsewhere."""
        if self.isolation is not None:
            self.isolation.on_release(call.facts.call_id, now_s)
        if self.memory is not None:
            self.memory.on_finish(call.facts, now_s)
            call.context = None
        self.queues.requeue(call, now_s)
        self._demand.add(call.facts.model)

    def cancel(self, call: CallEntry, now_s: float) -> bool:
        """A queued call's client went away: forget it. ``False`` if it was not queued (then
        it is running: report it with :meth:`on_finish` and the service it got)."""
        cancelled = self.queues.cancel(call, now_s)
        if cancelled:
            self._demand.remove(call.facts.model)
        return cancelled

    def on_tokens(self, call: CallEntry, new_tokens: int, now_s: float) -> None:
        """Output tokens streamed for an admitted call. Per streamed read, so nothing is
        looked up: the call's memory record was kept at admission (``CallEntry.context``)
        and the queue that counts its tokens at its first read (``CallEntry.count_tokens``)."""
        context = call.context
        if context is not None:
            context.add(new_tokens)
        count = call.count_tokens
        if count is None:
            count = call.count_tokens = self.queues.token_counter(call)
        count(call, new_tokens, now_s)

    def on_finish(
        self,
        call: CallEntry,
        backend_id: str,
        service_s: float,
        now_s: float,
        *,
        block_hashes: tuple[int, ...] | None = None,
    ) -> None:
        """An admitted call finished with ``service_s`` seconds of service charged.
        ``block_hashes``: the chain the backend now holds for the call (prompt and output),
        when the driver knows it (the simulator): the entry's facts take it, so the router's
        prefix index learns what the thread's next call extends; ``None`` = the prompt's."""
        if block_hashes is not None:
            call.facts = call.facts.with_block_hashes(block_hashes)
        if self.isolation is not None:
            self.isolation.on_release(call.facts.call_id, now_s, service_s)
        if self.memory is not None:
            self.memory.on_finish(call.facts, now_s)
            call.context = None
        self.queues.on_finish(call, service_s, now_s)
        self.router.on_finish(call, backend_id, now_s)

    def drop_expired(self, now_s: float) -> list[CallEntry]:
        dropped = self.queues.drop_expired(now_s)
        for call in dropped:
            self._demand.remove(call.facts.model)
        return dropped

    def on_program_start(
        self, program: ProgramKey, now_s: float, *, name: str = "", deadline_s: float = math.inf
    ) -> None:
        """A program-start event (optional: its first call creates the entry too)."""
        self.table.start(program, now_s, name=name, deadline_s=deadline_s)

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        if self.memory is not None:
            self.memory.on_program_end(program)
        self.queues.on_program_end(program, now_s)
        self.router.on_program_end(program, now_s)

    def on_tool_wait_start(
        self,
        program: ProgramKey,
        now_s: float,
        *,
        thread_id: str,
        node_id: str,
        tool_name: str,
        predicted_duration_s: float | None = None,
        kind: str = "tool",
    ) -> ToolWait:
        """The program waits on a tool / a human; returns the recorded wait, which a
        retention policy may read."""
        return self.table.tool_wait_start(
            program,
            now_s,
            thread_id=thread_id,
            node_id=node_id,
            tool_name=tool_name,
            predicted_duration_s=predicted_duration_s,
            kind=kind,
        )

    def on_tool_wait_end(
        self, program: ProgramKey, now_s: float, *, thread_id: str, node_id: str
    ) -> ToolWait | None:
        """The tool wait is over; returns it (``None`` if unknown)."""
        return self.table.tool_wait_end(program, now_s, thread_id=thread_id, node_id=node_id)

    def set_retention(self, program: ProgramKey, until_s: float | None) -> None:
        """Mark a program's KV as retained until ``until_s`` (``None`` clears): its next call
        enters the retained lane (and Q1, ``SchedulerConfig.boost_retained``) while it
        lasts."""
        self.table.set_retention(program, until_s)

    def expire(self, now_s: float) -> list[ProgramKey]:
        """Remove idle programs from the table (and their router affinity); returns them."""
        removed = self.table.expire(now_s)
        for program in removed:
            self.router.on_program_end(program, now_s)
            if self.memory is not None:
                self.memory.on_program_end(program)
        return removed

    def lane_snapshot(self) -> dict[str, object]:
        """The retained lane, JSON-able: enabled, calls queued there now, calls so far."""
        return {
            "enabled": self.retained_lane,
            "queued": self.retained_queued(),
            "total": self.lane_total,
        }

    def snapshot(self, now_s: float) -> dict[str, object]:
        """JSON-able queues and process table, for introspection."""
        return {
            "scheduler": self.scheduler.snapshot(now_s),
            "retained_lane": self.lane_snapshot(),
            "memory": (
                self.memory.snapshot(now_s) if self.memory is not None else {"enabled": False}
            ),
            "process_table": self.table.snapshot(now_s),
            "isolation": (
                self.isolation.snapshot(now_s, self._fair.queued_by_tenant())
                if self.isolation is not None and self._fair is not None
                else {"enabled": False}
            ),
        }
