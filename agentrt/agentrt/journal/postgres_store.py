"""PostgreSQL implementation of the journal store (asyncpg).

Every connection sets ``synchronous_commit`` (``on`` for ``synchronous="FULL"``: a commit
returns once its WAL record is flushed to disk; ``off`` for ``"NORMAL"``: a crash of the
database server can lose the last few hundred milliseconds of commits). The tables can live in
a schema of their own (``schema=...``, created when missing); migrations take a transaction-level
advisory lock so that several workers opening a fresh database do not race.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

from sqlalchemy import URL, Table, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from agentrt.errors import ConfigError, JournalError
from agentrt.journal import schema
from agentrt.journal.migrations import MIGRATIONS, Migration
from agentrt.journal.store import JournalStore

__all__ = ["PostgresJournalStore"]


class PostgresJournalStore(JournalStore):
    """The journal in a PostgreSQL database.

    ``url``: a ``postgresql+asyncpg://`` URL. ``schema``: PostgreSQL schema for the tables
    (``None``: the connection's default, usually ``public``). ``pool_size``: connections kept
    (as many more may be opened under load). ``connect_timeout_s``: how long to wait for a
    connection before :class:`JournalUnavailable`.
    """

    def __init__(
        self,
        url: URL,
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        schema: str | None = None,
        pool_size: int = 10,
        connect_timeout_s: float = 5.0,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> None:
        super().__init__(migrations=migrations)
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        if pool_size < 1:
            raise ConfigError(f"pool_size must be >= 1, got {pool_size}")
        if connect_timeout_s <= 0:
            raise ConfigError(f"connect_timeout_s must be > 0, got {connect_timeout_s}")
        self.url = url
        self.synchronous = synchronous
        self.schema = schema
        self._pool_size = pool_size
        self._connect_timeout_s = connect_timeout_s
        self._base_engine: AsyncEngine | None = None
        self._engine: AsyncEngine | None = None

    @property
    def where(self) -> str:
        where = self.url.render_as_string(hide_password=True)
        return where if self.schema is None else f"{where} (schema {self.schema})"

    async def _connect(self) -> None:
        engine = create_async_engine(
            self.url,
            pool_size=self._pool_size,
            max_overflow=self._pool_size,
            pool_timeout=60,
            pool_pre_ping=True,
            connect_args={
                "timeout": self._connect_timeout_s,
                "server_settings": {
                    "synchronous_commit": "on" if self.synchronous == "FULL" else "off",
                    "application_name": "agentrt-journal",
                },
            },
        )
        self._base_engine = engine
        self._engine = (
            engine
            if self.schema is None
            else engine.execution_options(schema_translate_map={None: self.schema})
        )

    async def _dispose(self) -> None:
        if self._base_engine is not None:
            await self._base_engine.dispose()
        self._base_engine = self._engine = None

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        if self._engine is None:
            raise JournalError(f"journal {self.where} is not open")
        async with self._engine.connect() as conn:
            yield conn

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        if self._engine is None:
            raise JournalError(f"journal {self.where} is not open")
        async with self._engine.begin() as conn:
            yield conn

    def _insert(self, table: Table = schema.steps) -> Any:
        return pg_insert(table)

    def _db_schema(self) -> str | None:
        return self.schema

    async def _before_migrate(self, conn: AsyncConnection) -> None:
        name = f"agentrt_journal:{self.schema or ''}"
        lock_id = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": lock_id})
        if self.schema is not None:
            quoted = conn.dialect.identifier_preparer.quote_identifier(self.schema)
            await conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {quoted}"))
