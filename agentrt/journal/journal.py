"""``Journal``: the durable intent journal behind side-effecting tools (BRIEF.md §6).

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
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from types import TracebackType
from typing import Any, Literal, Self

import anyio

from agentrt.errors import JournalError, JournalUnavailable, NonDeterminismError, UnknownOutcome
from agentrt.journal.api import Execute, Reconcile, ReconcileResult, StepSpec
from agentrt.journal.decide import Action, decide, mismatch_message
from agentrt.journal.durations import predict_duration
from agentrt.journal.keys import arguments_hash, encode_result, idempotency_key
from agentrt.journal.records import (
    ProgramSummary,
    PurgePolicy,
    PurgeResult,
    StepPosition,
    StepRecord,
    StepStatus,
)
from agentrt.journal.store import JournalStore
from agentrt.journal.urls import make_store

__all__ = ["Journal"]

_log = logging.getLogger("agentrt.journal")
#: How often one run_step re-reads a row that a concurrent run of the same program changed.
_MAX_RACES = 5


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
        duration_history: int = 32,
        retry_open_after_s: float = 1.0,
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
        )

    @classmethod
    def from_store(
        cls,
        store: JournalStore,
        *,
        duration_history: int = 32,
        retry_open_after_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> Journal:
        """A journal over an explicit store (``clock``: wall clock in epoch seconds)."""
        journal = cls.__new__(cls)
        journal._setup(
            store,
            duration_history=duration_history,
            retry_open_after_s=retry_open_after_s,
            clock=clock,
        )
        return journal

    def _setup(
        self,
        store: JournalStore,
        *,
        duration_history: int,
        retry_open_after_s: float,
        clock: Callable[[], float],
    ) -> None:
        if duration_history < 1:
            raise JournalError(f"duration_history must be >= 1, got {duration_history}")
        self.store = store
        #: Random id written into every row this instance touches (which run wrote it).
        self.owner = uuid.uuid4().hex[:16]
        self._duration_history = duration_history
        self._retry_open_after_s = retry_open_after_s
        self._clock = clock
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
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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
    ) -> Any:
        """Run ``execute`` at most once per step identity (see the module docstring and
        :meth:`agentrt.journal.api.StepJournal.run_step`)."""
        args_hash = arguments_hash(step.arguments)
        position = StepPosition(step.program_id, step.thread_id, step.seq)
        key = idempotency_key(
            step.program_id, step.thread_id, step.seq, step.kind, step.name, args_hash
        )
        if step.side_effect:
            return await self._run_side_effect(step, position, key, args_hash, execute, reconcile)
        return await self._run_read_only(step, position, key, args_hash, execute)

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

    # -- side-effect steps ------------------------------------------------------------------

    async def _run_side_effect(
        self,
        step: StepSpec,
        position: StepPosition,
        key: str,
        args_hash: str,
        execute: Execute,
        reconcile: Reconcile | None,
    ) -> Any:
        store = await self._ensure_open()  # fail closed: JournalUnavailable
        # First runs are the common case: try the intent at once (one durable write); only a
        # taken position costs the extra read.
        fresh = self._new_record(step, position, key, args_hash)
        if await store.insert_step(fresh):
            return await self._execute_effect(store, fresh, execute)
        record = await store.get_step(position)
        for _ in range(_MAX_RACES):
            action = decide(record, step, args_hash, has_reconcile=reconcile is not None)
            if action is Action.RUN_NEW:
                fresh = self._new_record(step, position, key, args_hash)
                if await store.insert_step(fresh):
                    return await self._execute_effect(store, fresh, execute)
            else:
                assert record is not None
                if action is Action.MISMATCH:
                    raise NonDeterminismError(mismatch_message(record, step, args_hash))
                if action is Action.REPLAY:
                    return record.result
                if action is Action.UNKNOWN:
                    raise UnknownOutcome(_unknown_message(record), key=key, intent=record)
                if action is Action.RECONCILE:
                    assert reconcile is not None
                    outcome = await _ask(reconcile, record)
                    if outcome.status == "unknown":
                        raise UnknownOutcome(
                            f"{record.describe()}: the reconcile hook could not tell whether "
                            "the effect happened",
                            key=key,
                            intent=record,
                        )
                    if outcome.status == "done":
                        if await self._commit(store, record, outcome.result, duration_s=None):
                            return outcome.result
                    elif (restarted := await self._restart(store, record)) is not None:
                        return await self._execute_effect(store, restarted, execute)
                elif (restarted := await self._restart(store, record)) is not None:
                    # RETRY after FAILED, or RERUN of an idempotent unknown outcome.
                    return await self._execute_effect(store, restarted, execute)
            record = await store.get_step(position)  # lost a race with another run: look again
        raise JournalError(
            f"step at {position} kept changing under concurrent runs of program "
            f"{position.program_id!r}; run a program id in one place at a time"
        )

    def _new_record(
        self, step: StepSpec, position: StepPosition, key: str, args_hash: str
    ) -> StepRecord:
        now = self._clock()
        return StepRecord(
            position=position,
            kind=step.kind,
            name=step.name,
            args_hash=args_hash,
            key=key,
            status=StepStatus.STARTED,
            side_effect=step.side_effect,
            idempotent=step.idempotent,
            attempts=1,
            node_id=step.node_id,
            result_json=None,
            error_type=None,
            error_message=None,
            owner=self.owner,
            created_at=now,
            started_at=now,
            updated_at=now,
            duration_s=None,
        )

    async def _restart(self, store: JournalStore, record: StepRecord) -> StepRecord | None:
        """Durably start attempt ``attempts + 1``; ``None`` when the row changed meanwhile."""
        now = self._clock()
        restarted = replace(
            record,
            status=StepStatus.STARTED,
            attempts=record.attempts + 1,
            owner=self.owner,
            started_at=now,
            updated_at=now,
            error_type=None,
            error_message=None,
            duration_s=None,
        )
        values = {
            "status": StepStatus.STARTED.value,
            "attempts": restarted.attempts,
            "owner": self.owner,
            "started_at": now,
            "updated_at": now,
            "error_type": None,
            "error_message": None,
            "duration_s": None,
        }
        ok = await store.update_step(
            record.position,
            expect_status=record.status,
            expect_attempts=record.attempts,
            values=values,
        )
        return restarted if ok else None

    async def _execute_effect(
        self, store: JournalStore, record: StepRecord, execute: Execute
    ) -> Any:
        started = time.monotonic()
        try:
            result = await execute(record.key)
        except UnknownOutcome:
            raise  # the tool itself cannot tell: the intent stays STARTED
        except Exception as exc:
            await self._finish_failed(store, record, exc, time.monotonic() - started)
            raise
        duration_s = time.monotonic() - started
        try:
            committed = await self._commit(store, record, result, duration_s=duration_s)
        except JournalUnavailable as exc:
            raise JournalUnavailable(
                f"{record.describe()}: the effect ran but its result could not be recorded; "
                f"a re-run will treat it as an unknown outcome ({exc})"
            ) from exc
        if not committed:
            raise JournalError(
                f"{record.describe()}: the row changed while the step ran (another run of the "
                "same program?); its result was not recorded"
            )
        return result

    async def _commit(
        self, store: JournalStore, record: StepRecord, result: Any, *, duration_s: float | None
    ) -> bool:
        """STARTED → COMMITTED with ``result``; raises ResultNotSerializable (the row then
        stays STARTED, annotated with the error)."""
        try:
            result_json = encode_result(result, what=record.describe())
        except JournalError as exc:
            await self._annotate(store, record, exc)
            raise
        values = {
            "status": StepStatus.COMMITTED.value,
            "result_json": result_json,
            "error_type": None,
            "error_message": None,
            "updated_at": self._clock(),
            "duration_s": duration_s,
            "owner": self.owner,
        }
        with anyio.CancelScope(shield=True):  # the effect happened: try hard to record it
            committed = await store.update_step(
                record.position,
                expect_status=StepStatus.STARTED,
                expect_attempts=record.attempts,
                values=values,
            )
        return committed

    async def _finish_failed(
        self, store: JournalStore, record: StepRecord, exc: Exception, duration_s: float
    ) -> None:
        values = {
            "status": StepStatus.FAILED.value,
            "error_type": type(exc).__name__,
            "error_message": str(exc)[:2000],
            "updated_at": self._clock(),
            "duration_s": duration_s,
        }
        try:
            with anyio.CancelScope(shield=True):
                await store.update_step(
                    record.position,
                    expect_status=StepStatus.STARTED,
                    expect_attempts=record.attempts,
                    values=values,
                )
        except JournalError as journal_exc:  # stays STARTED: a re-run sees an unknown outcome
            _log.warning("%s: failure not recorded: %s", record.describe(), journal_exc)

    async def _annotate(self, store: JournalStore, record: StepRecord, exc: Exception) -> None:
        values = {
            "error_type": type(exc).__name__,
            "error_message": str(exc)[:2000],
            "updated_at": self._clock(),
        }
        try:
            await store.update_step(
                record.position,
                expect_status=StepStatus.STARTED,
                expect_attempts=record.attempts,
                values=values,
            )
        except JournalError as journal_exc:
            _log.warning("%s: error not recorded: %s", record.describe(), journal_exc)

    # -- read-only steps ---------------------------------------------------------------------

    async def _run_read_only(
        self,
        step: StepSpec,
        position: StepPosition,
        key: str,
        args_hash: str,
        execute: Execute,
    ) -> Any:
        store = await self._optional_store()
        record = None
        if store is not None:
            try:
                record = await store.get_step(position)
            except JournalUnavailable as exc:
                _log.warning("journal unavailable, running a read-only step unrecorded: %s", exc)
                store = None
        action = decide(record, step, args_hash, has_reconcile=False)
        if record is not None:
            if action is Action.MISMATCH:
                raise NonDeterminismError(mismatch_message(record, step, args_hash))
            if action is Action.REPLAY:
                return record.result
            if action is Action.UNKNOWN:  # recorded as a side effect by an older version
                raise UnknownOutcome(_unknown_message(record), key=key, intent=record)
        fresh = self._new_record(step, position, key, args_hash)
        if record is not None:
            fresh = replace(fresh, attempts=record.attempts + 1, created_at=record.created_at)
        started = time.monotonic()
        try:
            result = await execute(key)
        except Exception as exc:
            failed = replace(
                fresh,
                status=StepStatus.FAILED,
                error_type=type(exc).__name__,
                error_message=str(exc)[:2000],
                duration_s=time.monotonic() - started,
                updated_at=self._clock(),
            )
            await _upsert_quietly(store, failed)
            raise
        done = replace(
            fresh,
            status=StepStatus.COMMITTED,
            result_json=encode_result(result, what=fresh.describe()),
            duration_s=time.monotonic() - started,
            updated_at=self._clock(),
        )
        await _upsert_quietly(store, done)
        return result

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

    async def resolve_unknown(self, key: str, *, happened: bool, result: Any = None) -> StepRecord:
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
        if happened:
            ok = await self._commit(store, record, result, duration_s=None)
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
            )
        if not ok:
            raise JournalError(f"{record.describe()} changed while being resolved")
        updated = await store.get_step(record.position)
        assert updated is not None
        return updated


async def _ask(reconcile: Reconcile, record: StepRecord) -> ReconcileResult:
    try:
        outcome = await reconcile(record.key)
    except Exception as exc:
        raise UnknownOutcome(
            f"{record.describe()}: the reconcile hook failed ({type(exc).__name__}: {exc})",
            key=record.key,
            intent=record,
        ) from exc
    if not isinstance(outcome, ReconcileResult) or outcome.status not in (
        "done",
        "not_done",
        "unknown",
    ):
        raise UnknownOutcome(
            f"{record.describe()}: the reconcile hook returned {type(outcome).__name__}, "
            "not a ReconcileResult",
            key=record.key,
            intent=record,
        )
    return outcome


def _unknown_message(record: StepRecord) -> str:
    return (
        f"unknown outcome: {record.describe()} was started but its result was never recorded; "
        "it may or may not have happened. Give the tool a reconcile hook, declare it "
        "idempotent if a repeat is harmless, or check by hand and run "
        f"'agentrt journal resolve {record.key} --done/--not-done'"
    )


async def _upsert_quietly(store: JournalStore | None, record: StepRecord) -> None:
    if store is None:
        return
    try:
        await store.upsert_step(record)
    except JournalUnavailable as exc:
        _log.warning("%s: not recorded (journal unavailable): %s", record.describe(), exc)
