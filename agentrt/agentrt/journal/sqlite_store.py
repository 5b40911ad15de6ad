"""SQLite implementation of the journal store (aiosqlite, WAL).

Connections run with ``journal_mode=WAL``, ``busy_timeout`` and ``synchronous=FULL`` (default)
or ``NORMAL``; see docs/journal.md for what a power loss can lose in each mode. All writes go
through one kept connection, serialised by an in-process lock, with the database's write lock
taken up front (``BEGIN IMMEDIATE``, or a lone statement in autocommit mode), so that a write
never fails with ``SQLITE_BUSY`` when another *process* writes too: it waits up to
``busy_timeout`` instead. Concurrent one-statement writes are group-committed (one transaction,
one fsync; see ``_write_one``). Reads use a small pool of other connections; WAL lets them run
while a write is in progress."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
from sqlalchemy import URL, Connection, Table, event
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql.base import Executable

from agentrt.errors import ConfigError, JournalError, JournalUnavailable, SchemaVersionError
from agentrt.journal import schema
from agentrt.journal.migrations import MIGRATIONS, Migration
from agentrt.journal.store import JournalStore

__all__ = ["SqliteJournalStore"]

_CORRUPT_MARKERS = ("file is not a database", "malformed", "disk image")


class _QueuedWrite:
    """One statement waiting for the group commit (see ``SqliteJournalStore._write_one``)."""

    __slots__ = ("done", "error", "lead", "params", "rowcount", "statement", "wake")

    def __init__(self, statement: Executable, params: Mapping[str, object] | None) -> None:
        self.statement = statement
        self.params = params
        self.wake = anyio.Event()
        self.lead = False
        self.done = False
        self.rowcount = 0
        self.error: Exception | None = None

    def finish(self, *, rowcount: int = 0, error: Exception | None = None) -> None:
        self.rowcount, self.error, self.done = rowcount, error, True
        self.wake.set()


class SqliteJournalStore(JournalStore):
    """The journal in one SQLite file.

    ``path``: the database file (parent directories are created when ``create``).
    ``synchronous``: ``"FULL"`` (every commit fsyncs the WAL: survives power loss) or
    ``"NORMAL"`` (fsync at checkpoints only: survives a process crash, a power loss may roll
    back the last commits). ``busy_timeout_s``: how long a write waits for another process's
    write lock before :class:`JournalUnavailable`. ``create=False``: a missing file raises
    :class:`JournalUnavailable` instead of creating an empty journal.
    """

    def __init__(
        self,
        path: Path,
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout_s: float = 5.0,
        read_pool_size: int = 4,
        create: bool = True,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> None:
        super().__init__(migrations=migrations)
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        if busy_timeout_s < 0:
            raise ConfigError(f"busy_timeout_s must be >= 0, got {busy_timeout_s}")
        if read_pool_size < 1:
            raise ConfigError(f"read_pool_size must be >= 1, got {read_pool_size}")
        self.path = Path(path)
        self.synchronous = synchronous
        self.busy_timeout_s = busy_timeout_s
        self._read_pool_size = read_pool_size
        self._create = create
        self._write_engine: AsyncEngine | None = None
        self._read_engine: AsyncEngine | None = None
        self._write_lock: anyio.Lock | None = None
        self._writer: AsyncConnection | None = None
        self._writer_autocommit = False
        self._queue: list[_QueuedWrite] = []
        self._leading = False

    @property
    def where(self) -> str:
        return str(self.path)

    def _engine(self, begin_sql: str | None, pool_size: int) -> AsyncEngine:
        """An engine whose transactions start with ``begin_sql`` (``None``: autocommit, every
        statement is its own transaction; connections then need no reset on return)."""
        url = URL.create("sqlite+aiosqlite", database=str(self.path))
        engine = create_async_engine(
            url,
            pool_size=pool_size,
            max_overflow=0,
            pool_timeout=60,
            pool_reset_on_return=None if begin_sql is None else "rollback",
        )
        pragmas = (
            f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}",
            "PRAGMA journal_mode = WAL",
            f"PRAGMA synchronous = {self.synchronous}",
        )

        def on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Take transaction control away from the sqlite3 module: we emit BEGIN ourselves.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            try:
                for pragma in pragmas:
                    cursor.execute(pragma)
            finally:
                cursor.close()

        def on_begin(conn: Connection) -> None:
            if begin_sql is not None and not conn.get_execution_options().get(
                "agentrt_autocommit", False
            ):
                conn.exec_driver_sql(begin_sql)

        event.listen(engine.sync_engine, "connect", on_connect)
        if begin_sql is not None:
            event.listen(engine.sync_engine, "begin", on_begin)
        return engine

    async def _connect(self) -> None:
        if not self._create and not self.path.exists():
            raise JournalUnavailable(f"no journal database at {self.path}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write_lock = anyio.Lock()
        self._write_engine = self._engine("BEGIN IMMEDIATE", 1)
        # Every read is one SELECT: autocommit gives it a consistent snapshot already.
        self._read_engine = self._engine(None, self._read_pool_size)

    async def _dispose(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer.close()
            self._writer = None
        for engine in (self._write_engine, self._read_engine):
            if engine is not None:
                await engine.dispose()
        self._write_engine = self._read_engine = None

    async def _writer_connection(self, *, autocommit: bool = False) -> AsyncConnection:
        """The one write connection, kept open (call with the write lock held and no
        transaction active). ``autocommit``: its next statement is its own transaction."""
        if self._write_engine is None:
            raise JournalError(f"journal {self.where} is not open")
        if self._writer is None or self._writer.closed or self._writer.invalidated:
            if self._writer is not None:
                with contextlib.suppress(Exception):
                    await self._writer.close()
            self._writer = None
            self._writer = await self._write_engine.connect()
            self._writer_autocommit = False
        if self._writer_autocommit != autocommit:
            await self._writer.execution_options(agentrt_autocommit=autocommit)
            self._writer_autocommit = autocommit
        return self._writer

    async def _after_error(self, conn: AsyncConnection) -> None:
        """Drop the write connection after a failed statement: whatever state the failure
        left it in (an open transaction, a broken handle), the next write starts afresh."""
        self._writer = None
        with contextlib.suppress(Exception):
            await conn.invalidate()
        with contextlib.suppress(Exception):
            await conn.close()

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        if self._read_engine is None:
            raise JournalError(f"journal {self.where} is not open")
        async with self._read_engine.connect() as conn:
            yield conn

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        if self._write_lock is None:
            raise JournalError(f"journal {self.where} is not open")
        async with self._write_lock:
            conn = await self._writer_connection()
            try:
                async with conn.begin():  # BEGIN IMMEDIATE
                    yield conn
            except BaseException:
                await self._after_error(conn)
                raise

    async def _write_one(
        self, statement: Executable, params: Mapping[str, object] | None = None
    ) -> int:
        """Group commit: concurrent one-statement writes share one transaction (one fsync).

        The first writer becomes the leader and commits every write queued at that moment in
        one ``BEGIN IMMEDIATE`` transaction; writers arriving meanwhile queue up, and the first
        of them leads the next batch. Each caller returns only after the transaction holding
        its statement committed, so the durability guarantee is the same as one transaction per
        statement; under concurrency the fsync is shared (many more writes per second).
        """
        write = _QueuedWrite(statement, params)
        self._queue.append(write)
        if not self._leading:
            self._leading = True
            write.lead = True
        else:
            try:
                await write.wake.wait()
            except BaseException:  # cancelled while queued: never strand the queue
                if write in self._queue:
                    self._queue.remove(write)
                    if write.lead:
                        self._hand_over()
                raise
        if write.lead and not write.done:
            batch, self._queue = self._queue, []
            try:
                with anyio.CancelScope(shield=True):  # the others wait on this batch
                    await self._commit_batch(batch)
            finally:
                self._hand_over()
        if write.error is not None:
            raise write.error
        return write.rowcount

    def _hand_over(self) -> None:
        if self._queue:
            self._queue[0].lead = True
            self._queue[0].wake.set()
        else:
            self._leading = False

    async def _commit_batch(self, batch: list[_QueuedWrite]) -> None:
        if self._write_lock is None:
            error = JournalError(f"journal {self.where} is not open")
            for write in batch:
                write.finish(error=error)
            return
        async with self._write_lock:
            try:
                # Alone, a statement runs in autocommit mode: it is its own transaction and
                # takes the write lock when it starts (no read-to-write upgrade), and the
                # BEGIN / COMMIT round trips to the connection's thread are saved.
                conn = await self._writer_connection(autocommit=len(batch) == 1)
                try:
                    if len(batch) == 1:
                        first = batch[0]
                        counts = [int((await conn.execute(first.statement, first.params)).rowcount)]
                        await conn.commit()  # ends SQLAlchemy's transaction; SQLite's is done
                    else:
                        async with conn.begin():  # BEGIN IMMEDIATE ... COMMIT
                            counts = [
                                int((await conn.execute(w.statement, w.params)).rowcount)
                                for w in batch
                            ]
                except Exception:
                    await self._after_error(conn)
                    raise
            except Exception as exc:
                if len(batch) == 1:
                    batch[0].finish(error=exc)
                    return
                failed = True
            else:
                failed = False
        if failed:  # one bad statement must not fail the others: one by one
            for write in batch:
                await self._commit_batch([write])
            return
        for write, count in zip(batch, counts, strict=True):
            write.finish(rowcount=count)

    def _insert(self, table: Table = schema.steps) -> Any:
        return sqlite_insert(table)

    def _classify(self, exc: BaseException) -> JournalError | None:
        text = str(exc)
        if any(marker in text for marker in _CORRUPT_MARKERS):
            return SchemaVersionError(
                f"journal database {self.path} is corrupt or not a SQLite database: {text}"
            )
        if "database is locked" in text:
            return JournalUnavailable(
                f"journal {self.path} stayed locked by another writer for longer than "
                f"busy_timeout ({self.busy_timeout_s} s)"
            )
        return None
