"""The retention driver: one program thread's wait → the policy → what to do on which backend.

The controller service and the simulator both drive this object (docs/routing.md, "KV
retention"); each only *carries out* the :class:`RetentionAction` values it returns — the
service with HTTP calls to its backends (``service/core/retention.py``), the simulator on its
engine cores (``agentrt_sim/waits.py``). So a simulated retention figure says something about
the controller's retention: same pin ids, same release points, same windows.

What it does, per event (every method takes ``now_s``; nothing here awaits or reads a clock):

* **context** — :meth:`RetentionDriver.on_finish` remembers, per program thread, the backend
  that served its last call, that call's prompt length and a payload to pin or re-warm with
  (never a request body: the executor keeps only what its backend's pin or re-warm takes,
  ``service/core/retention.py``), within a **per-tenant byte budget**
  (``kept_bytes_per_tenant``): over it, the tenant's oldest kept payloads are dropped — those
  threads keep their backend and length, so their retention degrades to the window only (no
  pin, no re-warm), counted as ``kept_dropped``. A tenant's payloads never push out
  another's;
* **decision** — :meth:`RetentionDriver.on_tool_start` hands the policy a
  :class:`~agentrt_controller.retention.api.ToolWaitFacts`; a positive TTL becomes a
  :class:`~agentrt_controller.retention.tracker.Retention`, a **window**
  (``set_window(program, until_s)``: the Dispatcher's retained lane) and, when the decision
  says ``pin``, by the backend's declared capabilities (:class:`BackendTraits`):

  - a native **pin** (``pins``): a ``pin`` action;
  - a **re-warm** (no pins, but an observable prefix cache): a ``rewarm`` action
    ``rewarm_lead_s`` before the predicted return, from :meth:`RetentionDriver.tick`, only while
    the backend has room (``in_flight < rewarm_max_in_flight``, KV usage < 0.9);
  - else the window only.
* **release** — at the thread's next *admission* (:meth:`RetentionDriver.on_admitted`), when the
  thread is retained anew (``replaced``), at program end or idle expiry
  (:meth:`RetentionDriver.on_program_end`): an ``unpin`` on a backend with pins. At TTL end the
  backend expires its pin itself: only the window changes. A TTL never outlives its program.

* **held until admission** — a thread back within its TTL (:meth:`RetentionDriver.on_return`)
  keeps its native pin for the decision's ``hold_after_return_s`` while its call waits in the
  queues (a ``pin`` action with the later end);
* **deadlock guard** (Continuum) — when pins leave no room for any waiting call on a backend
  (:meth:`RetentionDriver.relieve`, and :meth:`RetentionDriver.tick` from the backend's gauges),
  the most recently pinned are unpinned first, reason ``guard``;
* **for admission** — :meth:`RetentionDriver.pinned` lists a backend's pinned contexts with
  when each thread is due back.

Every method first ends the retentions whose TTL is over at ``now_s``, so a driver that calls
:meth:`RetentionDriver.tick` late (the simulator, between events) sees the same windows. A pin
of a program that died without an end event ends at its TTL like any (no leak).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention.api import RetentionPolicy, ToolWaitFacts
from agentrt_controller.retention.tracker import Retention, RetentionTracker

__all__ = [
    "ActionKind",
    "BackendTraits",
    "PinnedContext",
    "ReleaseHook",
    "ReleaseReason",
    "RetentionAction",
    "RetentionDriver",
    "ThreadContext",
    "ToolWait",
]

ActionKind = Literal["pin", "unpin", "rewarm"]
#: Why a retention ended: its thread's next call was admitted, the thread was retained anew,
#: the program ended (or expired idle), its TTL ran out, the deadlock guard unpinned it (pins
#: left no room for the backend's waiting calls).
ReleaseReason = Literal["admitted", "replaced", "program_end", "ttl", "guard"]

#: A backend at or above this KV usage gets no re-warm (it would evict someone else's cache).
_REWARM_MAX_USAGE = 0.9
#: With nothing running, calls waiting and at least this KV usage, pins hold the memory the
#: waiting calls need (the deadlock guard, when their need is unknown).
_BLOCKED_USAGE = 0.9


@dataclass(frozen=True, slots=True)
class BackendTraits:
    """What the driver needs to know of a backend now (its driver fills it from its pool or
    engines)."""

    #: Takes calls (a retention is only granted on a healthy backend).
    healthy: bool = True
    #: KV usage in [0, 1] at the last scrape; ``None`` = unknown.
    kv_cache_usage: float | None = None
    #: Calls admitted to it that have not finished (re-warms wait for room).
    in_flight: int = 0
    #: Holds native pins (our emulator, SGLang): a ``pin`` decision becomes a ``pin`` action.
    pins: bool = False
    #: Reports its prefix cache (scrapes metrics): without pins, a ``pin`` decision becomes a
    #: re-warm before the predicted return; else the window only.
    rewarm: bool = False
    #: KV capacity (tokens); ``None`` = unknown (the policy's configured capacity then).
    kv_capacity_tokens: int | None = None
    #: Seconds to reload one token's KV from its KV CPU tier (``kv_bytes_per_token /
    #: pcie_bytes_per_s``); ``None`` = no tier known (the policy's configured rate then).
    reload_s_per_token: float | None = None
    #: Its KV CPU tier (tokens); 0 = none or unknown.
    cpu_kv_capacity_tokens: int = 0
    #: Recent queueing delay of calls on it (seconds, :class:`~agentrt_controller.retention.
    #: recent.RecentMeans`); ``None`` = unknown.
    queue_wait_s: float | None = None
    #: Requests running in it and waiting in its own queue (the engine's gauges); ``None`` =
    #: unknown. The deadlock guard reads them.
    num_running: int | None = None
    num_waiting: int | None = None
    #: KV tokens the first of its waiting calls needs to start; ``None`` = unknown.
    waiting_need_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ThreadContext:
    """A thread's context after its last call (the payload holds prompts: never logged)."""

    #: Backend that served the call (holds its KV).
    backend_id: str
    #: Context length the thread's next call extends (tokens).
    tokens: int
    #: What to pin or re-warm with (the controller: the prompt's kept parts,
    #: ``service/core/retention.py::KeptPrompt``; the simulator: the prefix's token ids);
    #: ``None`` = nothing kept (a retention of this context is window-only).
    payload: object = field(default=None, repr=False)
    #: Memory the payload holds (bytes, as its owner measured it), charged to the program's
    #: tenant's budget while the driver keeps the context; 0 = not charged.
    kept_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ToolWait:
    """A thread starts waiting on a tool or a human (the facts of the event, not of the
    backend)."""

    program: ProgramKey
    thread_id: str
    node_id: str
    #: ``tool``, or ``think`` / ``human`` for a human's turn.
    kind: str
    #: Tool name (durations are learned per name).
    name: str
    #: The client's prediction (seconds); ``None`` = none.
    predicted_duration_s: float | None
    #: Program kind from the program-start event (``""`` = unknown).
    program_kind: str = ""
    #: Calls of the program finished so far; ``None`` = not counted (the controller).
    calls_finished: int | None = None


