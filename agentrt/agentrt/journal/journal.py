"""``Journal``: the durable intent journal behind side-effecting tools (docs/journal.md).

It implements :class:`agentrt.journal.api.StepJournal` on a :class:`JournalStore`:

* side-effect step: intent ``STARTED`` committed durably → ``execute(key)`` → ``COMMITTED``
  with the result, or ``FAILED`` with the error; a re-run replays ``COMMITTED``, runs ``FAILED``
  again, and treats ``STARTED`` as an unknown outcome (reconcile hook, else re-run if
  idempotent, else :class:`UnknownOutcome`);
* read-only step (``kind="llm"`` or a tool without side effects): run, then record the result
  for replay; a journal that cannot be reached does not stop it;
* a different step at a recorded position: :class:`NonDeterminismError`.

``execute`` raising ``UnknownOutcome`` itself (a tool that cannot tell whether its effect
happened), or being cancelled, leaves the intent ``STARTED``: the outcome is unknown. A result
that cannot be stored raises :class:`ResultNotSerializable` and also leaves the intent
``STARTED`` (the effect did happen, but nothing can be replayed: a re-run must reconcile).

Program leases (``acquire_lease`` / ``release_lease``, taken by the SDK's ``Program``): one
program id runs in one place at a time, and every step write of a leased run is fenced by the
lease's epoch (``leasing``, docs/journal.md).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Literal, Self

import anyio
from anyio.abc import TaskGroup

from agentrt.errors import JournalError, JournalUnavailable, ProgramLeaseLost
from agentrt.journal import lease_store
from agentrt.journal.api import Execute, Reconcile, StepSpec
from agentrt.journal.keys import arguments_hash, idempotency_key
from agentrt.journal.leases import (
    DEFAULT_LEASE_TTL_S,
    Fence,
    LeaseRecord,
    ProgramLease,
    check_lease_ttl,
)
from agentrt.journal.leasing import LeaseKeeper
from agentrt.journal.records import (
    ProgramSummary,
    PurgePolicy,
    PurgeResult,
    StepPosition,
    StepRecord,
    StepStatus,
)
from agentrt.journal.steps import StepRunner
from agentrt.journal.store import JournalStore
from agentrt.journal.urls import make_store
from agentrt.json_types import JSONValue
from agentrt.tools.durations import DEFAULT_HISTORY, predict_duration

__all__ = ["Journal"]

_log = logging.getLogger("agentrt.journal")


class Journal:
    """The intent journal. Use as ``async with Journal(url) as journal: ...``.

    ``url``: ``None`` for ``./.agentrt/journal.sqlite`` under the current directory, a SQLite
    file path or URL, or a ``postgresql://`` URL (see ``agentrt.journal.urls``).
    ``synchronous``: ``"FULL"`` (default: every commit is on disk before the effect runs) or
    ``"NORMAL"`` (survives process crashes, not power loss; see docs/journal.md).
    ``busy_timeout_s``: SQLite lock wait. ``schema``/``pool_size``/``connect_timeout_s``:
    PostgreSQL. ``create=False``: do not create a missing SQLite file.
    ``duration_history``: observed durations kept per tool (the prediction is their median).
    ``retry_open_after_s``: after a failed connection, read-only steps skip the journal for
    this long before trying again (side-effect steps always try, and fail closed).
    ``lease_ttl_s``: length of a program lease (seconds; renewed every third of it while the
    journal is entered with ``async with``). ``lease_wait_s``: how long ``acquire_lease``
    waits for another holder's live lease before :class:`ProgramLeaseHeld` (0: at once).

    Entering the context does not fail when the store is unreachable (read-only steps must
    still run); side-effect steps then raise :class:`JournalUnavailable`. A corrupt or newer
    database raises :class:`SchemaVersionError` at once.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout_s: float = 5.0,
        schema: str | None = None,
        pool_size: int = 10,
        connect_timeout_s: float = 5.0,
        create: bool = True,
        duration_history: int = DEFAULT_HISTORY,
        retry_open_after_s: float = 1.0,
        lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
        lease_wait_s: float = 0.0,
    ) -> None:
        store = make_store(
            url,
            synchronous=synchronous,
            busy_timeout_s=busy_timeout_s,
            schema=schema,
            pool_size=pool_size,
            connect_timeout_s=connect_timeout_s,
            create=create,
        )
        self._setup(
            store,
            duration_history=duration_history,
            retry_open_after_s=retry_open_after_s,
            clock=time.time,
            lease_ttl_s=lease_ttl_s,
            lease_wait_s=lease_wait_s,
        )

    @classmethod
    def from_store(
        cls,
        store: JournalStore,
        *,
        duration_history: int = DEFAULT_HISTORY,
        retry_open_after_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
        lease_wait_s: float = 0.0,
    ) -> Journal:
        """A journal over an explicit store (``clock``: wall clock in epoch seconds, also used
        for lease expiry)."""
        journal = cls.__new__(cls)
        journal._setup(
            store,
            duration_history=duration_history,
            retry_open_after_s=retry_open_after_s,
            clock=clock,
            lease_ttl_s=lease_ttl_s,
            lease_wait_s=lease_wait_s,
        )
        return journal

    def _setup(
        self,
        store: JournalStore,
        *,
        duration_history: int,
        retry_open_after_s: float,
        clock: Callable[[], float],
        lease_ttl_s: float,
        lease_wait_s: float,
    ) -> None:
        if duration_history < 1:
            raise JournalError(f"duration_history must be >= 1, got {duration_history}")
        if not math.isfinite(lease_wait_s) or lease_wait_s < 0:
            raise JournalError(f"lease_wait_s must be >= 0 seconds, got {lease_wait_s}")
        self.store = store
        #: Random id written into every row this instance touches (which run wrote it).
        self.owner = uuid.uuid4().hex[:16]
        self._duration_history = duration_history
        self._retry_open_after_s = retry_open_after_s
        self._clock = clock
        self._runner = StepRunner(owner=self.owner, clock=clock)
        self._leases = LeaseKeeper(
            owner=self.owner, ttl_s=check_lease_ttl(lease_ttl_s), wait_s=lease_wait_s, clock=clock
        )
        self._task_group: TaskGroup | None = None
        self._ready = False
        self._closed = False
        self._last_open_failure = -math.inf
        self._open_lock: anyio.Lock | None = None

    # -- life cycle -------------------------------------------------------------------------

    async def connect(self, *, require: bool = True) -> None:
        """Connect and check / upgrade the schema. With ``require=False`` an unreachable store
        is tolerated (logged); it is retried lazily."""
        try:
            await self._ensure_open()
        except JournalUnavailable as exc:
            if require:
                raise
            _log.warning("journal unavailable, side-effect steps will fail closed: %s", exc)

    async def close(self) -> None:
        """Release the connections. The journal cannot be used afterwards."""
        self._closed = True
        self._ready = False
        await self.store.close()

    async def __aenter__(self) -> Self:
        await self.connect(require=False)
        # Lease heartbeats run here. Their task never raises, and the group is exited without
        # the body's exception, so the body's errors pass through unchanged (not grouped).
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = self._leases.task_group = task_group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task_group, self._task_group = self._task_group, None
        self._leases.task_group = None
        try:
            await self._leases.release_all(self.store if self._ready else None)
            if task_group is not None:
                task_group.cancel_scope.cancel()
                await task_group.__aexit__(None, None, None)
        finally:
            await self.close()

    @property
    def available(self) -> bool:
        """True once the store was reached and its schema checked."""
        return self._ready

    async def _ensure_open(self) -> JournalStore:
        if self._closed:
            raise JournalError("the journal is closed")
        if self._ready:
            return self.store
        if self._open_lock is None:
            self._open_lock = anyio.Lock()
        async with self._open_lock:
            if not self._ready:
                try:
                    await self.store.open()
                except JournalUnavailable:
                    self._last_open_failure = time.monotonic()
                    raise
                self._ready = True
        return self.store

    async def _optional_store(self) -> JournalStore | None:
        """The store if it can be reached now, else ``None`` (read-only steps)."""
        if self._ready:
            return self.store
        if time.monotonic() - self._last_open_failure < self._retry_open_after_s:
            return None
        try:
            return await self._ensure_open()
        except JournalUnavailable as exc:
            _log.warning("journal unavailable, running a read-only step unrecorded: %s", exc)
            return None

    # -- the StepJournal protocol -----------------------------------------------------------

    async def run_step(
        self, step: StepSpec, execute: Execute, *, reconcile: Reconcile | None = None
    ) -> JSONValue:
        """Run ``execute`` at most once per step identity (see the module docstring and
        :meth:`agentrt.journal.api.StepJournal.run_step`)."""
        _check_identity(step)
        args_hash = arguments_hash(step.arguments)
        position = StepPosition(step.program_id, step.thread_id, step.seq)
        key = idempotency_key(
            step.program_id, step.thread_id, step.seq, step.kind, step.name, args_hash
        )
        try:
            if step.side_effect:
                store = await self._ensure_open()  # fail closed: JournalUnavailable
                fence = await self._leases.fence(store, step.program_id, side_effect=True)
                return await self._runner.run_side_effect(
                    store, step, position, key, args_hash, execute, reconcile, fence
                )
            fence = await self._leases.fence(self.store, step.program_id, side_effect=False)
            return await self._runner.run_read_only(
                await self._optional_store(), step, position, key, args_hash, execute, fence
            )
        except ProgramLeaseLost as exc:
            lease = self._leases.held(step.program_id)
            if lease is not None:
                self._leases.mark_lost(lease, str(exc))
            raise

    # -- program leases -----------------------------------------------------------------------

    async def acquire_lease(
        self, program_id: str, *, wait_s: float | None = None, required: bool = True
    ) -> ProgramLease | None:
        """Take the lease of ``program_id``: from now on the program runs here only.

        Atomic on both databases (one conditional upsert). Succeeds when the program was never
        leased, its lease was released, or it expired (its holder stopped renewing: the
        takeover increments the epoch, which fences the old holder's writes). Otherwise waits
        up to ``wait_s`` seconds (default ``lease_wait_s``) and raises
        :class:`ProgramLeaseHeld` naming the holder and the expiry; a second run of the same
        id inside this journal is refused at once. While the journal is entered with
        ``async with``, the lease is renewed every ``lease_ttl_s / 3`` seconds.

        ``required=False``: an unreachable store is not an error (``None`` is returned; the
        program's first side-effect step acquires the lease, read-only steps run unleased).
        """
        if not isinstance(program_id, str) or not program_id or len(program_id) > 255:
            raise JournalError("program_id must be a string of 1..255 characters")
        try:
            store = await self._ensure_open()
            return await self._leases.acquire(store, program_id, wait_s=wait_s)
        except JournalUnavailable as exc:
            if required:
                raise
            _log.warning("program %r starts without its lease (journal down): %s", program_id, exc)
            self._leases.defer(program_id)
            return None

    async def release_lease(self, program_id: str) -> None:
        """Release this journal's lease of ``program_id`` (no-op when it holds none; never
        raises for an unreachable store: the lease then expires after ``lease_ttl_s``)."""
        await self._leases.release(self.store if self._ready else None, program_id)

    def held_lease(self, program_id: str) -> ProgramLease | None:
        """The lease of ``program_id`` this journal holds (``lost`` tells if it was lost)."""
        return self._leases.held(program_id)

    async def leases(
        self, program_ids: list[str] | None = None, *, limit: int = 50
    ) -> list[LeaseRecord]:
        """Lease rows (of ``program_ids``, else the ``limit`` most recently renewed)."""
        return await lease_store.list_leases(await self._ensure_open(), program_ids, limit=limit)

    async def break_lease(self, program_id: str) -> LeaseRecord | None:
        """Operator: release ``program_id``'s lease whoever holds it and increment its epoch,
        so that a holder still running is fenced at once. Returns the lease as it was."""
        store = await self._ensure_open()
        return await lease_store.break_lease(store, program_id, now=self._clock())

    async def record_tool_duration(self, tool_name: str, duration_s: float) -> None:
        """Add one observed duration (seconds); skipped (logged) when the store is down or
        the value is negative / not finite."""
        if not math.isfinite(duration_s) or duration_s < 0:
            _log.warning("ignoring invalid duration %r of tool %r", duration_s, tool_name)
            return
        store = await self._optional_store()
        if store is None:
            return
        try:
            await store.add_tool_duration(
                tool_name, duration_s, observed_at=self._clock(), keep=self._duration_history
            )
        except JournalUnavailable as exc:
            _log.warning("tool duration not recorded: %s", exc)

    async def predict_tool_duration(self, tool_name: str) -> float | None:
        """Median of the tool's recent durations (seconds); ``None`` without history or when
        the store is down."""
        return predict_duration(await self.tool_duration_history(tool_name))

    async def tool_duration_history(self, tool_name: str) -> list[float]:
        """The tool's recent durations (seconds), newest first (empty when unavailable)."""
        store = await self._optional_store()
        if store is None:
            return []
        try:
            return await store.recent_tool_durations(tool_name, limit=self._duration_history)
        except JournalUnavailable:
            return []

    # -- operations ---------------------------------------------------------------------------

    async def program_steps(self, program_id: str) -> list[StepRecord]:
        """Every recorded step of a program (thread, then sequence order)."""
        return await (await self._ensure_open()).program_steps(program_id)

    async def list_programs(
        self, *, status: StepStatus | None = None, limit: int = 50
    ) -> list[ProgramSummary]:
        """Programs, most recently changed first (``status``: having a step in it)."""
        return await (await self._ensure_open()).list_programs(status=status, limit=limit)

    async def purge(self, policy: PurgePolicy, *, dry_run: bool = False) -> PurgeResult:
        """Delete the whole programs selected by ``policy`` (``dry_run``: only count)."""
        store = await self._ensure_open()
        return await store.purge(policy, now=self._clock(), dry_run=dry_run)

    async def resolve_unknown(
        self, key: str, *, happened: bool, result: JSONValue = None
    ) -> StepRecord:
        """Settle an unknown outcome by hand (an operator checked the outside world).

        ``happened=True``: the step becomes COMMITTED with ``result`` (replayed from now on).
        ``happened=False``: it becomes FAILED, so the next run executes it (same key).
        Raises :class:`JournalError` when ``key`` is not a STARTED step.
        """
        store = await self._ensure_open()
        record = await store.get_step_by_key(key)
        if record is None:
            raise JournalError(f"no step with key {key} in journal {store.where}")
        if record.status is not StepStatus.STARTED:
            raise JournalError(f"{record.describe()} is not an unknown outcome")
        # Not while the program runs somewhere: refused (ProgramLeaseHeld) under a live lease.
        fence = Fence(record.position.program_id, self.owner, None, self._clock())
        if happened:
            ok = await self._runner.commit(store, record, result, duration_s=None, fence=fence)
        else:
            ok = await store.update_step(
                record.position,
                expect_status=StepStatus.STARTED,
                expect_attempts=record.attempts,
                values={
                    "status": StepStatus.FAILED.value,
                    "error_type": "ResolvedNotDone",
                    "error_message": "resolved by an operator: the effect did not happen",
                    "updated_at": self._clock(),
                },
                fence=fence,
            )
        if not ok:
            raise JournalError(f"{record.describe()} changed while being resolved")
        updated = await store.get_step(record.position)
        assert updated is not None
        return updated


def _check_identity(step: StepSpec) -> None:
    """Refuse identities the store cannot hold, before anything runs."""
    for field in ("program_id", "thread_id", "name"):
        value = getattr(step, field)
        if not isinstance(value, str) or not value or len(value) > 255:
            raise JournalError(f"{step!r}: {field} must be a string of 1..255 characters")
    if step.kind not in ("tool", "llm"):
        raise JournalError(f"{step!r}: kind must be 'tool' or 'llm'")
    if isinstance(step.seq, bool) or not isinstance(step.seq, int) or step.seq < 0:
        raise JournalError(f"{step!r}: seq must be an int >= 0")
