"""Schema versions and the upgrade path.

``MIGRATIONS`` is an ordered tuple of functions; migration *n* takes a database at version
*n - 1* to version *n*. A database is brought up to the newest version inside one write
transaction when a journal opens it (under a lock: ``BEGIN IMMEDIATE`` on SQLite, an advisory
lock on PostgreSQL, so that two processes opening a fresh database do not race). A database
whose version is newer than the last migration, or that holds journal tables without a
readable version row, raises :class:`agentrt.errors.SchemaVersionError` naming the database.

Rule: a released migration never changes. When a table changes later, the new migration
alters it, and any older migration that creates it keeps its own frozen copy of the old shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import Column, Connection, Float, Integer, MetaData, String, Table, inspect, select

from agentrt.errors import ConfigError, SchemaVersionError
from agentrt.journal import schema

__all__ = ["MIGRATIONS", "Migration", "ensure_schema"]


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of the upgrade path."""

    #: The schema version this migration produces (1, 2, ...).
    version: int
    description: str
    #: Runs inside the upgrade transaction (synchronous SQLAlchemy Core connection).
    apply: Callable[[Connection], None]


def _v1(conn: Connection) -> None:
    for table in (schema.steps, schema.tool_durations):
        table.create(conn)


#: Frozen copy of the version-2 shape of ``schema.leases`` (a later change alters it in a new
#: migration; this one keeps creating exactly what version 2 had).
_V2_LEASES = Table(
    "agentrt_journal_leases",
    MetaData(),
    Column("program_id", String(255), primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("holder", String(255), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("ttl_s", Float, nullable=False),
    Column("acquired_at", Float, nullable=False),
    Column("renewed_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
)


def _v2(conn: Connection) -> None:
    _V2_LEASES.create(conn)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "steps and tool duration history", _v1),
    Migration(2, "program leases (fencing epochs)", _v2),
)


def ensure_schema(
    conn: Connection,
    *,
    where: str,
    db_schema: str | None = None,
    migrations: Sequence[Migration] = MIGRATIONS,
    now: float | None = None,
) -> int:
    """Bring the database to the last migration's version and return that version.

    ``conn`` is inside a write transaction holding the migration lock; ``where`` names the
    database (file or URL without password) for error messages; ``db_schema`` is the
    PostgreSQL schema the tables live in (``None``: the default one).
    """
    for index, migration in enumerate(migrations, start=1):
        if migration.version != index:
            raise ConfigError(f"journal migrations must be numbered 1..n, got {migration.version}")
    target = len(migrations)
    tables = set(inspect(conn).get_table_names(schema=db_schema))
    ours = {name for name in tables if name.startswith("agentrt_journal_")}
    if schema.version_table.name not in tables:
        if ours:
            raise SchemaVersionError(
                f"journal database {where} has journal tables ({', '.join(sorted(ours))}) but "
                "no schema version table: it is corrupt or was written by an unknown tool"
            )
        schema.version_table.create(conn)
        current = 0
    else:
        rows = conn.execute(select(schema.version_table.c.id, schema.version_table.c.version))
        found = rows.all()
        if len(found) != 1 or found[0].id != 1 or not isinstance(found[0].version, int):
            raise SchemaVersionError(
                f"journal database {where} has an unreadable schema version "
                f"({len(found)} version rows): it is corrupt"
            )
        current = found[0].version
    if current > target:
        raise SchemaVersionError(
            f"journal database {where} has schema version {current}, newer than this agentrt "
            f"supports (up to {target}); upgrade agentrt or use another journal"
        )
    if current < 0:
        raise SchemaVersionError(f"journal database {where} has invalid schema version {current}")
    if current == target:
        return current
    for migration in migrations[current:]:
        migration.apply(conn)
    stamp = time.time() if now is None else now
    if current == 0:
        conn.execute(schema.version_table.insert().values(id=1, version=target, updated_at=stamp))
    else:
        conn.execute(schema.version_table.update().values(version=target, updated_at=stamp))
    return target