@dataclass(frozen=True, slots=True)
class RetentionAction:
    """One thing to carry out on a backend."""

    #: ``pin`` (hold the payload's prefix until ``retention.until_s``), ``unpin``
    #: (``retention.pin_id``), ``rewarm`` (a 1-token request with the payload).
    kind: ActionKind
    #: The retention it is for: ``backend_id``, ``pin_id``, ``until_s``, ``payload``.
    retention: Retention
    #: For ``unpin``: why the retention ended; ``None`` otherwise.
    reason: ReleaseReason | None = None

    @property
    def backend_id(self) -> str:
        return self.retention.backend_id

    @property
    def pin_id(self) -> str:
        return self.retention.pin_id


class PinnedContext(NamedTuple):
    """A context a backend holds with a native pin now (:meth:`RetentionDriver.pinned`)."""

    program: ProgramKey
    #: Context length held (tokens).
    tokens: int
    #: When its thread is expected back (seconds, driver's clock; ``<= until_s``): the
    #: policy's expected return given a return within the TTL, else the client's prediction,
    #: else the TTL's end.
    due_s: float
    #: When the pin ends at the latest (the TTL's end; seconds).
    until_s: float
    thread_id: str
    #: When it was pinned (seconds).
    pinned_s: float


#: The backend's traits by id; ``None`` = unknown (removed).
TraitsLookup = Callable[[str], BackendTraits | None]
#: Tell the scheduler a program is retained until ``until_s`` (``None`` = no longer).
WindowSink = Callable[[ProgramKey, float | None], None]
#: Hears every retention that ends: why, and when (seconds; a TTL's end for ``ttl``).
ReleaseHook = Callable[[Retention, ReleaseReason, float], None]


