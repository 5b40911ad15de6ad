"""Live retentions of the retention driver (:mod:`.driver`): what is held where, until when.

The policy decides; the tracker remembers each decision as a :class:`Retention` and tells the
driver what to release and when to re-warm. It guarantees the memory contract of
docs/routing.md ("KV retention"): a retention ends at the first of (its TTL, the thread's next
call admitted, the program's end) — :meth:`RetentionTracker.release_program`
returns every retention of an ended program, and :meth:`RetentionTracker.start` refuses to
retain for a program that has ended; an ended retention drops its payload at once (the expiry
heap may hold the object until its TTL). Pure bookkeeping: no clock, no I/O; the driver
performs pins / unpins / re-warms.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass, field

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey

__all__ = ["Retention", "RetentionTracker", "pin_id_for"]


def pin_id_for(program: ProgramKey, thread_id: str) -> str:
    """A URL-safe pin id, stable for a program thread (``agentrt-`` + 20 hex digits)."""
    parts = (program.tenant or "", program.session_id, program.program_id, thread_id)
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=10)
    return "agentrt-" + digest.hexdigest()


@dataclass(slots=True)
class Retention:
    """One retained thread context."""

    program: ProgramKey
    thread_id: str
    #: Backend holding the KV.
    backend_id: str
    #: Id of the native pin on the backend (emulator / SGLang): stable per program thread,
    #: URL-safe (:func:`pin_id_for`).
    pin_id: str
    started_s: float
    #: End of the TTL (seconds, driver's clock).
    until_s: float
    #: Context length retained (tokens).
    context_tokens: int
    #: When to re-warm a backend without native pins (seconds); ``math.inf`` = never.
    rewarm_at_s: float = math.inf
    rewarmed: bool = False
    #: The backend holds the KV with a native pin (the driver set it when it asked for one).
    pinned: bool = False
    #: When the thread is expected back (seconds, driver's clock; within the TTL).
    due_s: float = math.inf
    #: How long a pin holds on once the thread is back, until its call is admitted (seconds).
    hold_after_return_s: float = 0.0
    #: Free-form driver data (e.g. the prompt to re-warm with); never logged. ``None`` once
    #: the retention ended (nothing outlives it).
    payload: object = field(default=None, repr=False)


class RetentionTracker:
    """Retentions by (program, thread), with expiry and re-warm times."""

    def __init__(self, *, rewarm_lead_s: float = 0.5, remember_ended: int = 10_000) -> None:
        """``rewarm_lead_s``: re-warm this long before the predicted return (seconds).
        ``remember_ended``: how many ended program ids to remember (so that a late tool
        event cannot retain for them); the oldest are forgotten first."""
        if not rewarm_lead_s >= 0:
            raise ConfigError(f"rewarm_lead_s must be >= 0, got {rewarm_lead_s!r}")
        if remember_ended < 1:
            raise ConfigError(f"remember_ended must be >= 1, got {remember_ended!r}")
        self.rewarm_lead_s = float(rewarm_lead_s)
        self.remember_ended = remember_ended
        self._live: dict[ProgramKey, dict[str, Retention]] = {}
        self._expiry: list[tuple[float, int, Retention]] = []
        self._ended: OrderedDict[ProgramKey, None] = OrderedDict()
        self._seq = 0

    def __len__(self) -> int:
        return sum(len(t) for t in self._live.values())

    def holds_any(self) -> bool:
        """Whether some retention is live (O(1): a program's entry goes with its last one)."""
        return bool(self._live)

    def start(
        self,
        program: ProgramKey,
        thread_id: str,
        *,
        backend_id: str,
        ttl_s: float,
        now_s: float,
        context_tokens: int,
        predicted_return_s: float | None = None,
        payload: object = None,
    ) -> tuple[Retention | None, Retention | None]:
        """Retain a thread's context for ``ttl_s`` seconds from ``now_s``.

        Returns ``(new, replaced)``: the new retention (``None`` when ``ttl_s <= 0`` or the
        program has ended) and the thread's earlier retention it replaces (release it).
        ``predicted_return_s`` (seconds from now) sets the re-warm time
        ``now + predicted - rewarm_lead_s`` when it falls inside the TTL.
        """
        replaced = self.release_thread(program, thread_id)
        if not now_s + ttl_s > now_s or program in self._ended:  # 0, tiny or NaN TTLs
            return None, replaced
        rewarm = math.inf
        if predicted_return_s is not None and 0 <= predicted_return_s < ttl_s:
            rewarm = now_s + max(0.0, predicted_return_s - self.rewarm_lead_s)
        retention = Retention(
            program,
            thread_id,
            backend_id,
            pin_id_for(program, thread_id),
            now_s,
            now_s + ttl_s,
            context_tokens,
            rewarm,
            payload=payload,
        )
        self._live.setdefault(program, {})[thread_id] = retention
        self._seq += 1
        heapq.heappush(self._expiry, (retention.until_s, self._seq, retention))
        return retention, replaced

    def extend(self, retention: Retention, until_s: float) -> bool:
        """Move a live retention's end to ``until_s`` when that is later; True if moved."""
        if self.get(retention.program, retention.thread_id) is not retention:
            return False
        if not until_s > retention.until_s:
            return False
        retention.until_s = until_s
        self._seq += 1
        heapq.heappush(self._expiry, (until_s, self._seq, retention))
        return True

    def get(self, program: ProgramKey, thread_id: str) -> Retention | None:
        return self._live.get(program, {}).get(thread_id)

    def retained_until(self, program: ProgramKey) -> float | None:
        """The latest TTL end among the program's retentions; ``None`` when none."""
        threads = self._live.get(program)
        return max(r.until_s for r in threads.values()) if threads else None

    def release_thread(self, program: ProgramKey, thread_id: str) -> Retention | None:
        """The thread's next call started (or it is retained anew): end its retention."""
        threads = self._live.get(program)
        if not threads:
            return None
        retention = threads.pop(thread_id, None)
        if not threads:
            del self._live[program]
        if retention is not None:
            retention.payload = None  # the expiry heap may hold it until its TTL: not its prompt
        return retention

    def release_program(self, program: ProgramKey) -> list[Retention]:
        """The program ended: end (and return) all its retentions; later :meth:`start` calls
        for it are refused until :meth:`forget_ended` (a program id reused by a new run)."""
        self._ended[program] = None
        self._ended.move_to_end(program)
        while len(self._ended) > self.remember_ended:
            self._ended.popitem(last=False)
        released = list(self._live.pop(program, {}).values())
        for retention in released:
            retention.payload = None
        return released

    def forget_ended(self, program: ProgramKey) -> None:
        """Allow retention again for a program id that starts anew."""
        self._ended.pop(program, None)

    def expire(self, now_s: float) -> list[Retention]:
        """End (and return) every retention whose TTL is over (``until_s <= now_s``)."""
        expired: list[Retention] = []
        heap = self._expiry
        while heap and heap[0][0] <= now_s:
            until_s, _, retention = heapq.heappop(heap)
            live = self._live.get(retention.program, {}).get(retention.thread_id)
            if live is retention and until_s == retention.until_s:  # not an extended one
                self.release_thread(retention.program, retention.thread_id)
                expired.append(retention)
        return expired

    @property
    def next_expiry_s(self) -> float:
        """Earliest TTL end of a live retention (seconds); ``math.inf`` when none."""
        heap = self._expiry
        while heap:
            until_s, _, retention = heap[0]
            live = self._live.get(retention.program, {}).get(retention.thread_id)
            if live is retention and until_s == retention.until_s:
                return until_s
            heapq.heappop(heap)
        return math.inf

    @property
    def next_rewarm_s(self) -> float:
        """Earliest re-warm time not yet handled (seconds); ``math.inf`` when none."""
        return min(
            (
                r.rewarm_at_s
                for threads in self._live.values()
                for r in threads.values()
                if not r.rewarmed
            ),
            default=math.inf,
        )

    def due_rewarms(self, now_s: float) -> list[Retention]:
        """Live retentions whose re-warm time has come and that were not re-warmed yet; each
        is marked re-warmed (the driver sends it only if the backend has spare capacity)."""
        due = []
        for threads in self._live.values():
            for retention in threads.values():
                if not retention.rewarmed and retention.rewarm_at_s <= now_s < retention.until_s:
                    retention.rewarmed = True
                    due.append(retention)
        return due
