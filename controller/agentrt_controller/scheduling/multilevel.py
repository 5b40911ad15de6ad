"""Discrete-queue schedulers: per-call MLFQ, PLAS and ATLAS (Autellix arXiv 2502.13965;
docs/scheduling.md).

All three share one mechanism (:class:`MultiLevelScheduler`) and differ only in the priority a
new call enters with:

* **MLFQ** (FastServe-like, per call): every new call enters Q1.
* **PLAS** (program-level attained service): the program's attained service,
  ``p(c_j) = Σ_{k<j} t_k``.
* **ATLAS** (adaptive thread-level attained service): the program's critical-path scalar; a
  finishing call updates it with ``max(scalar, call priority + call service)`` (done by
  :meth:`ProcessTable.call_finished`).

The call enters the queue whose range ``[lo, hi)`` holds that priority, is served FCFS inside it
(earlier deadline breaks ties), and is demoted one queue each time it streams its queue's
quantum of output tokens (:meth:`on_tokens`). Anti-starvation: when
``(W_program + W_call) / (T_program + T_call) >= β`` a queued call moves to Q1 and only that
call's own wait and service are reset.

**Demotion at a proxy.** The controller cannot preempt a call running inside a backend, and the
``priority`` it sent at admission cannot be changed afterwards. Demoting a *running* call
therefore only updates its level for accounting and introspection (and for drivers that do
preempt, such as the step-level replay in :mod:`agentrt_controller.scheduling.replay`, which
requeue a
running call at its new level). What shapes the order at a proxy is the level a call *enters*
with — which is why program-level priorities (PLAS / ATLAS) matter there and per-call MLFQ
degenerates to FCFS. See docs/scheduling.md.

Pure: ``now_s`` is passed in; no clock, no I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import ClassVar

from agentrt_controller.keys import ProgramKey
from agentrt_controller.process_table import ProcessTable, ProgramEntry
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.scheduling.config import SchedulerConfig, is_starving
from agentrt_controller.scheduling.queues import LevelQueues, fcfs_key

__all__ = ["AtlasScheduler", "MlfqScheduler", "MultiLevelScheduler", "PlasScheduler"]


class MultiLevelScheduler:
    """K FCFS queues with quanta, demotion, anti-starvation and deadline drops.

    Subclasses say which priority a new call enters with (:meth:`entry_priority_s`).
    Implements :class:`~agentrt_controller.scheduling.api.Scheduler`.
    """

    name = "multilevel"

    def __init__(
        self, config: SchedulerConfig | None = None, table: ProcessTable | None = None
    ) -> None:
        """``config``: queues and β (defaults: docs/scheduling.md). ``table``: the process table to
        record calls in and read program facts from (a private one when ``None``)."""
        self.config = config if config is not None else SchedulerConfig()
        self.table = table if table is not None else ProcessTable()
        # The default in-level order given as itself (not through _queue_key): one call less
        # per queued call.
        default_key = type(self)._queue_key is MultiLevelScheduler._queue_key
        self._queues = LevelQueues(
            self.config.levels, key=fcfs_key if default_key else self._queue_key
        )
        self._seq = itertools.count()
        self._last_sweep_s = -math.inf
        #: Calls moved to Q1 by anti-starvation so far.
        self.promotions_total = 0
        #: Quantum expiries (one level each) so far.
        self.demotions_total = 0
        #: Queued calls dropped because their deadline passed.
        self.dropped_total = 0

    # --- policy hooks ------------------------------------------------------------------------

    def entry_priority_s(self, entry: ProgramEntry, call: CallEntry) -> float:
        """The priority (seconds of service; lower = sooner) a new call enters with."""
        raise NotImplementedError

    def _queue_key(self, call: CallEntry) -> tuple[float, ...]:
        return fcfs_key(call)

    #: Whether a used-up quantum demotes a call (a class's constant: read per streamed read).
    _demotes: ClassVar[bool] = True

    # --- Scheduler protocol ---------------------------------------------------------------

    def submit(self, call: CallEntry, now_s: float) -> None:
        entry = self.table.call_arrived(call.facts, now_s)
        call.seq = next(self._seq)
        call.priority_s = self.entry_priority_s(entry, call)
        level = self.config.level_for(call.priority_s)
        retained = entry.retained_until_s
        if self.config.boost_retained and retained is not None and retained >= now_s:
            level = 0
            call.retention_boost = True
        call.level = level
        call.quantum_tokens = 0
        call.enqueued_s = now_s
        call.level_entered_s = now_s
        self._queues.push(call)

    def pop(self, now_s: float) -> CallEntry | None:
        self.promote_starving(now_s)
        call = self._queues.pop()
        if call is None:
            return None
        call.wait_s += now_s - call.enqueued_s
        self.table.call_started(call.facts, now_s)
        return call

    def requeue(self, call: CallEntry, now_s: float) -> None:
        call.enqueued_s = now_s
        self._queues.push(call)  # same level and entry time: same place
        self.table.call_requeued(call.facts, now_s)

    def cancel(self, call: CallEntry, now_s: float) -> bool:
        if not self._queues.remove(call):
            return False
        call.wait_s += now_s - call.enqueued_s
        self.table.call_dropped(call.facts, now_s)
        return True

    def queued(self) -> int:
        return len(self._queues)

    def backend_priority(self, call: CallEntry) -> int:
        """The call's queue index: 0 for Q1, K-1 for QK. vLLM runs lower values first."""
        return call.level

    def on_tokens(self, call: CallEntry, new_tokens: int, now_s: float) -> None:
        """Count streamed tokens against the quantum; demote one level per used-up quantum
        (a running call: accounting only, see the module docstring)."""
        tokens = call.quantum_tokens = call.quantum_tokens + new_tokens
        if not self._demotes:
            return
        quanta = self.config.quanta_tokens
        # Per streamed read the quantum is mostly not used up: tested first (a level is at
        # most the last, so it indexes quanta), the last level's length only when it is.
        if tokens < quanta[call.level]:
            return
        last = len(quanta) - 1
        if call.level >= last:
            return
        demoted = False
        while call.level < last and call.quantum_tokens >= quanta[call.level]:
            call.quantum_tokens -= quanta[call.level]
            call.level += 1
            call.level_entered_s = now_s
            self.demotions_total += 1
            demoted = True
        if demoted and call in self._queues:
            self._queues.push(call)

    def token_counter(self, call: CallEntry) -> Callable[[CallEntry, int, float], None]:
        return self.on_tokens

    def on_finish(self, call: CallEntry, service_s: float, now_s: float) -> None:
        call.service_s += service_s
        self.table.call_finished(call.facts, service_s, now_s)

    def drop_expired(self, now_s: float) -> list[CallEntry]:
        dropped = self._queues.drop_expired(now_s)
        for call in dropped:
            call.wait_s += now_s - call.enqueued_s
            self.table.call_dropped(call.facts, now_s)
        self.dropped_total += len(dropped)
        return dropped

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        self.table.end(program, now_s)

    # --- anti-starvation ----------------------------------------------------------------------

    def promote_starving(self, now_s: float) -> list[CallEntry]:
        """Move starving queued calls (below Q1) to the tail of Q1; returns them.

        Autellix's anti-starvation rule: with ``W_program`` the program's finished waiting
        (process table), ``T_program`` its attained service, ``W_call`` this call's wait since
        its last reset and ``T_call`` its service since then, a call is starving when
        ``(W_program + W_call) / (T_program + T_call) >= β``. Only the call's own ``wait_s``,
        ``service_s`` and quantum are reset; the program's totals are not, so its other queued
        calls are likely promoted in the same sweep. Runs at most once per
        ``starvation_check_interval_s``; a no-op when β is unset.
        """
        beta = self.config.starvation_beta
        if beta is None or not self._queues:
            return []
        if now_s - self._last_sweep_s < self.config.starvation_check_interval_s:
            return []
        self._last_sweep_s = now_s
        promoted: list[CallEntry] = []
        for call in self._queues.calls(min_level=1):
            entry = self.table.get(call.facts.program)
            program_wait = entry.waiting_s if entry is not None else 0.0
            program_service = entry.attained_service_s if entry is not None else 0.0
            call_wait = call.wait_s + (now_s - call.enqueued_s)
            if not is_starving(beta, program_wait, program_service, call_wait, call.service_s):
                continue
            call.wait_s = 0.0
            call.service_s = 0.0
            call.quantum_tokens = 0
            call.enqueued_s = now_s
            call.level = 0
            call.level_entered_s = now_s
            call.promotions += 1
            self._queues.push(call)
            promoted.append(call)
        self.promotions_total += len(promoted)
        return promoted

    # --- introspection ------------------------------------------------------------------------

    def level_lengths(self) -> list[int]:
        """Queued calls per level (for metrics)."""
        return self._queues.lengths()

    def snapshot(self, now_s: float, limit: int = 200) -> dict[str, object]:
        """JSON-able queues: per level its range, quantum, length and up to ``limit`` calls
        in pop order."""
        bounds = (0.0, *self.config.boundaries_s, math.inf)
        queues = []
        for level in range(self.config.levels):
            calls = self._queues.ordered(level)
            queues.append(
                {
                    "level": level,
                    "range_s": [
                        bounds[level],
                        None if level == self.config.levels - 1 else bounds[level + 1],
                    ],
                    "quantum_tokens": self.config.quantum(level),
                    "length": len(calls),
                    "calls": [_call_json(c, now_s) for c in calls[:limit]],
                }
            )
        return {
            "policy": self.name,
            "queued": len(self._queues),
            "starvation_beta": self.config.starvation_beta,
            "promotions_total": self.promotions_total,
            "demotions_total": self.demotions_total,
            "dropped_total": self.dropped_total,
            "queues": queues,
        }


