"""Journal test fixtures: every backend test runs on a fresh SQLite file and on PostgreSQL.

PostgreSQL runs when ``AGENTRT_TEST_POSTGRES_URL`` is set (``./dev test`` starts one with
scripts/pg-scratch.sh); otherwise those tests are skipped — or fail when
``AGENTRT_REQUIRE_POSTGRES=1`` (``.ci/run`` sets it), so CI cannot pass without them.
Each PostgreSQL test gets a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentrt.journal import Journal

POSTGRES_URL = os.environ.get("AGENTRT_TEST_POSTGRES_URL")
REQUIRE_POSTGRES = os.environ.get("AGENTRT_REQUIRE_POSTGRES") == "1"


def require_postgres() -> str:
    """The test PostgreSQL URL, or skip (fail under AGENTRT_REQUIRE_POSTGRES=1)."""
    if POSTGRES_URL:
        return POSTGRES_URL
    if REQUIRE_POSTGRES:
        pytest.fail("AGENTRT_REQUIRE_POSTGRES=1 but AGENTRT_TEST_POSTGRES_URL is not set")
    pytest.skip("no PostgreSQL: set AGENTRT_TEST_POSTGRES_URL (./dev test starts one)")


@dataclass
class Backend:
    """Where a test's journal lives."""

    name: str  # "sqlite" or "postgres"
    url: str
    schema: str | None

    def journal(self, **options: Any) -> Journal:
        if self.schema is not None:
            options.setdefault("schema", self.schema)
        return Journal(self.url, **options)


async def drop_schema(url: str, schema: str) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1))
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        await engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str
) -> AsyncIterator[Backend]:
    if request.param == "sqlite":
        yield Backend("sqlite", str(tmp_path / "journal.sqlite"), None)
        return
    url = require_postgres()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield Backend("postgres", url, schema)
    await drop_schema(url, schema)


@pytest.fixture
def counter() -> Callable[[], dict[str, int]]:
    """A factory of fresh call counters (name → calls)."""
    return dict


#: Crash-harness summaries of this session (filled by test_crash.py), printed at the end of the
#: run so that CI logs show the counts even with ``-q``.
CRASH_SUMMARIES: list[tuple[str, dict[str, Any]]] = []


@pytest.fixture
def crash_summaries() -> list[tuple[str, dict[str, Any]]]:
    """Where a crash test puts its summary (a fixture: the list of the conftest module that
    pytest loaded, which also prints it — importing the module again would make a copy)."""
    return CRASH_SUMMARIES


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not CRASH_SUMMARIES:
        return
    import json

    terminalreporter.write_sep("-", "journal crash harness")
    for db, summary in CRASH_SUMMARIES:
        short = {k: v for k, v in summary.items() if k != "kill_points"}
        terminalreporter.write_line(f"[{db}] {json.dumps(short)}")