class RetentionDriver:
    """Retention for one controller (or one simulated controller): pure and synchronous."""

    def __init__(
        self,
        policy: RetentionPolicy,
        backends: TraitsLookup,
        set_window: WindowSink,
        *,
        rewarm_lead_s: float = 0.5,
        rewarm_max_in_flight: int = 8,
        kept_bytes_per_tenant: int | None = None,
    ) -> None:
        """``backends``: a backend's traits now; ``set_window``: the Dispatcher's
        ``set_retention`` (or the simulator's replica's). ``rewarm_lead_s``: re-warm this long
        before the predicted return (seconds). ``kept_bytes_per_tenant``: the most payload
        bytes (:attr:`ThreadContext.kept_bytes`) kept for one tenant's threads (programs
        without a tenant share one budget); ``None`` = unbounded and not counted (the
        simulator, whose payloads are token ids it holds anyway)."""
        if kept_bytes_per_tenant is not None and kept_bytes_per_tenant < 0:
            raise ConfigError(f"kept_bytes_per_tenant must be >= 0, got {kept_bytes_per_tenant}")
        self.policy = policy
        self._backends = backends
        self._set_window = set_window
        self.tracker = RetentionTracker(rewarm_lead_s=rewarm_lead_s)
        self.rewarm_max_in_flight = rewarm_max_in_flight
        #: program -> thread -> the thread's last context.
        self._contexts: dict[ProgramKey, dict[str, ThreadContext]] = {}
        self.kept_bytes_per_tenant = kept_bytes_per_tenant
        #: tenant -> (program, thread) -> kept bytes of its context's payload, oldest first.
        self._kept: dict[str | None, OrderedDict[tuple[ProgramKey, str], int]] = {}
        #: tenant -> the sum of its kept bytes.
        self._kept_total: dict[str | None, int] = {}
        #: Programs holding a window (the scheduler is told when it ends).
        self._windows: set[ProgramKey] = set()
        #: backend -> (program, thread) -> its live native pins, oldest pin first.
        self._pins: dict[str, dict[tuple[ProgramKey, str], Retention]] = {}
        #: Decisions by reason (``pin``, ``retain``, ``short_context``...).
        self.decisions: dict[str, int] = {}
        #: Payloads not kept or dropped to stay within a tenant's byte budget.
        self.kept_dropped = 0
        #: Pins the deadlock guard released.
        self.guard_releases = 0
        #: Called for every retention that ends (introspection, tests); ``None`` = nobody.
        self.on_release: ReleaseHook | None = None

    # --- events ---------------------------------------------------------------------------

    def on_call(self, program: ProgramKey, thread_id: str, now_s: float) -> str | None:
        """A thread's call arrived (it came back): the backend holding its retained context
        (the call goes to the retained lane, to that backend), or ``None``. An executor of
        native pins calls :meth:`on_return` instead, which also holds a pin until admission."""
        return self.on_return(program, thread_id, now_s)[0]

    def on_return(
        self, program: ProgramKey, thread_id: str, now_s: float
    ) -> tuple[str | None, list[RetentionAction]]:
        """A thread's call arrived: the backend holding its retained context (or ``None``),
        and the actions to carry out — a native pin is held on for the decision's
        ``hold_after_return_s`` while the call waits to be admitted (a ``pin`` action with
        the later end; the admission releases it), so that the context the TTL kept is not
        lost in the queue."""
        actions = self.tick(now_s)
        self.policy.on_call_arrived(program, thread_id, now_s)
        retention = self.tracker.get(program, thread_id)
        if retention is None or not retention.until_s > now_s:
            return None, actions
        hold = retention.hold_after_return_s
        if retention.pinned and hold > 0 and self.tracker.extend(retention, now_s + hold):
            self._update_window(program)
            actions.append(RetentionAction("pin", retention))
        return retention.backend_id, actions

    def on_admitted(
        self, program: ProgramKey, thread_id: str, now_s: float
    ) -> list[RetentionAction]:
        """The thread's call left the queues: its retention has done its job."""
        if not self.retains():  # nothing to tick, nothing of the thread's to release
            return []
        actions = self.tick(now_s)
        released = self.tracker.release_thread(program, thread_id)
        if released is not None:
            actions += self._release([released], "admitted", now_s)
            self._update_window(program)
        return actions

    def on_finish(self, program: ProgramKey, thread_id: str, context: ThreadContext) -> None:
        """The thread's call was answered: remember its context for the thread's next wait.
        Its payload is charged to the tenant's budget; a payload larger than the whole budget
        is not kept, and older payloads of the same tenant are dropped until it fits."""
        self._uncharge(program, thread_id)
        budget = self.kept_bytes_per_tenant
        if context.payload is not None and budget is not None:
            if context.kept_bytes > budget:
                context = replace(context, payload=None, kept_bytes=0)
                self.kept_dropped += 1
            else:
                self._charge(program, thread_id, context.kept_bytes, budget)
        self._contexts.setdefault(program, {})[thread_id] = context

    def on_tool_start(
        self, wait: ToolWait, now_s: float, *, context: ThreadContext | None = None
    ) -> list[RetentionAction]:
        """A thread waits: ask the policy, start the retention, return the ``pin`` (and the
        ``unpin`` of a retention it replaces). ``context``: the thread's context when the
        driver knows it better than :meth:`on_finish` did (the simulator knows the exact
        prefix the wait extends); ``None`` = the last call's."""
        actions = self.tick(now_s)
        key, thread_id = wait.program, wait.thread_id
        if context is None:
            context = self._contexts.get(key, {}).get(thread_id)
        traits = self._backends(context.backend_id) if context is not None else None
        facts = ToolWaitFacts(
            program=key,
            thread_id=thread_id,
            node_id=wait.node_id,
            kind=wait.kind,
            name=wait.name,
            predicted_duration_s=wait.predicted_duration_s,
            context_tokens=context.tokens if context is not None else 0,
            backend_id=(
                context.backend_id
                if context is not None and traits is not None and traits.healthy
                else None
            ),
            kv_cache_usage=traits.kv_cache_usage if traits is not None else None,
            kv_capacity_tokens=traits.kv_capacity_tokens if traits is not None else None,
            program_kind=wait.program_kind,
            calls_finished=wait.calls_finished,
            reload_s_per_token=traits.reload_s_per_token if traits is not None else None,
            cpu_kv_capacity_tokens=traits.cpu_kv_capacity_tokens if traits is not None else 0,
            queue_wait_s=traits.queue_wait_s if traits is not None else None,
            pinned_tokens=self.pinned_tokens(context.backend_id) if context is not None else 0,
        )
        decision = self.policy.on_wait_start(facts, now_s)
        self.decisions[decision.reason] = self.decisions.get(decision.reason, 0) + 1
        if decision.ttl_s <= 0 or context is None or traits is None:
            return actions
        retention, replaced = self.tracker.start(
            key,
            thread_id,
            backend_id=context.backend_id,
            ttl_s=decision.ttl_s,
            now_s=now_s,
            context_tokens=context.tokens,
            predicted_return_s=wait.predicted_duration_s,
            payload=context.payload,
        )
        if replaced is not None:
            actions += self._release([replaced], "replaced", now_s)
        if retention is None:
            return actions
        back_in_s = decision.expected_return_s
        if back_in_s is None:
            back_in_s = wait.predicted_duration_s
        if back_in_s is not None and back_in_s >= 0:
            retention.due_s = min(retention.until_s, now_s + back_in_s)
        else:
            retention.due_s = retention.until_s
        retention.hold_after_return_s = max(0.0, decision.hold_after_return_s)
        self._windows.add(key)
        self._set_window(key, self.tracker.retained_until(key))
        if not decision.pin:
            retention.rewarm_at_s = math.inf
        elif context.payload is None:
            retention.rewarm_at_s = math.inf  # nothing kept to pin or re-warm with
        elif traits.pins:
            retention.rewarm_at_s = math.inf  # a native pin, no re-warm
            retention.pinned = True
            self._pins.setdefault(retention.backend_id, {})[(key, thread_id)] = retention
            actions.append(RetentionAction("pin", retention))
        elif not traits.rewarm:
            retention.rewarm_at_s = math.inf  # no observable prefix cache to re-warm
        return actions

    def on_tool_end(
        self, program: ProgramKey, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        """The wait ended after ``duration_s`` seconds (the policy learns per tool)."""
        self.policy.on_wait_end(program, thread_id, node_id, duration_s, now_s)

    def on_program_start(self, program: ProgramKey) -> None:
        """A program (id) starts (again): retention is allowed for it."""
        self.tracker.forget_ended(program)

    def on_program_end(self, program: ProgramKey, now_s: float) -> list[RetentionAction]:
        """The program ended (or expired idle): release everything it holds, forget it."""
        actions = self.tick(now_s)
        released = self.tracker.release_program(program)
        if released:  # most programs hold none at their end: no call for nothing
            actions += self._release(released, "program_end", now_s)
        # Its window ends (it holds no retention now). Only a program holding one is told:
        # the driver is the only one that sets windows, so for any other the scheduler's last
        # word was ``None`` already (most programs never wait on a tool).
        self._update_window(program)
        self.policy.on_program_end(program, now_s)
        for thread_id in self._contexts.pop(program, ()):
            self._uncharge(program, thread_id)
        return actions

    def retains(self) -> bool:
        """Whether some retention is live or some backend holds a pin: :meth:`tick` has
        something to do (and a program's end something to release)."""
        return bool(self._pins) or self.tracker.holds_any()

    def tick(self, now_s: float) -> list[RetentionAction]:
        """End the retentions whose TTL is over (the backend expires its pin itself: only
        the window changes) and return the re-warms that are due and have room."""
        if not self.retains():
            # Nothing retained, so nothing to expire, relieve or re-warm: the usual case (a
            # call's admission and an untagged call's end do not even tick then).
            return []
        for expired in self.tracker.expire(now_s):
            self._unindex(expired)
            if self.on_release is not None:
                self.on_release(expired, "ttl", expired.until_s)
            self._update_window(expired.program)
        actions: list[RetentionAction] = []
        for backend_id in list(self._pins):
            traits = self._backends(backend_id)
            if traits is not None and _blocked(traits):
                actions += self.relieve(backend_id, now_s, need_tokens=traits.waiting_need_tokens)
        for due in self.tracker.due_rewarms(now_s):
            traits = self._backends(due.backend_id)
            if traits is not None and self._has_room(traits):
                actions.append(RetentionAction("rewarm", due))
        return actions

    def relieve(
        self, backend_id: str, now_s: float, *, need_tokens: int | None = None
    ) -> list[RetentionAction]:
        """The **deadlock guard** (Continuum): pins on ``backend_id`` leave no room for any of
        its waiting calls — unpin the most recently pinned first until ``need_tokens`` are
        released (``None`` = unknown: one pin; a driver that sees the engine exactly, the
        simulator, calls again while it stays blocked). The retentions end (reason
        ``guard``): their windows too, since their contexts are no longer held."""
        pins = self._pins.get(backend_id)
        released: list[Retention] = []
        freed = 0
        while pins and (not released if need_tokens is None else freed < need_tokens):
            retention = next(reversed(pins.values()))
            self.tracker.release_thread(retention.program, retention.thread_id)
            self._unindex(retention)
            released.append(retention)
            freed += retention.context_tokens
        self.guard_releases += len(released)
        actions = self._release(released, "guard", now_s)
        for program in {r.program for r in released}:
            self._update_window(program)
        return actions

    # --- for executors ---------------------------------------------------------------------

    @property
    def next_wake_s(self) -> float:
        """When :meth:`tick` has something to do next (seconds); ``math.inf`` = nothing."""
        return min(self.tracker.next_expiry_s, self.tracker.next_rewarm_s)

    def is_live(self, retention: Retention, now_s: float) -> bool:
        """Whether ``retention`` still holds at ``now_s`` (an executor that pins later checks
        this first: the thread may have come back meanwhile)."""
        current = self.tracker.get(retention.program, retention.thread_id)
        return current is retention and retention.until_s > now_s

    def __len__(self) -> int:
        return len(self.tracker)

    def pinned(self, backend_id: str) -> list[PinnedContext]:
        """The contexts ``backend_id`` holds with a native pin now, oldest pin first (what an
        admission policy must not evict; docs/routing.md, "KV retention"). A pin's TTL end
        is counted as passed only once a method here has seen a ``now_s`` past it: call
        :meth:`tick` first for an exact view."""
        return [
            PinnedContext(r.program, r.context_tokens, r.due_s, r.until_s, r.thread_id, r.started_s)
            for r in self._pins.get(backend_id, {}).values()
        ]

    def pinned_tokens(self, backend_id: str) -> int:
        """Tokens ``backend_id`` holds with native pins now (the sum over :meth:`pinned`)."""
        return sum(r.context_tokens for r in self._pins.get(backend_id, {}).values())

    @property
    def kept_bytes(self) -> int:
        """Payload bytes kept now, all tenants (each tenant's share is within the budget)."""
        return sum(self._kept_total.values())

    def kept_bytes_of(self, tenant: str | None) -> int:
        """Payload bytes kept now for ``tenant``'s threads (``None``: programs without one)."""
        return self._kept_total.get(tenant, 0)

    # --- helpers ---------------------------------------------------------------------------

    def _release(
        self, released: list[Retention], reason: ReleaseReason, now_s: float
    ) -> list[RetentionAction]:
        actions = []
        for retention in released:
            self._unindex(retention)
            if self.on_release is not None:
                self.on_release(retention, reason, now_s)
            traits = self._backends(retention.backend_id)
            if traits is not None and traits.pins:
                actions.append(RetentionAction("unpin", retention, reason))
        return actions

    def _unindex(self, retention: Retention) -> None:
        """Forget ``retention``'s native pin (it ended)."""
        if not retention.pinned:
            return
        pins = self._pins.get(retention.backend_id)
        key = (retention.program, retention.thread_id)
        if pins is not None and pins.get(key) is retention:
            del pins[key]
            if not pins:
                del self._pins[retention.backend_id]

    def _charge(self, program: ProgramKey, thread_id: str, size: int, budget: int) -> None:
        """Charge ``size`` bytes to the program's tenant; drop the tenant's oldest payloads
        until its total is within ``budget`` (``size <= budget``: the new one always fits)."""
        tenant = program.tenant
        kept = self._kept.setdefault(tenant, OrderedDict())
        kept[(program, thread_id)] = size
        total = self._kept_total.get(tenant, 0) + size
        while total > budget:
            (old_program, old_thread), old_size = kept.popitem(last=False)
            total -= old_size
            self._drop_payload(old_program, old_thread)
        self._kept_total[tenant] = total

    def _uncharge(self, program: ProgramKey, thread_id: str) -> None:
        tenant = program.tenant
        kept = self._kept.get(tenant)
        size = kept.pop((program, thread_id), None) if kept is not None else None
        if kept is None or size is None:
            return
        self._kept_total[tenant] -= size
        if not kept:
            del self._kept[tenant], self._kept_total[tenant]

    def _drop_payload(self, program: ProgramKey, thread_id: str) -> None:
        """Over budget: the thread keeps its context's backend and length, not its payload;
        a live retention of it becomes window-only (a pin already placed stays until the
        retention ends: the backend holds that KV, not the controller)."""
        self.kept_dropped += 1
        threads = self._contexts.get(program, {})
        context = threads.get(thread_id)
        if context is not None:
            threads[thread_id] = replace(context, payload=None, kept_bytes=0)
        retention = self.tracker.get(program, thread_id)
        if retention is not None:
            retention.payload = None
            retention.rewarm_at_s = math.inf

    def _update_window(self, program: ProgramKey) -> None:
        """Tell the scheduler how long the program stays retained (``None``: no longer)."""
        if program not in self._windows:
            return
        until = self.tracker.retained_until(program)
        self._set_window(program, until)
        if until is None:
            self._windows.discard(program)

    def _has_room(self, traits: BackendTraits) -> bool:
        usage = traits.kv_cache_usage
        return (
            traits.healthy
            and traits.in_flight < self.rewarm_max_in_flight
            and (usage is None or usage < _REWARM_MAX_USAGE)
        )


def _blocked(traits: BackendTraits) -> bool:
    """Whether the backend's waiting calls cannot start: the first needs more KV than is free,
    or (its need unknown) nothing runs while calls wait and the KV is held (at least
    :data:`_BLOCKED_USAGE`: with nothing running, by pins). A gauge of running and waiting
    calls alone is no proof: a call just handed to an idle engine waits until its next step."""
    if not traits.num_waiting:
        return False
    usage, capacity, need = (
        traits.kv_cache_usage,
        traits.kv_capacity_tokens,
        traits.waiting_need_tokens,
    )
    if usage is None:
        return False
    if need is not None and capacity:
        return (1.0 - usage) * capacity < need
    return traits.num_running == 0 and usage >= _BLOCKED_USAGE