def _call_json(call: CallEntry, now_s: float) -> dict[str, object]:
    return {
        "call_id": call.facts.call_id,
        "session_id": call.facts.program.session_id,
        "program_id": call.facts.program.program_id,
        "thread_id": call.facts.thread_id,
        "priority_s": call.priority_s,
        "wait_s": call.wait_s + (now_s - call.enqueued_s),
        "deadline_s": None if math.isinf(call.facts.deadline_s) else call.facts.deadline_s,
        "promotions": call.promotions,
    }


class MlfqScheduler(MultiLevelScheduler):
    """Per-call MLFQ (FastServe-like): every new call enters Q1, whatever its program did."""

    name = "mlfq"

    def entry_priority_s(self, entry: ProgramEntry, call: CallEntry) -> float:
        return 0.0


class PlasScheduler(MultiLevelScheduler):
    """PLAS (Autellix, single-threaded programs): a new call enters with its program's
    attained service, the sum of the service charged to the program's finished calls."""

    name = "plas"

    def entry_priority_s(self, entry: ProgramEntry, call: CallEntry) -> float:
        return entry.attained_service_s


class AtlasScheduler(MultiLevelScheduler):
    """ATLAS (Autellix, multi-threaded programs): a new call inherits its program's
    critical-path scalar, so all parallel calls of a program share one priority."""

    name = "atlas"

    def entry_priority_s(self, entry: ProgramEntry, call: CallEntry) -> float:
        return entry.critical_path_s
