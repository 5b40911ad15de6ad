"""The process table: one entry per live program (Autellix arXiv 2502.13965; docs/scheduling.md).

An entry holds what program-level scheduling needs — attained service (PLAS), the longest
critical path seen (ATLAS), total waiting time — plus what introspection and retention need:
engine bindings, active calls, threads, last arrival / completion, tool-wait state.

Entries are keyed by :class:`~agentrt_controller.keys.ProgramKey` (tenant, session id and
program id), so tenants and sessions can be told apart; the table counts each tenant's live
programs (:meth:`ProcessTable.programs_of`) for per-tenant quotas. An entry is created by a
program-start event or by its first call, and removed at program end (:meth:`ProcessTable.end`),
by :meth:`ProcessTable.expire` after ``idle_timeout_s`` without activity (never while it has
active calls or a tool wait / retention that has not run out), or by the driver when the table
is full (:meth:`ProcessTable.evictable` names an idle one). Every operation is O(1) except
:meth:`expire` (amortised O(1) per removed or re-checked entry) and :meth:`snapshot`.

Pure: no clock, no I/O. Times are seconds on the driver's clock, passed in as ``now_s``; the
driver's clock is expected to be monotone (expiry order relies on it).

Who writes what: the scheduler records calls (:meth:`call_arrived`, :meth:`call_started`,
:meth:`call_requeued`, :meth:`call_finished`, :meth:`call_dropped`); the dispatcher records
bindings (:meth:`bind`), program and tool-wait events. Reads are free for anyone.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.call import CallFacts

__all__ = ["ActiveCall", "ProcessTable", "ProgramEntry", "ToolWait"]


@dataclass(slots=True)
class ActiveCall:
    """A call of the program that has arrived and not finished (queued or running)."""

    call_id: str
    thread_id: str
    node_id: str
    #: Arrival at the controller (seconds).
    arrival_s: float
    #: ``queued`` (in the controller's queues) or ``running`` (admitted to a backend).
    state: Literal["queued", "running"]
    #: Start of the current queued segment (seconds); meaningful while ``queued``.
    queued_since_s: float
    #: Total time queued so far (seconds). Never reset (anti-starvation resets only
    #: ``CallEntry.wait_s``): this is what the program's waiting total is made of.
    wait_s: float = 0.0
    #: The program's critical-path scalar when the call arrived: the call's ATLAS priority.
    inherited_critical_path_s: float = 0.0
    #: Backend the call was admitted to, once admitted.
    backend_id: str | None = None


@dataclass(slots=True)
class ToolWait:
    """The program (one of its threads) waits on a tool or a human (docs/routing.md, "KV
    retention")."""

    tool_name: str
    thread_id: str
    node_id: str
    #: When the wait began (seconds).
    started_s: float
    #: Predicted duration (seconds) from the tool's history; ``None`` = unknown.
    predicted_duration_s: float | None
    #: ``tool`` or ``human``.
    kind: str = "tool"
    #: Whether the wait may start a retention (:meth:`ProcessTable.tool_wait_start`): it
    #: follows a finished call of its thread, none of the thread's calls is active, and its
    #: node had no honoured wait before. A wait that is not honoured is recorded, never
    #: retained (docs/security.md, "The retention fast lane").
    honoured: bool = True


@dataclass(slots=True)
class ProgramEntry:
    """One live program. Times in seconds on the driver's clock; service in seconds."""

    key: ProgramKey
    #: Human-readable program kind (``react``...), from the program-start event.
    name: str
    created_s: float
    #: Last event of any kind (call, tokens excluded, program or tool event).
    last_seen_s: float
    #: Arrival of the latest call; ``None`` before the first (detects stale programs).
    last_arrival_s: float | None = None
    #: Completion of the latest call; ``None`` before the first (detects tool waits).
    last_completion_s: float | None = None
    #: Absolute program deadline; ``math.inf`` = none.
    deadline_s: float = math.inf
    #: PLAS: sum of the service charged to the program's finished calls (seconds).
    attained_service_s: float = 0.0
    #: ATLAS: longest critical path observed, ``max(scalar, call priority + call service)``.
    critical_path_s: float = 0.0
    #: Total time the program's calls spent queued at the controller (finished segments).
    waiting_s: float = 0.0
    #: Total time spent in finished tool / human waits (seconds).
    tool_wait_s: float = 0.0
    calls_finished: int = 0
    #: Backend id -> calls admitted there; the first key is the first binding.
    backends: dict[str, int] = field(default_factory=dict)
    #: Calls that arrived and have not finished, by call id.
    active: dict[str, ActiveCall] = field(default_factory=dict)
    #: Thread id -> calls seen on that thread.
    threads: dict[str, int] = field(default_factory=dict)
    #: Open tool waits by ``(thread_id, node_id)``.
    tool_waits: dict[tuple[str, str], ToolWait] = field(default_factory=dict)
    #: Thread id -> its active calls (threads with none are left out).
    active_per_thread: dict[str, int] = field(default_factory=dict)
    #: Threads whose last call finished (none of their calls active) and whose finished call
    #: no honoured wait has followed yet: the next wait of such a thread is honoured.
    waitable_threads: set[str] = field(default_factory=set)
    #: Nodes that had an honoured wait (at most one each; at most one per finished call, so
    #: the set grows no faster than the program's calls).
    waited_nodes: set[str] = field(default_factory=set)
    #: KV retention holds the program's binding until then (seconds); ``None`` = not retained.
    retained_until_s: float | None = None
    #: Creation order in the table (a stable cursor for paginated listings).
    seq: int = 0
    # Position in the expiry order (seconds): last touch or last expiry re-check.
    _order_s: float = 0.0

    def held_until_s(self) -> float:
        """Latest time something still vouches for the program: last event, the predicted end
        of an open tool wait, or the retention TTL (seconds)."""
        held = self.last_seen_s
        for wait in self.tool_waits.values():
            held = max(held, wait.started_s + (wait.predicted_duration_s or 0.0))
        if self.retained_until_s is not None:
            held = max(held, self.retained_until_s)
        return held

    def to_json(self, now_s: float) -> dict[str, object]:
        """JSON-able view (no prompt contents exist here to leak)."""
        return {
            "tenant": self.key.tenant,
            "session_id": self.key.session_id,
            "program_id": self.key.program_id,
            "name": self.name,
            "age_s": now_s - self.created_s,
            "idle_s": now_s - self.last_seen_s,
            "last_arrival_s": self.last_arrival_s,
            "last_completion_s": self.last_completion_s,
            "deadline_s": None if math.isinf(self.deadline_s) else self.deadline_s,
            "attained_service_s": self.attained_service_s,
            "critical_path_s": self.critical_path_s,
            "waiting_s": self.waiting_s,
            "tool_wait_s": self.tool_wait_s,
            "calls_finished": self.calls_finished,
            "backends": dict(self.backends),
            "threads": dict(self.threads),
            "active_calls": [
                {
                    "call_id": c.call_id,
                    "thread_id": c.thread_id,
                    "node_id": c.node_id,
                    "state": c.state,
                    "arrival_s": c.arrival_s,
                    "wait_s": c.wait_s + (now_s - c.queued_since_s if c.state == "queued" else 0.0),
                    "backend_id": c.backend_id,
                }
                for c in self.active.values()
            ],
            "tool_waits": [
                {
                    "tool_name": w.tool_name,
                    "kind": w.kind,
                    "thread_id": w.thread_id,
                    "node_id": w.node_id,
                    "elapsed_s": now_s - w.started_s,
                    "predicted_duration_s": w.predicted_duration_s,
                }
                for w in self.tool_waits.values()
            ],
            "retained_until_s": self.retained_until_s,
        }


class ProcessTable:
    """Live programs by :class:`~agentrt_controller.keys.ProgramKey`; see the module
    docstring."""

    def __init__(self, idle_timeout_s: float = 600.0) -> None:
        """``idle_timeout_s``: a program with no activity for this long (seconds, > 0) is
        removed by :meth:`expire`. Raises :class:`ConfigError` otherwise."""
        if not idle_timeout_s > 0 or math.isinf(idle_timeout_s):
            raise ConfigError(f"idle_timeout_s must be a finite number > 0, got {idle_timeout_s}")
        self.idle_timeout_s = idle_timeout_s
        # Ordered by ``_order_s`` (oldest first) because every touch moves an entry to the end.
        self._entries: OrderedDict[ProgramKey, ProgramEntry] = OrderedDict()
        self._per_tenant: dict[str | None, int] = {}
        self._next_seq = 0

    # --- reads ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: ProgramKey) -> ProgramEntry | None:
        """The entry, or ``None`` when the program is not (or no longer) live."""
        return self._entries.get(key)

    def keys(self) -> list[ProgramKey]:
        return list(self._entries)

    def programs_of(self, tenant: str | None) -> int:
        """Live programs of ``tenant`` (O(1))."""
        return self._per_tenant.get(tenant, 0)

    def open_tool_waits(self, key: ProgramKey) -> int:
        """Open tool / human waits of the program (0 when it is not live)."""
        entry = self._entries.get(key)
        return 0 if entry is None else len(entry.tool_waits)

    def has_tool_wait(self, key: ProgramKey, thread_id: str, node_id: str) -> bool:
        """Whether the program's ``(thread_id, node_id)`` wait is open."""
        entry = self._entries.get(key)
        return entry is not None and (thread_id, node_id) in entry.tool_waits

    def tenant_counts(self) -> dict[str | None, int]:
        """Live programs by tenant."""
        return dict(self._per_tenant)

    def snapshot(
        self,
        now_s: float,
        limit: int = 1000,
        *,
        tenant: str | None = None,
        all_tenants: bool = True,
        after: int = -1,
    ) -> dict[str, object]:
        """JSON-able view: the number of programs and up to ``limit`` entries in creation
        order, those created after cursor ``after`` (an entry's ``seq``; -1 = from the start).
        ``all_tenants=False`` shows ``tenant``'s programs only (and counts only them).
        ``next_cursor`` is the cursor of the next page, ``None`` on the last one.
        O(n log limit)."""

        def visible(entry: ProgramEntry) -> bool:
            return all_tenants or entry.key.tenant == tenant

        candidates = (e for e in self._entries.values() if e.seq > after and visible(e))
        page = heapq.nsmallest(limit + 1, candidates, key=lambda e: e.seq) if limit > 0 else []
        more = len(page) > limit
        page = page[:limit]
        total = len(self._entries) if all_tenants else self.programs_of(tenant)
        return {
            "programs": total,
            "idle_timeout_s": self.idle_timeout_s,
            "entries": [e.to_json(now_s) for e in page],
            "next_cursor": page[-1].seq if more and page else None,
        }

    # --- program events ------------------------------------------------------------------

    def ensure(self, key: ProgramKey, now_s: float) -> ProgramEntry:
        """The entry for ``key``, created if missing; counts as activity."""
        entry = self._touched(key, now_s)
        if entry is None:
            entry = ProgramEntry(
                key=key, name="", created_s=now_s, last_seen_s=now_s, seq=self._next_seq
            )
            self._next_seq += 1
            self._entries[key] = entry
            self._per_tenant[key.tenant] = self._per_tenant.get(key.tenant, 0) + 1
            self._touched(key, now_s)
        return entry

    def start(
        self, key: ProgramKey, now_s: float, name: str = "", deadline_s: float = math.inf
    ) -> ProgramEntry:
        """A program-start event (optional: a first call creates the entry too)."""
        entry = self.ensure(key, now_s)
        entry.name = name or entry.name
        entry.deadline_s = min(entry.deadline_s, deadline_s)
        return entry

    def end(self, key: ProgramKey, now_s: float) -> ProgramEntry | None:
        """Remove a program (program-end event); returns its last entry, if it was live.
        Later events for its calls are ignored unless a new call re-creates the program."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._forget(key)
        return entry

    def tool_wait_start(
        self,
        key: ProgramKey,
        now_s: float,
        *,
        thread_id: str,
        node_id: str,
        tool_name: str,
        predicted_duration_s: float | None = None,
        kind: str = "tool",
    ) -> ToolWait:
        """Record a tool wait of ``thread_id`` at ``node_id``; returns it, ``honoured`` when it
        may start a retention: the thread's last call finished (none of its calls is active)
        and no honoured wait followed that call yet, and ``node_id`` had no honoured wait
        before. So a client cannot keep a program retained with waits alone: each honoured
        wait costs a finished call of its thread."""
        entry = self.ensure(key, now_s)
        honoured = thread_id in entry.waitable_threads and node_id not in entry.waited_nodes
        if honoured:
            entry.waitable_threads.discard(thread_id)
            entry.waited_nodes.add(node_id)
        wait = ToolWait(tool_name, thread_id, node_id, now_s, predicted_duration_s, kind, honoured)
        entry.tool_waits[(thread_id, node_id)] = wait
        return wait

    def tool_wait_end(
        self, key: ProgramKey, now_s: float, *, thread_id: str, node_id: str
    ) -> ToolWait | None:
        """Close a tool wait; returns it (``None`` if unknown) and adds its length to the
        program's ``tool_wait_s``."""
        entry = self._touched(key, now_s)
        if entry is None:
            return None
        wait = entry.tool_waits.pop((thread_id, node_id), None)
        if wait is not None:
            entry.tool_wait_s += max(0.0, now_s - wait.started_s)
        return wait

    def set_retention(self, key: ProgramKey, until_s: float | None) -> None:
        """Mark the program's KV as retained until ``until_s`` (``None`` clears it)."""
        entry = self._entries.get(key)
        if entry is not None:
            entry.retained_until_s = until_s

    def bind(self, call: CallFacts, backend_id: str, now_s: float) -> None:
        """The call was admitted to ``backend_id`` (engine binding)."""
        entry = self._entries.get(call.program)
        if entry is None:
            return
        entry.backends[backend_id] = entry.backends.get(backend_id, 0) + 1
        active = entry.active.get(call.call_id)
        if active is not None:
            active.backend_id = backend_id

    # --- call events (written by the scheduler) ------------------------------------------

    def call_arrived(self, call: CallFacts, now_s: float) -> ProgramEntry:
        """A call arrived and is queued; creates the program if needed."""
        entry = self.ensure(call.program, now_s)
        entry.last_arrival_s = now_s
        entry.threads[call.thread_id] = entry.threads.get(call.thread_id, 0) + 1
        entry.waitable_threads.discard(call.thread_id)  # its last call has not finished now
        replaced = entry.active.get(call.call_id)
        if replaced is not None:  # the same call id again: one active call, counted once
            self._thread_left(entry, replaced.thread_id)
        per_thread = entry.active_per_thread
        per_thread[call.thread_id] = per_thread.get(call.thread_id, 0) + 1
        entry.active[call.call_id] = ActiveCall(
            call_id=call.call_id,
            thread_id=call.thread_id,
            node_id=call.node_id,
            arrival_s=call.arrival_s,
            state="queued",
            queued_since_s=now_s,
            inherited_critical_path_s=entry.critical_path_s,
        )
        return entry

    def call_started(self, call: CallFacts, now_s: float) -> None:
        """The call left the queues for a backend; its queued time goes to the program."""
        entry, active = self._active(call, now_s)
        if entry is None or active is None or active.state != "queued":
            return
        self._end_wait(entry, active, now_s)
        active.state = "running"

    def call_requeued(self, call: CallFacts, now_s: float) -> None:
        """A started call was put back in the queues (it was not admitted after all)."""
        _, active = self._active(call, now_s)
        if active is not None and active.state == "running":
            active.state = "queued"
            active.queued_since_s = now_s

    def call_finished(self, call: CallFacts, service_s: float, now_s: float) -> None:
        """The call finished with ``service_s`` seconds of service charged (cost model).

        PLAS: ``attained += service_s``. ATLAS: ``critical_path = max(critical_path,
        inherited + service_s)`` where ``inherited`` is the scalar when the call arrived.
        """
        entry, active = self._active(call, now_s)
        if entry is None or active is None:
            return
        if active.state == "queued":
            self._end_wait(entry, active, now_s)
        del entry.active[call.call_id]
        if not self._thread_left(entry, active.thread_id):
            entry.waitable_threads.add(active.thread_id)
        entry.attained_service_s += service_s
        path = active.inherited_critical_path_s + service_s
        if path > entry.critical_path_s:  # max(), without its call
            entry.critical_path_s = path
        entry.calls_finished += 1
        entry.last_completion_s = now_s

    def call_dropped(self, call: CallFacts, now_s: float) -> None:
        """The call left without service (deadline passed, client went away)."""
        entry, active = self._active(call, now_s)
        if entry is None or active is None:
            return
        if active.state == "queued":
            self._end_wait(entry, active, now_s)
        del entry.active[call.call_id]
        self._thread_left(entry, active.thread_id)

    # --- expiry ----------------------------------------------------------------------------

    def expire(self, now_s: float) -> list[ProgramKey]:
        """Remove programs idle for ``idle_timeout_s``; returns their keys.

        Idle means: no active call, and ``now_s - held_until_s() >= idle_timeout_s`` (a tool
        wait counts until its predicted end, retention until its TTL). A program that is not
        idle when its turn comes is re-checked one timeout later, so each call costs
        O(removed + re-checked), and a program held by a call, a tool wait or retention leaves
        between one and two timeouts after the hold ends (a plain idle program: exactly one).
        """
        removed: list[ProgramKey] = []
        timeout = self.idle_timeout_s
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry._order_s + timeout > now_s:
                break
            if entry.active or entry.held_until_s() + timeout > now_s:
                entry._order_s = now_s
                self._entries.move_to_end(key)
                continue
            del self._entries[key]
            self._forget(key)
            removed.append(key)
        return removed

    def evictable(self, limit: int = 64) -> ProgramKey | None:
        """The least recently active program among the ``limit`` oldest that is idle right
        now — no active call, no open tool wait, not retained — or ``None``. The caller removes
        it with :meth:`end` (and tells the other policies) when the table is full."""
        for index, (key, entry) in enumerate(self._entries.items()):
            if index >= limit:
                break
            if not entry.active and not entry.tool_waits and entry.retained_until_s is None:
                return key
        return None

    # --- internals -------------------------------------------------------------------------

    def _forget(self, key: ProgramKey) -> None:
        left = self._per_tenant.get(key.tenant, 0) - 1
        if left > 0:
            self._per_tenant[key.tenant] = left
        else:
            self._per_tenant.pop(key.tenant, None)

    def _touched(self, key: ProgramKey, now_s: float) -> ProgramEntry | None:
        """The live entry of ``key`` after a touch (activity at ``now_s``: seen, and last in
        the expiry order), or ``None``. One frame for the lookup and the touch: three per
        call (arrival, start, finish)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        # Comparisons, not max(): each max() a call of its own.
        if now_s > entry.last_seen_s:
            entry.last_seen_s = now_s
        if now_s > entry._order_s:
            entry._order_s = now_s
        self._entries.move_to_end(key)
        return entry

    def _active(
        self, call: CallFacts, now_s: float
    ) -> tuple[ProgramEntry | None, ActiveCall | None]:
        entry = self._touched(call.program, now_s)
        if entry is None:
            return None, None
        return entry, entry.active.get(call.call_id)

    @staticmethod
    def _thread_left(entry: ProgramEntry, thread_id: str) -> int:
        """One active call of ``thread_id`` is gone; returns the thread's active calls left."""
        left = entry.active_per_thread.get(thread_id, 0) - 1
        if left > 0:
            entry.active_per_thread[thread_id] = left
        else:
            entry.active_per_thread.pop(thread_id, None)
        return max(0, left)

    @staticmethod
    def _end_wait(entry: ProgramEntry, active: ActiveCall, now_s: float) -> None:
        segment = max(0.0, now_s - active.queued_since_s)
        active.wait_s += segment
        entry.waiting_s += segment
