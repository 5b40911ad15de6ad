"""Store operations on real databases: schema versions, fail-closed, durations, purge, load."""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from sqlalchemy import Column, Connection, Integer, MetaData, Table

from agentrt.errors import ConfigError, JournalUnavailable, SchemaVersionError
from agentrt.journal import (
    Journal,
    PurgePolicy,
    StepSpec,
    StepStatus,
    default_journal_path,
)
from agentrt.journal.migrations import MIGRATIONS, Migration
from agentrt.journal.postgres_store import PostgresJournalStore
from agentrt.journal.sqlite_store import SqliteJournalStore
from agentrt.journal.urls import make_store
from tests.journal.conftest import Backend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def step(program: str, seq: int, *, side_effect: bool = True, name: str = "t") -> StepSpec:
    return StepSpec(program, "main", seq, "tool", name, {"seq": seq}, side_effect=side_effect)


async def ok(key: str) -> str:
    return key[-6:]


# -- URLs ------------------------------------------------------------------------------------


def test_urls_map_to_the_right_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    default = make_store(None)
    assert isinstance(default, SqliteJournalStore)
    assert default.path == tmp_path.resolve() / ".agentrt" / "journal.sqlite"
    assert default.path == default_journal_path()
    plain = make_store(str(tmp_path / "j.db"))
    assert isinstance(plain, SqliteJournalStore) and plain.synchronous == "FULL"
    url = make_store(f"sqlite:///{tmp_path}/k.db", synchronous="NORMAL")
    assert isinstance(url, SqliteJournalStore) and url.path == tmp_path / "k.db"
    assert url.synchronous == "NORMAL"
    pg = make_store("postgresql://u:secret@db.invalid/j", schema="s1")
    assert isinstance(pg, PostgresJournalStore)
    assert pg.url.drivername == "postgresql+asyncpg" and "secret" not in pg.where


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("sqlite:///:memory:", {}),
        ("mysql://x/y", {}),
        ("postgresql+psycopg2://x/y", {}),
        ("/tmp/x.sqlite", {"schema": "s"}),
        ("/tmp/x.sqlite", {"synchronous": "OFF"}),
        ("postgresql://x/y", {"pool_size": 0}),
    ],
)
def test_bad_configuration_is_refused_at_construction(url: str, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        Journal(url, **options)


# -- schema versions --------------------------------------------------------------------------


async def test_fresh_database_is_at_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    async with Journal(str(path)) as journal:
        await journal.run_step(step("p", 0), ok)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM agentrt_journal_version").fetchall() == [
            (len(MIGRATIONS),)
        ]
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_newer_schema_names_the_file_and_versions(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    async with Journal(str(path)):
        pass
    with sqlite3.connect(path) as db:
        db.execute("UPDATE agentrt_journal_version SET version = 99")
    with pytest.raises(SchemaVersionError) as caught:
        async with Journal(str(path)):
            pass
    message = str(caught.value)
    assert str(path) in message and "99" in message and f"up to {len(MIGRATIONS)}" in message


async def test_corrupt_file_is_a_schema_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    path.write_bytes(b"this is not a database, just some bytes" * 200)
    with pytest.raises(SchemaVersionError, match=str(path)):
        async with Journal(str(path)):
            pass


async def test_journal_tables_without_version_row_are_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    async with Journal(str(path)):
        pass
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM agentrt_journal_version")
    with pytest.raises(SchemaVersionError, match="unreadable schema version"):
        async with Journal(str(path)):
            pass
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE agentrt_journal_version")
    with pytest.raises(SchemaVersionError, match="no schema version table"):
        async with Journal(str(path)):
            pass


async def test_upgrade_path_runs_newer_migrations_and_keeps_rows(backend: Backend) -> None:
    async with backend.journal() as journal:
        await journal.run_step(step("old", 0), ok)
    added = Table("agentrt_journal_extra", MetaData(), Column("id", Integer, primary_key=True))

    def v2(conn: Connection) -> None:
        added.create(conn)

    migrations = (*MIGRATIONS, Migration(len(MIGRATIONS) + 1, "extra table", v2))
    store = make_store(backend.url, schema=backend.schema)
    store._migrations = migrations
    assert await store.open() == len(MIGRATIONS) + 1
    assert await store.open() == len(MIGRATIONS) + 1  # idempotent
    rows = await store.program_steps("old")
    await store.close()
    assert [r.status for r in rows] == [StepStatus.COMMITTED]
    # The unchanged release now sees a newer database and refuses it.
    with pytest.raises(SchemaVersionError, match="newer"):
        async with backend.journal():
            pass


# -- fail closed ------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("where", ["postgres-refused", "sqlite-unopenable"])
async def test_unreachable_journal_fails_closed_but_read_only_steps_run(
    tmp_path: Path, where: str
) -> None:
    if where == "postgres-refused":
        url = f"postgresql://agentrt@127.0.0.1:{closed_port()}/nothing"
    else:
        (tmp_path / "file").write_text("x")
        url = str(tmp_path / "file" / "journal.sqlite")  # parent is a file
    ran: list[str] = []

    async def effect(key: str) -> str:
        ran.append(key)
        return "done"

    async with Journal(url, connect_timeout_s=2) as journal:
        assert not journal.available
        with pytest.raises(JournalUnavailable):
            await journal.run_step(step("p", 0), effect)
        assert ran == []
        assert await journal.run_step(step("p", 1, side_effect=False), effect) == "done"
        llm = StepSpec("p", "main", 2, "llm", "m", {})
        assert await journal.run_step(llm, effect) == "done"
        await journal.record_tool_duration("t", 1.0)
        assert await journal.predict_tool_duration("t") is None
    assert len(ran) == 2


class FlakyStore(SqliteJournalStore):
    """A real SQLite store whose writes can be switched off (the database 'goes away')."""

    down = False

    async def _write_one(self, statement: Any, params: Any = None) -> int:
        if self.down:
            raise OSError("disk unplugged")
        return await super()._write_one(statement, params)


async def test_journal_lost_after_the_effect_surfaces_then_reconciles(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "j.sqlite")
    effects: list[str] = []

    async def effect(key: str) -> str:
        effects.append(key)
        store.down = True  # the journal dies while the effect runs
        return "sent"

    async with Journal.from_store(store) as journal:
        with pytest.raises(JournalUnavailable, match="effect ran but its result"):
            await journal.run_step(step("p", 0), effect)
        store.down = False
        with pytest.raises(Exception, match="unknown outcome"):
            await journal.run_step(step("p", 0), effect)
    assert len(effects) == 1


# -- operations -----------------------------------------------------------------------------


async def test_tool_duration_history_and_prediction(backend: Backend) -> None:
    async with backend.journal(duration_history=5) as journal:
        assert await journal.predict_tool_duration("search") is None
        for duration in (9.0, 1.0, 2.0, 3.0, 100.0, 4.0, 5.0):
            await journal.record_tool_duration("search", duration)
        await journal.record_tool_duration("search", -1.0)  # ignored
        await journal.record_tool_duration("other", 0.5)
        history = await journal.tool_duration_history("search")
        assert history == [5.0, 4.0, 100.0, 3.0, 2.0]  # newest first, trimmed to 5
        assert await journal.predict_tool_duration("search") == 4.0
        assert await journal.predict_tool_duration("other") == 0.5


async def test_list_show_and_purge(backend: Backend) -> None:
    now = [1_000_000.0]

    def clock() -> float:  # one second passes at every reading
        now[0] += 1.0
        return now[0]

    store = make_store(backend.url, schema=backend.schema)
    async with Journal.from_store(store, clock=clock) as journal:
        for seq in range(3):
            await journal.run_step(step("old-done", seq), ok)
        await journal.run_step(step("old-open", 0), ok)

        async def crash(key: str) -> None:
            from agentrt.errors import UnknownOutcome

            raise UnknownOutcome("crash", key=key)

        with pytest.raises(Exception, match="crash"):
            await journal.run_step(step("old-open", 1), crash)
        now[0] += 30 * 24 * 3600.0
        await journal.run_step(step("new-done", 0), ok)

        listed = await journal.list_programs()
        assert [p.program_id for p in listed] == ["new-done", "old-open", "old-done"]
        open_only = await journal.list_programs(status=StepStatus.STARTED)
        assert [(p.program_id, p.started, p.committed) for p in open_only] == [("old-open", 1, 1)]
        assert len(await journal.list_programs(limit=1)) == 1

        dry = await journal.purge(PurgePolicy(older_than_s=7 * 24 * 3600.0), dry_run=True)
        assert (dry.programs, dry.steps) == (1, 3)
        assert len(await journal.program_steps("old-done")) == 3
        done = await journal.purge(PurgePolicy(older_than_s=7 * 24 * 3600.0))
        assert (done.programs, done.steps) == (1, 3)
        assert await journal.program_steps("old-done") == []
        # The unresolved program stays until purged explicitly.
        explicit = await journal.purge(
            PurgePolicy(older_than_s=None, statuses=None, program_ids=("old-open",))
        )
        assert (explicit.programs, explicit.steps) == (1, 2)
        assert [p.program_id for p in await journal.list_programs()] == ["new-done"]


def test_purge_policy_validation() -> None:
    with pytest.raises(ConfigError):
        PurgePolicy(older_than_s=-1)
    with pytest.raises(ConfigError):
        PurgePolicy(statuses=frozenset())


# -- load -----------------------------------------------------------------------------------


async def test_100_programs_x_10_intents_concurrently(backend: Backend) -> None:
    effects: dict[str, int] = {}

    async def effect(key: str) -> str:
        effects[key] = effects.get(key, 0) + 1
        await anyio.lowlevel.checkpoint()
        return key

    async def program(journal: Journal, index: int) -> None:
        for seq in range(10):
            await journal.run_step(step(f"load-{index}", seq), effect)

    async with backend.journal() as journal:
        async with anyio.create_task_group() as tg:
            for index in range(100):
                tg.start_soon(program, journal, index)
        summaries = await journal.list_programs(limit=1000)
    assert len(effects) == 1000 and set(effects.values()) == {1}
    assert len(summaries) == 100 and {s.committed for s in summaries} == {10}


async def test_two_journals_on_one_database_contend_without_lock_errors(
    backend: Backend,
) -> None:
    """Two writers on one store (two processes' worth of connections on one SQLite file)."""

    async def program(journal: Journal, name: str) -> None:
        for seq in range(10):
            await journal.run_step(step(name, seq), ok)

    async with backend.journal() as first, backend.journal() as second:
        async with anyio.create_task_group() as tg:
            for index in range(40):
                tg.start_soon(program, first if index % 2 else second, f"two-{index}")
        summaries = await first.list_programs(limit=100)
    assert len(summaries) == 40 and {s.committed for s in summaries} == {10}


async def test_sqlite_group_commit_isolates_a_bad_statement_and_survives_cancellation(
    tmp_path: Path,
) -> None:
    from sqlalchemy import text

    store = SqliteJournalStore(tmp_path / "j.sqlite")
    await store.open()
    journal = Journal.from_store(store)
    outcomes: dict[str, object] = {}

    async def good(index: int) -> None:
        outcomes[f"good-{index}"] = await journal.run_step(step(f"g{index}", 0), ok)

    async def bad() -> None:
        try:
            await store._write_one(text("INSERT INTO no_such_table VALUES (1)"))
        except Exception as exc:
            outcomes["bad"] = exc

    async def cancelled(index: int) -> None:
        with anyio.move_on_after(0):
            await journal.run_step(step(f"c{index}", 0), ok)

    async with anyio.create_task_group() as tg:
        for index in range(30):
            tg.start_soon(good, index)
            if index % 10 == 0:
                tg.start_soon(bad)
            if index % 3 == 0:
                tg.start_soon(cancelled, index)
    # Writes after all that still go through (the queue was never stranded).
    with anyio.fail_after(10):
        await journal.run_step(step("after", 0), ok)
    await journal.close()
    assert sum(1 for k in outcomes if k.startswith("good-")) == 30
    assert "no_such_table" in str(outcomes["bad"])
    async with Journal(str(tmp_path / "j.sqlite")) as reopened:
        listed = await reopened.list_programs(limit=100)
    committed = {p.program_id for p in listed if p.committed == 1}
    assert {f"g{i}" for i in range(30)} | {"after"} <= committed


async def test_postgres_connections_killed_by_the_server_are_replaced(tmp_path: Path) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from tests.journal.conftest import drop_schema, require_postgres

    url = require_postgres()
    schema = f"t_kill_{int(anyio.current_time() * 1000) % 10**9}"
    admin = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1))
    try:
        async with Journal(url, schema=schema) as journal:
            await journal.run_step(step("p", 0), ok)
            async with admin.begin() as conn:  # the server drops every journal connection
                killed = (
                    await conn.execute(
                        text(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE application_name = 'agentrt-journal'"
                        )
                    )
                ).scalar_one()
            assert killed >= 1
            await journal.run_step(step("p", 1), ok)  # pre-ping replaces the dead connection
            assert [r.status for r in await journal.program_steps("p")] == [
                StepStatus.COMMITTED
            ] * 2
    finally:
        await admin.dispose()
        await drop_schema(url, schema)


@pytest.mark.parametrize(
    ("synchronous", "sqlite_value", "pg_value"),
    [
        ("FULL", 2, "on"),
        ("NORMAL", 1, "off"),
    ],
)
async def test_durability_settings_reach_every_connection(
    backend: Backend, synchronous: Any, sqlite_value: int, pg_value: str
) -> None:
    from sqlalchemy import text

    async with backend.journal(synchronous=synchronous) as journal:
        await journal.run_step(step("p", 0), ok)
        store = journal.store
        async with store._read() as conn:
            if backend.name == "sqlite":
                assert (await conn.execute(text("PRAGMA synchronous"))).scalar() == sqlite_value
                assert (await conn.execute(text("PRAGMA journal_mode"))).scalar() == "wal"
                assert (await conn.execute(text("PRAGMA busy_timeout"))).scalar() == 5000
            else:
                shown = (await conn.execute(text("SHOW synchronous_commit"))).scalar()
                assert shown == pg_value
        async with store._write() as conn:  # the write connection too
            if backend.name == "sqlite":
                assert (await conn.execute(text("PRAGMA synchronous"))).scalar() == sqlite_value
            else:
                assert (await conn.execute(text("SHOW synchronous_commit"))).scalar() == pg_value
