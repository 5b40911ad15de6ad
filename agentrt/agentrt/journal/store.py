"""The journal store: one interface, SQLAlchemy Core queries shared by both databases.

``JournalStore`` holds every query; ``SqliteJournalStore`` (``sqlite_store``) and
``PostgresJournalStore`` (``postgres_store``) only say how to connect, how to open a write
transaction and how to spell an upsert. Every method raises only our errors:
:class:`JournalUnavailable` when the database cannot be reached (connection refused, file not
openable, lock wait past ``busy_timeout``), :class:`SchemaVersionError` for a corrupt or newer
database, :class:`JournalError` for anything else.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from sqlalchemy import (
    Insert,
    Row,
    Table,
    and_,
    bindparam,
    case,
    delete,
    exists,
    func,
    select,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.elements import ColumnElement

from agentrt.errors import JournalError, JournalUnavailable, ProgramLeaseHeld, ProgramLeaseLost
from agentrt.journal import schema
from agentrt.journal.leases import Fence, LeaseRecord
from agentrt.journal.migrations import MIGRATIONS, Migration, ensure_schema
from agentrt.journal.records import (
    ProgramSummary,
    PurgePolicy,
    PurgeResult,
    StepPosition,
    StepRecord,
    StepStatus,
)

__all__ = ["JournalStore"]

_T = schema.steps
_D = schema.tool_durations
_L = schema.leases
_PK = (_T.c.program_id, _T.c.thread_id, _T.c.seq)
_UNREACHABLE = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
    OSError,
    TimeoutError,
)


def _record_values(record: StepRecord) -> dict[str, object]:
    p = record.position
    return {
        "program_id": p.program_id,
        "thread_id": p.thread_id,
        "seq": p.seq,
        "kind": record.kind,
        "name": record.name,
        "args_hash": record.args_hash,
        "step_key": record.key,
        "status": record.status.value,
        "side_effect": record.side_effect,
        "idempotent": record.idempotent,
        "attempts": record.attempts,
        "node_id": record.node_id,
        "result_json": record.result_json,
        "error_type": record.error_type,
        "error_message": record.error_message,
        "owner": record.owner,
        "created_at": record.created_at,
        "started_at": record.started_at,
        "updated_at": record.updated_at,
        "duration_s": record.duration_s,
    }


def _row_to_record(row: Row[tuple[object, ...]]) -> StepRecord:
    m = row._mapping
    return StepRecord(
        position=StepPosition(m["program_id"], m["thread_id"], m["seq"]),
        kind=m["kind"],
        name=m["name"],
        args_hash=m["args_hash"],
        key=m["step_key"],
        status=StepStatus(m["status"]),
        side_effect=bool(m["side_effect"]),
        idempotent=bool(m["idempotent"]),
        attempts=m["attempts"],
        node_id=m["node_id"],
        result_json=m["result_json"],
        error_type=m["error_type"],
        error_message=m["error_message"],
        owner=m["owner"],
        created_at=m["created_at"],
        started_at=m["started_at"],
        updated_at=m["updated_at"],
        duration_s=m["duration_s"],
    )


# The fence a step write carries, built once with bound parameters (the per-step hot path
# then only binds values; see :class:`Fence`): a leased run's lease row must still have its
# owner and epoch; a run without a lease writes only while nobody holds a live lease.
_LEASED = exists().where(
    _L.c.program_id == bindparam("fence_program"),
    _L.c.owner == bindparam("fence_owner"),
    _L.c.epoch == bindparam("fence_epoch"),
)
_UNLEASED = ~exists().where(
    _L.c.program_id == bindparam("fence_program"),
    _L.c.expires_at > bindparam("fence_now"),
)
_STEP_COLUMNS = tuple(c.name for c in _T.columns)
_UPSERT_KEEPS = frozenset({"program_id", "thread_id", "seq", "created_at"})


def _fence_condition(fence: Fence) -> ColumnElement[bool]:
    return _UNLEASED if fence.epoch is None else _LEASED


def _fence_params(fence: Fence) -> dict[str, object]:
    if fence.epoch is None:
        return {"fence_program": fence.program_id, "fence_now": fence.now}
    return {
        "fence_program": fence.program_id,
        "fence_owner": fence.owner,
        "fence_epoch": fence.epoch,
    }


def row_to_lease(row: Row[tuple[object, ...]]) -> LeaseRecord:
    m = row._mapping
    return LeaseRecord(
        program_id=m["program_id"],
        owner=m["owner"],
        holder=m["holder"],
        epoch=int(m["epoch"]),
        ttl_s=float(m["ttl_s"]),
        acquired_at=float(m["acquired_at"]),
        renewed_at=float(m["renewed_at"]),
        expires_at=float(m["expires_at"]),
    )


def lease_held_error(lease: LeaseRecord, now: float) -> ProgramLeaseHeld:
    return ProgramLeaseHeld(
        f"program {lease.program_id!r} is running elsewhere: its lease is held by "
        f"{lease.holder} (epoch {lease.epoch}) until {lease.expires_at:.3f} (epoch seconds, "
        f"{lease.expires_at - now:.1f} s from now). Run a program id in one place at a time; "
        "wait for it to end or expire, or break it with "
        f"'agentrt journal release-lease {lease.program_id} --yes' if the holder is dead",
        program_id=lease.program_id,
        holder=lease.holder,
        expires_at=lease.expires_at,
    )


def _at(position: StepPosition) -> ColumnElement[bool]:
    return and_(
        _T.c.program_id == position.program_id,
        _T.c.thread_id == position.thread_id,
        _T.c.seq == position.seq,
    )


class JournalStore(abc.ABC):
    """Durable storage of step records and tool durations (async, SQLAlchemy Core).

    Open with :meth:`open` (connects, checks and upgrades the schema) and release with
    :meth:`close`. Safe to use from many tasks of one event loop at once.
    """

    def __init__(self, *, migrations: Sequence[Migration] = MIGRATIONS) -> None:
        self._migrations = tuple(migrations)
        self._opened = False
        self._version = 0
        #: Prebuilt fenced step inserts, by (leased, upsert).
        self._fenced_inserts: dict[tuple[bool, bool], Any] = {}

    # -- what the two databases do differently ------------------------------------------

    @property
    @abc.abstractmethod
    def where(self) -> str:
        """The database for messages: a file path, or a URL without its password."""

    @abc.abstractmethod
    async def _connect(self) -> None:
        """Create the engine(s); no I/O needed yet."""

    @abc.abstractmethod
    async def _dispose(self) -> None:
        """Close every connection."""

    @abc.abstractmethod
    def _read(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """Async context manager yielding a connection for reads."""

    @abc.abstractmethod
    def _write(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """Async context manager yielding a connection inside a committed-on-exit write
        transaction that holds the database's write lock from its first statement."""

    @abc.abstractmethod
    def _insert(self, table: Table = schema.steps) -> Any:
        """The dialect's ``insert(table)`` construct (it has ``on_conflict_do_*``)."""

    async def _write_one(
        self, statement: Executable, params: Mapping[str, object] | None = None
    ) -> int:
        """Run one write statement (with bound ``params``) as its own durable transaction;
        returns its rowcount."""
        async with self._write() as conn:
            result = await conn.execute(statement, params)
        return int(result.rowcount)

    async def _before_migrate(self, conn: AsyncConnection) -> None:
        """Hook run first in the migration transaction (PostgreSQL: schema, advisory lock)."""
        return None

    def _db_schema(self) -> str | None:
        return None

    def _classify(self, exc: BaseException) -> JournalError | None:
        """A more precise error for a driver exception, or ``None`` for the default mapping."""
        return None

    # -- life cycle ------------------------------------------------------------------------

    async def open(self) -> int:
        """Connect and bring the schema up to date; returns the schema version."""
        if self._opened:
            return self._version
        async with self._guard("open"):
            await self._dispose()  # a failed earlier attempt may have left engines behind
            await self._connect()
            try:
                if await self._current_version() == len(self._migrations):
                    self._opened = True  # fast path: up to date, no write lock needed
                    self._version = len(self._migrations)
                    return self._version
                async with self._write() as conn:
                    await self._before_migrate(conn)
                    version: int = await conn.run_sync(
                        lambda sync_conn: ensure_schema(
                            sync_conn,
                            where=self.where,
                            db_schema=self._db_schema(),
                            migrations=self._migrations,
                        )
                    )
            except BaseException:
                await self._dispose()
                raise
        self._opened = True
        self._version = version
        return version

    async def _current_version(self) -> int | None:
        """The recorded schema version, ``None`` when it cannot be read (the locked slow path
        then creates, upgrades or diagnoses the database)."""
        query = select(schema.version_table.c.version).where(schema.version_table.c.id == 1)
        try:
            async with self._read() as conn:
                version = (await conn.execute(query)).scalar_one_or_none()
        except sa_exc.DBAPIError:
            return None
        return version if isinstance(version, int) else None

    async def close(self) -> None:
        """Release every connection (idempotent)."""
        self._opened = False
        await self._dispose()

    @asynccontextmanager
    async def _guard(self, operation: str) -> AsyncIterator[None]:
        """Translate driver and SQLAlchemy errors into the journal's errors."""
        try:
            yield
        except JournalError:
            raise
        except Exception as exc:
            precise = self._classify(exc)
            if precise is not None:
                raise precise from exc
            lost = isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated
            if lost or isinstance(exc, _UNREACHABLE):
                raise JournalUnavailable(
                    f"journal {self.where} unavailable ({operation}): {type(exc).__name__}: {exc}"
                ) from exc
            if isinstance(exc, sa_exc.SQLAlchemyError):
                raise JournalError(
                    f"journal {self.where} failed ({operation}): {type(exc).__name__}: {exc}"
                ) from exc
            raise

    # -- steps -----------------------------------------------------------------------------

    async def get_step(self, position: StepPosition) -> StepRecord | None:
        """The record at ``position``, ``None`` when nothing is recorded there."""
        async with self._guard("read step"), self._read() as conn:
            row = (await conn.execute(select(_T).where(_at(position)))).first()
        return None if row is None else _row_to_record(row)

    async def get_step_by_key(self, key: str) -> StepRecord | None:
        """The record whose idempotency key is ``key``."""
        async with self._guard("read step"), self._read() as conn:
            row = (await conn.execute(select(_T).where(_T.c.step_key == key))).first()
        return None if row is None else _row_to_record(row)

    async def insert_step(self, record: StepRecord, *, fence: Fence | None = None) -> bool:
        """Insert ``record`` durably; ``False`` (nothing written) when its position is taken.

        With ``fence`` the insert happens only if the fence holds (same statement); when it
        does not, :class:`ProgramLeaseLost` / :class:`ProgramLeaseHeld` is raised."""
        values = _record_values(record)
        if fence is None:
            stmt: Insert = self._insert().values(**values).on_conflict_do_nothing()
            async with self._guard("record intent"):
                return await self._write_one(stmt) == 1
        fenced, params = self._fenced_insert(values, fence, upsert=False)
        async with self._guard("record intent"):
            if await self._write_one(fenced, params) == 1:
                return True
        await self._check_fence(fence)
        return False

    def _fenced_insert(
        self, values: Mapping[str, object], fence: Fence, *, upsert: bool
    ) -> tuple[Executable, dict[str, object]]:
        """``INSERT INTO steps SELECT :v_... WHERE <fence> ON CONFLICT DO NOTHING`` (or ``DO
        UPDATE`` every column but the key and ``created_at``, for ``upsert``) and its
        parameters: one statement, so the check and the write are atomic."""
        shape = (fence.epoch is not None, upsert)
        stmt = self._fenced_inserts.get(shape)
        if stmt is None:
            row = select(*(bindparam(f"v_{k}", type_=_T.c[k].type) for k in _STEP_COLUMNS))
            insert = self._insert().from_select(
                list(_STEP_COLUMNS), row.where(_fence_condition(fence))
            )
            if upsert:
                stmt = insert.on_conflict_do_update(
                    index_elements=list(_PK),
                    set_={k: insert.excluded[k] for k in _STEP_COLUMNS if k not in _UPSERT_KEEPS},
                )
            else:
                stmt = insert.on_conflict_do_nothing()
            self._fenced_inserts[shape] = stmt
        params = {f"v_{k}": values[k] for k in _STEP_COLUMNS}
        params.update(_fence_params(fence))
        return stmt, params

    async def _check_fence(self, fence: Fence | None) -> None:
        """After a fenced write changed nothing: raise if the fence is what stopped it."""
        if fence is None:
            return
        lease = await self.get_lease(fence.program_id)
        if fence.epoch is None:
            if lease is not None and lease.live(fence.now):
                raise lease_held_error(lease, fence.now)
            return
        if lease is None or (lease.owner, lease.epoch) != (fence.owner, fence.epoch):
            now_held = "no lease row" if lease is None else f"{lease.holder}, epoch {lease.epoch}"
            raise ProgramLeaseLost(
                f"program {fence.program_id!r}: this run's lease (epoch {fence.epoch}) was "
                f"taken over or broken (now: {now_held}); its journal writes are refused — "
                "stop this run, the new holder resumes the program"
            )

    async def get_lease(self, program_id: str) -> LeaseRecord | None:
        """The lease row of ``program_id``, ``None`` when it was never leased."""
        async with self._guard("read lease"), self._read() as conn:
            row = (await conn.execute(select(_L).where(_L.c.program_id == program_id))).first()
        return None if row is None else row_to_lease(row)

    async def update_step(
        self,
        position: StepPosition,
        *,
        expect_status: StepStatus,
        expect_attempts: int,
        values: Mapping[str, object],
        fence: Fence | None = None,
    ) -> bool:
        """Compare-and-set: apply ``values`` (column → value) only if the row still has
        ``expect_status`` and ``expect_attempts`` (and ``fence`` holds: else
        :class:`ProgramLeaseLost` / :class:`ProgramLeaseHeld`); ``True`` when it did."""
        conditions = [_at(position), _T.c.status == expect_status.value]
        conditions.append(_T.c.attempts == expect_attempts)
        if fence is not None:
            conditions.append(_fence_condition(fence))
        stmt = update(_T).where(*conditions).values(**values)
        params = None if fence is None else _fence_params(fence)
        async with self._guard("update step"):
            if await self._write_one(stmt, params) == 1:
                return True
        await self._check_fence(fence)
        return False

    async def upsert_step(self, record: StepRecord, *, fence: Fence | None = None) -> None:
        """Write ``record`` at its position, replacing what is there (read-only steps); with
        ``fence``, only while it holds (else :class:`ProgramLeaseLost` / ``ProgramLeaseHeld``)."""
        values = _record_values(record)
        if fence is None:
            stmt = (
                self._insert()
                .values(**values)
                .on_conflict_do_update(
                    index_elements=list(_PK),
                    set_={k: v for k, v in values.items() if k not in _UPSERT_KEEPS},
                )
            )
            async with self._guard("record step"):
                await self._write_one(stmt)
            return
        stmt, params = self._fenced_insert(values, fence, upsert=True)
        async with self._guard("record step"):
            if await self._write_one(stmt, params) == 1:
                return
        await self._check_fence(fence)

    async def program_steps(self, program_id: str) -> list[StepRecord]:
        """Every step of a program, ordered by thread then sequence number."""
        stmt = select(_T).where(_T.c.program_id == program_id).order_by(_T.c.thread_id, _T.c.seq)
        async with self._guard("read program"), self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [_row_to_record(row) for row in rows]

    async def list_programs(
        self, *, status: StepStatus | None = None, limit: int = 50
    ) -> list[ProgramSummary]:
        """Programs, most recently changed first; with ``status``, only programs having at
        least one step in that status."""

        def count(s: StepStatus) -> ColumnElement[int]:
            return func.sum(case((_T.c.status == s.value, 1), else_=0))

        last = func.max(_T.c.updated_at)
        stmt = (
            select(
                _T.c.program_id,
                func.count().label("steps"),
                count(StepStatus.COMMITTED).label("committed"),
                count(StepStatus.FAILED).label("failed"),
                count(StepStatus.STARTED).label("started"),
                func.min(_T.c.created_at).label("first_at"),
                last.label("last_at"),
            )
            .group_by(_T.c.program_id)
            .order_by(last.desc(), _T.c.program_id)
            .limit(limit)
        )
        if status is not None:
            stmt = stmt.having(count(status) > 0)
        async with self._guard("list programs"), self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            ProgramSummary(
                program_id=r.program_id,
                steps=int(r.steps),
                committed=int(r.committed),
                failed=int(r.failed),
                started=int(r.started),
                first_at=float(r.first_at),
                last_at=float(r.last_at),
            )
            for r in rows
        ]

    async def purge(self, policy: PurgePolicy, *, now: float, dry_run: bool = False) -> PurgeResult:
        """Delete the whole programs ``policy`` selects (see :class:`PurgePolicy`)."""
        conditions: list[Any] = []
        if policy.older_than_s is not None:
            conditions.append(func.max(_T.c.updated_at) < now - policy.older_than_s)
        if policy.statuses is not None:
            others = case((_T.c.status.in_([s.value for s in policy.statuses]), 0), else_=1)
            conditions.append(func.sum(others) == 0)
        live = exists().where(_L.c.program_id == _T.c.program_id, _L.c.expires_at > now)
        pick = (
            select(_T.c.program_id, func.count().label("n"))
            .where(~live)  # a running program is never purged
            .group_by(_T.c.program_id)
        )
        if policy.program_ids is not None:
            pick = pick.where(_T.c.program_id.in_(policy.program_ids))
        if conditions:
            pick = pick.having(and_(*conditions))
        programs = steps_deleted = 0
        async with self._guard("purge"), self._write() as conn:
            chosen = (await conn.execute(pick)).all()
            programs = len(chosen)
            steps_deleted = sum(int(r.n) for r in chosen)
            if not dry_run:
                ids = [r.program_id for r in chosen]
                for start in range(0, len(ids), 500):
                    chunk = ids[start : start + 500]
                    await conn.execute(delete(_T).where(_T.c.program_id.in_(chunk)))
                    await conn.execute(
                        delete(_L).where(_L.c.program_id.in_(chunk), _L.c.expires_at <= now)
                    )
                # Leases of programs that never recorded a step, by the same age / id rules.
                orphans = delete(_L).where(
                    _L.c.expires_at <= now,
                    ~exists().where(_T.c.program_id == _L.c.program_id),
                )
                if policy.older_than_s is not None:
                    orphans = orphans.where(_L.c.renewed_at < now - policy.older_than_s)
                if policy.program_ids is not None:
                    orphans = orphans.where(_L.c.program_id.in_(policy.program_ids))
                await conn.execute(orphans)
        return PurgeResult(programs=programs, steps=steps_deleted)

    # -- tool durations ----------------------------------------------------------------------

    async def add_tool_duration(
        self, tool_name: str, duration_s: float, *, observed_at: float, keep: int
    ) -> None:
        """Append one observation and keep only the ``keep`` most recent ones of the tool."""
        newest_dropped = (
            select(_D.c.id)
            .where(_D.c.tool_name == tool_name)
            .order_by(_D.c.id.desc())
            .limit(1)
            .offset(keep)
            .scalar_subquery()
        )
        async with self._guard("record tool duration"), self._write() as conn:
            await conn.execute(
                _D.insert().values(
                    tool_name=tool_name, duration_s=duration_s, observed_at=observed_at
                )
            )
            await conn.execute(
                delete(_D).where(_D.c.tool_name == tool_name, _D.c.id <= newest_dropped)
            )

    async def recent_tool_durations(self, tool_name: str, *, limit: int) -> list[float]:
        """The ``limit`` most recent durations (seconds) of the tool, newest first."""
        stmt = (
            select(_D.c.duration_s)
            .where(_D.c.tool_name == tool_name)
            .order_by(_D.c.id.desc())
            .limit(limit)
        )
        async with self._guard("read tool durations"), self._read() as conn:
            return [float(v) for v in (await conn.execute(stmt)).scalars()]
