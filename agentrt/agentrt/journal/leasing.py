"""The life cycle of the program leases one journal holds: acquire (optionally waiting),
renew in the background, fence the program's step writes, release.

One ``LeaseKeeper`` per ``Journal``. Its ``owner`` is the journal's random id, so two runtimes
(even in one process) are two holders; a second run of a program id inside the *same* journal
is refused locally before any I/O. Heartbeats run in the task group the journal enters with
``async with``; a journal used without ``async with`` renews on demand instead (before every
side effect whose lease has less than ``ttl_s / 3`` left), which keeps the fencing guarantee
but lets an idle program's lease expire.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup, TaskStatus

from agentrt.errors import JournalError, JournalUnavailable, ProgramLeaseHeld, ProgramLeaseLost
from agentrt.journal import lease_store
from agentrt.journal.leases import Fence, ProgramLease
from agentrt.journal.store import JournalStore, lease_held_error

__all__ = ["LeaseKeeper"]

_log = logging.getLogger("agentrt.journal")
#: Bounds (seconds) of one poll while waiting for another holder's lease.
_MIN_POLL_S, _MAX_POLL_S = 0.05, 1.0


class LeaseKeeper:
    """Program leases of one journal. ``owner``: the journal's random id; ``ttl_s``: lease
    length (seconds); ``wait_s``: default wait for a held lease (0: fail at once); ``clock``:
    wall clock (epoch seconds) for expiry times."""

    def __init__(
        self, *, owner: str, ttl_s: float, wait_s: float, clock: Callable[[], float]
    ) -> None:
        self.owner = owner
        self.holder = f"{socket.gethostname()}:{os.getpid()}/{owner}"
        self.ttl_s = ttl_s
        self.wait_s = wait_s
        self.clock = clock
        #: Where heartbeats run (set while the journal is entered with ``async with``).
        self.task_group: TaskGroup | None = None
        self._held: dict[str, ProgramLease] = {}
        self._beats: dict[str, anyio.CancelScope] = {}
        #: Program ids being acquired, or whose acquisition waits for the store to come back.
        self._claimed: set[str] = set()
        self._deferred: set[str] = set()
        self._defer_lock: anyio.Lock | None = None

    def held(self, program_id: str) -> ProgramLease | None:
        return self._held.get(program_id)

    # -- acquire / release ------------------------------------------------------------------

    async def acquire(
        self, store: JournalStore, program_id: str, *, wait_s: float | None = None
    ) -> ProgramLease:
        """Take the lease of ``program_id`` (see ``Journal.acquire_lease``)."""
        if program_id in self._held or program_id in self._claimed:
            held = self._held.get(program_id)
            raise ProgramLeaseHeld(
                f"program {program_id!r} is already running through this journal ({self.holder}); "
                "run a program id in one place at a time",
                program_id=program_id,
                holder=self.holder,
                expires_at=held.expires_at if held is not None else math.inf,
            )
        wait = self.wait_s if wait_s is None else wait_s
        give_up = time.monotonic() + max(0.0, wait)
        self._claimed.add(program_id)  # before any await: a concurrent local run is refused
        try:
            while True:
                now = self.clock()
                lease, current = await lease_store.try_acquire(
                    store,
                    program_id,
                    owner=self.owner,
                    holder=self.holder,
                    ttl_s=self.ttl_s,
                    now=now,
                )
                if lease is not None:
                    break
                left = give_up - time.monotonic()
                if current is None or left <= 0:
                    if current is None:  # the row vanished (purged) between the two statements
                        continue
                    raise lease_held_error(current, now)
                await anyio.sleep(
                    min(left, _MAX_POLL_S, max(_MIN_POLL_S, current.expires_at - now))
                )
            self._held[program_id] = lease
            self._deferred.discard(program_id)
            if self.task_group is not None:
                self._beats[program_id] = await self.task_group.start(self._beat, store, lease)
        finally:
            self._claimed.discard(program_id)
        _log.debug("lease of program %r taken (epoch %d)", program_id, lease.epoch)
        return lease

    def defer(self, program_id: str) -> None:
        """Remember that ``program_id`` runs here without its lease yet (the store was down at
        its start): its first side-effect step acquires it."""
        self._deferred.add(program_id)

    async def release(self, store: JournalStore | None, program_id: str) -> None:
        """End this journal's lease of ``program_id`` (no-op when it holds none). Never raises
        for an unreachable store: the lease then simply expires after ``ttl_s``."""
        self._deferred.discard(program_id)
        lease = self._held.pop(program_id, None)
        beat = self._beats.pop(program_id, None)
        if beat is not None:
            beat.cancel()
        if lease is None or lease.lost or store is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                if not await lease_store.release(store, lease, now=self.clock()):
                    _log.warning("%r was no longer ours at release", lease)
            except JournalError as exc:
                _log.warning("%r not released (it expires on its own): %s", lease, exc)

    async def release_all(self, store: JournalStore | None) -> None:
        for program_id in list(self._held):
            await self.release(store, program_id)
        self._deferred.clear()

    # -- fencing ----------------------------------------------------------------------------

    async def fence(self, store: JournalStore, program_id: str, *, side_effect: bool) -> Fence:
        """The fence for a step write of ``program_id`` by this journal.

        Raises :class:`ProgramLeaseLost` when the lease is known to be lost. Before a side
        effect (``side_effect``), a deferred lease is acquired now, and a lease with less than
        ``ttl_s / 3`` left is renewed first: an effect never starts on a lease that could run
        out (and be taken over) while it runs.
        """
        if side_effect and program_id in self._deferred:
            if self._defer_lock is None:
                self._defer_lock = anyio.Lock()
            async with self._defer_lock:  # parallel threads of the program: acquire once
                if program_id in self._deferred:
                    await self.acquire(store, program_id, wait_s=0.0)
        lease = self._held.get(program_id)
        now = self.clock()
        if lease is None:
            return Fence(program_id, self.owner, None, now)
        if lease.lost:
            raise ProgramLeaseLost(f"{lease!r}: {lease.lost_reason}; this run must stop")
        renewal_due = side_effect and lease.needs_renewal(now)
        if renewal_due and not await lease_store.renew(store, lease, now=now):
            self.mark_lost(lease, "taken over or broken (found before a side effect)")
            raise ProgramLeaseLost(f"{lease!r}: {lease.lost_reason}; this run must stop")
        return lease.fence(now)

    def mark_lost(self, lease: ProgramLease, reason: str) -> None:
        if not lease.lost:
            lease.lost_reason = reason
            _log.error("program lease lost: %r: %s", lease, reason)

    # -- heartbeat ----------------------------------------------------------------------------

    async def _beat(
        self,
        store: JournalStore,
        lease: ProgramLease,
        *,
        task_status: TaskStatus[anyio.CancelScope] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Renew ``lease`` every ``ttl_s / 3`` seconds until released or lost. Never raises (it
        runs in the journal's task group, whose failure would cancel the runtime's work)."""
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            while not lease.lost:
                await anyio.sleep(lease.ttl_s / 3)
                try:
                    renewed = await lease_store.renew(store, lease, now=self.clock())
                except JournalUnavailable as exc:  # try again next beat; fencing stays safe
                    _log.warning("%r not renewed: %s", lease, exc)
                    continue
                except Exception:
                    _log.exception("%r: renewal failed", lease)
                    continue
                if not renewed:
                    self.mark_lost(lease, "taken over or broken while this run held it")
