"""The intent protocol's mechanics on a store: what ``Journal.run_step`` does (docs/journal.md).

``StepRunner`` performs the action that ``decide`` picks: writes the intent, runs the step,
commits or fails it, asks the reconcile hook, restarts attempts with compare-and-set updates.
``Journal`` owns the store's life cycle and hands the runner a store that is open (side-effect
steps) or maybe ``None`` (read-only steps while the store is unreachable).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

import anyio

from agentrt.errors import (
    JournalError,
    JournalUnavailable,
    NonDeterminismError,
    ProgramLeaseLost,
    UnknownOutcome,
)
from agentrt.journal.api import Execute, Reconcile, ReconcileResult, StepSpec
from agentrt.journal.decide import Action, decide, mismatch_message
from agentrt.journal.keys import encode_result
from agentrt.journal.leases import Fence
from agentrt.journal.records import StepPosition, StepRecord, StepStatus
from agentrt.journal.store import JournalStore
from agentrt.json_types import JSONValue

__all__ = ["StepRunner"]

_log = logging.getLogger("agentrt.journal")
#: How often one run_step re-reads a row that a concurrent run of the same program changed.
_MAX_RACES = 5


class StepRunner:
    """Runs steps against a store. ``owner``: id written into the rows this process touches;
    ``clock``: wall clock (epoch seconds) for row timestamps. Every write carries the
    program's lease ``fence`` (see ``leases.Fence``)."""

    def __init__(self, *, owner: str, clock: Callable[[], float]) -> None:
        self.owner = owner
        self.clock = clock

    # -- side-effect steps ------------------------------------------------------------------

    async def run_side_effect(
        self,
        store: JournalStore,
        step: StepSpec,
        position: StepPosition,
        key: str,
        args_hash: str,
        execute: Execute,
        reconcile: Reconcile | None,
        fence: Fence,
    ) -> JSONValue:
        # First runs are the common case: try the intent at once (one durable write); only a
        # taken position costs the extra read.
        fresh = self._new_record(step, position, key, args_hash)
        if await store.insert_step(fresh, fence=fence):
            return await self._execute_effect(store, fresh, execute, fence)
        record = await store.get_step(position)
        for _ in range(_MAX_RACES):
            action = decide(record, step, args_hash, has_reconcile=reconcile is not None)
            if action is Action.RUN_NEW:
                fresh = self._new_record(step, position, key, args_hash)
                if await store.insert_step(fresh, fence=fence):
                    return await self._execute_effect(store, fresh, execute, fence)
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
                        if await self.commit(
                            store, record, outcome.result, duration_s=None, fence=fence
                        ):
                            return outcome.result
                    elif (restarted := await self._restart(store, record, fence)) is not None:
                        return await self._execute_effect(store, restarted, execute, fence)
                elif (restarted := await self._restart(store, record, fence)) is not None:
                    # RETRY after FAILED, or RERUN of an idempotent unknown outcome.
                    return await self._execute_effect(store, restarted, execute, fence)
            record = await store.get_step(position)  # lost a race with another run: look again
        raise JournalError(
            f"step at {position} kept changing under concurrent runs of program "
            f"{position.program_id!r}; run a program id in one place at a time"
        )

    def _new_record(
        self, step: StepSpec, position: StepPosition, key: str, args_hash: str
    ) -> StepRecord:
        now = self.clock()
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

    async def _restart(
        self, store: JournalStore, record: StepRecord, fence: Fence
    ) -> StepRecord | None:
        """Durably start attempt ``attempts + 1``; ``None`` when the row changed meanwhile."""
        now = self.clock()
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
            fence=fence,
        )
        return restarted if ok else None

    async def _execute_effect(
        self, store: JournalStore, record: StepRecord, execute: Execute, fence: Fence
    ) -> JSONValue:
        started = time.monotonic()
        try:
            result = await execute(record.key)
        except UnknownOutcome:
            raise  # the tool itself cannot tell: the intent stays STARTED
        except Exception as exc:
            await self._finish_failed(store, record, exc, time.monotonic() - started, fence)
            raise
        duration_s = time.monotonic() - started
        try:
            committed = await self.commit(store, record, result, duration_s=duration_s, fence=fence)
        except ProgramLeaseLost as exc:
            raise ProgramLeaseLost(
                f"{record.describe()}: the effect ran but this run lost its program lease, so "
                f"its result was not recorded; the new holder sees an unknown outcome ({exc})"
            ) from exc
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

    async def commit(
        self,
        store: JournalStore,
        record: StepRecord,
        result: JSONValue,
        *,
        duration_s: float | None,
        fence: Fence,
    ) -> bool:
        """STARTED → COMMITTED with ``result``; raises ResultNotSerializable (the row then
        stays STARTED, annotated with the error)."""
        try:
            result_json = encode_result(result, what=record.describe())
        except JournalError as exc:
            await self._annotate(store, record, exc, fence)
            raise
        values = {
            "status": StepStatus.COMMITTED.value,
            "result_json": result_json,
            "error_type": None,
            "error_message": None,
            "updated_at": self.clock(),
            "duration_s": duration_s,
            "owner": self.owner,
        }
        with anyio.CancelScope(shield=True):  # the effect happened: try hard to record it
            committed = await store.update_step(
                record.position,
                expect_status=StepStatus.STARTED,
                expect_attempts=record.attempts,
                values=values,
                fence=fence,
            )
        return committed

    async def _finish_failed(
        self,
        store: JournalStore,
        record: StepRecord,
        exc: Exception,
        duration_s: float,
        fence: Fence,
    ) -> None:
        values = {
            "status": StepStatus.FAILED.value,
            "error_type": type(exc).__name__,
            "error_message": str(exc)[:2000],
            "updated_at": self.clock(),
            "duration_s": duration_s,
        }
        try:
            with anyio.CancelScope(shield=True):
                await store.update_step(
                    record.position,
                    expect_status=StepStatus.STARTED,
                    expect_attempts=record.attempts,
                    values=values,
                    fence=fence,
                )
        except JournalError as journal_exc:  # stays STARTED: a re-run sees an unknown outcome
            _log.warning("%s: failure not recorded: %s", record.describe(), journal_exc)

    async def _annotate(
        self, store: JournalStore, record: StepRecord, exc: Exception, fence: Fence
    ) -> None:
        values = {
            "error_type": type(exc).__name__,
            "error_message": str(exc)[:2000],
            "updated_at": self.clock(),
        }
        try:
            await store.update_step(
                record.position,
                expect_status=StepStatus.STARTED,
                expect_attempts=record.attempts,
                values=values,
                fence=fence,
            )
        except JournalError as journal_exc:
            _log.warning("%s: error not recorded: %s", record.describe(), journal_exc)

    # -- read-only steps ---------------------------------------------------------------------

    async def run_read_only(
        self,
        store: JournalStore | None,
        step: StepSpec,
        position: StepPosition,
        key: str,
        args_hash: str,
        execute: Execute,
        fence: Fence,
    ) -> JSONValue:
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
                updated_at=self.clock(),
            )
            await _upsert_quietly(store, failed, fence)
            raise
        done = replace(
            fresh,
            status=StepStatus.COMMITTED,
            result_json=encode_result(result, what=fresh.describe()),
            duration_s=time.monotonic() - started,
            updated_at=self.clock(),
        )
        await _upsert_quietly(store, done, fence)
        return result


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


async def _upsert_quietly(store: JournalStore | None, record: StepRecord, fence: Fence) -> None:
    if store is None:
        return
    try:
        await store.upsert_step(record, fence=fence)
    except JournalUnavailable as exc:
        _log.warning("%s: not recorded (journal unavailable): %s", record.describe(), exc)
