"""From a journal URL (or ``None``) to a store.

Accepted: ``None`` (the default file ``./.agentrt/journal.sqlite`` under the current directory),
a plain file path, ``sqlite:///path`` or ``sqlite+aiosqlite:///path``, and ``postgresql://`` or
``postgresql+asyncpg://`` URLs. Anything else raises :class:`agentrt.errors.ConfigError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from sqlalchemy import make_url
from sqlalchemy.exc import ArgumentError

from agentrt.errors import ConfigError
from agentrt.journal.store import JournalStore

__all__ = ["DEFAULT_JOURNAL_PATH", "default_journal_path", "make_store"]

#: The default journal file, relative to the current working directory.
DEFAULT_JOURNAL_PATH = Path(".agentrt") / "journal.sqlite"


def default_journal_path(cwd: Path | None = None) -> Path:
    """``<cwd>/.agentrt/journal.sqlite`` (absolute), ``cwd`` defaulting to the process's."""
    return (cwd or Path.cwd()).resolve() / DEFAULT_JOURNAL_PATH


def make_store(
    url: str | None,
    *,
    synchronous: Literal["FULL", "NORMAL"] = "FULL",
    busy_timeout_s: float = 5.0,
    schema: str | None = None,
    pool_size: int = 10,
    connect_timeout_s: float = 5.0,
    create: bool = True,
) -> JournalStore:
    """A store for ``url`` (see the module docstring); no I/O happens before ``open()``."""
    from agentrt.journal.postgres_store import PostgresJournalStore
    from agentrt.journal.sqlite_store import SqliteJournalStore

    if url is None or "://" not in url:
        path = default_journal_path() if url is None else Path(url).expanduser()
        if schema is not None:
            raise ConfigError("schema= applies to PostgreSQL journals only")
        return SqliteJournalStore(
            path, synchronous=synchronous, busy_timeout_s=busy_timeout_s, create=create
        )
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"invalid journal URL: {exc}") from exc
    backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    if backend == "sqlite":
        if driver not in ("pysqlite", "aiosqlite"):
            raise ConfigError(f"SQLite journals use aiosqlite, not {driver!r}")
        if not parsed.database or parsed.database == ":memory:":
            raise ConfigError(
                "a SQLite journal needs a file path (an in-memory one is not durable)"
            )
        if schema is not None:
            raise ConfigError("schema= applies to PostgreSQL journals only")
        return SqliteJournalStore(
            Path(parsed.database).expanduser(),
            synchronous=synchronous,
            busy_timeout_s=busy_timeout_s,
            create=create,
        )
    if backend == "postgresql":
        if "+" in parsed.drivername and driver != "asyncpg":
            raise ConfigError(f"PostgreSQL journals use asyncpg, not {driver!r}")
        return PostgresJournalStore(
            parsed.set(drivername="postgresql+asyncpg"),
            synchronous=synchronous,
            schema=schema,
            pool_size=pool_size,
            connect_timeout_s=connect_timeout_s,
        )
    raise ConfigError(
        f"unsupported journal URL {parsed.render_as_string(hide_password=True)!r}: "
        "use a SQLite file path or a postgresql:// URL"
    )
