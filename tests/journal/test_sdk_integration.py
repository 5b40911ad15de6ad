"""The journal under the SDK: ``@tool(side_effect=True, reconcile=...)``, ``Runtime``, ``chat``.

The LLM endpoint is an ``httpx.MockTransport`` (counted); side effects write rows into a
separate SQLite target database. Runs on SQLite and PostgreSQL journals.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

import agentrt
from agentrt import IdempotencyKey, ReconcileResult, Runtime, RuntimeConfig, UnknownOutcome, tool
from agentrt.errors import ProgramLeaseHeld
from agentrt.journal import Journal, StepStatus
from tests.journal.conftest import Backend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class Target:
    """The outside world: a SQLite file whose rows are the effects."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with self._db() as db:
            db.execute("CREATE TABLE effects (key TEXT, tool TEXT, detail TEXT)")

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None)

    def write(self, key: str, name: str, detail: str) -> int:
        db = self._db()
        try:
            cur = db.execute("INSERT INTO effects VALUES (?, ?, ?)", (key, name, detail))
            return int(cur.lastrowid or 0)
        finally:
            db.close()

    def find(self, key: str) -> int | None:
        db = self._db()
        try:
            row = db.execute("SELECT rowid FROM effects WHERE key = ?", (key,)).fetchone()
        finally:
            db.close()
        return None if row is None else int(row[0])

    def count(self) -> dict[str, int]:
        db = self._db()
        try:
            rows = db.execute("SELECT key, COUNT(*) FROM effects GROUP BY key").fetchall()
        finally:
            db.close()
        return {k: n for k, n in rows}


def llm_transport(calls: list[dict[str, Any]]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append(body)
        return httpx.Response(
            200,
            json={
                "id": f"c{len(calls)}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": f"plan {len(calls)}"},
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            },
        )

    return httpx.MockTransport(handler)


def make_tools(target: Target, crash: dict[str, bool]) -> tuple[Any, Any]:
    async def find_booking(key: str) -> ReconcileResult:
        row = target.find(key)
        return ReconcileResult("not_done") if row is None else ReconcileResult("done", row)

    @tool(side_effect=True, reconcile=find_booking)
    async def book(city: str, key: IdempotencyKey) -> int:
        """Book a hotel."""
        row = target.write(key, "book", city)
        if crash.get("book"):  # the process "dies" after the effect, before the commit
            raise UnknownOutcome("connection lost after the booking was sent", key=key)
        return row

    @tool(side_effect=True)
    async def pay(amount: int, key: IdempotencyKey) -> int:
        """Pay, no reconcile hook and not idempotent."""
        row = target.write(key, "pay", str(amount))
        if crash.get("pay"):
            raise UnknownOutcome("payment provider timed out", key=key)
        return row

    return book, pay


async def run_program(rt: Runtime, book: Any, pay: Any, program_id: str) -> dict[str, Any]:
    async with rt.program("trip", program_id=program_id):
        plan = await agentrt.chat([{"role": "user", "content": "plan a trip"}])
        booking = await book(city="Lyon")
        payment = await pay(amount=120)
        return {"plan": plan.choices[0].message.content, "booking": booking, "payment": payment}


def config(journal: Any, calls: list[dict[str, Any]]) -> RuntimeConfig:
    return RuntimeConfig(
        base_url="http://127.0.0.1:9/v1",
        model="m",
        controller="off",
        journal=journal,
        http_transport=llm_transport(calls),
    )


async def test_sdk_rerun_replays_llm_and_effects_and_reconciles(
    backend: Backend, tmp_path: Path
) -> None:
    target = Target(tmp_path / "target.sqlite")
    crash = {"book": True}
    book, pay = make_tools(target, crash)
    calls: list[dict[str, Any]] = []
    journal = backend.journal()
    async with journal:
        async with Runtime(config(journal, calls)) as rt:
            with pytest.raises(UnknownOutcome):
                await run_program(rt, book, pay, "trip-1")
        crash.clear()
        async with Runtime(config(journal, calls)) as rt:  # the re-run after the "crash"
            first = await run_program(rt, book, pay, "trip-1")
        async with Runtime(config(journal, calls)) as rt:  # a third run replays everything
            again = await run_program(rt, book, pay, "trip-1")
        steps = await journal.program_steps("trip-1")
        predicted = await journal.predict_tool_duration("pay")
    assert again == first and first["plan"] == "plan 1"
    assert len(calls) == 1  # the LLM answer was replayed, never asked again
    assert sorted(target.count().values()) == [1, 1]  # each effect happened exactly once
    assert [s.status for s in steps] == [StepStatus.COMMITTED] * 3
    assert [s.kind for s in steps] == ["llm", "tool", "tool"]
    assert first["booking"] == target.find(steps[1].key)  # the reconcile hook's answer
    assert predicted is not None and predicted >= 0


async def test_sdk_unknown_outcome_without_hook_surfaces(backend: Backend, tmp_path: Path) -> None:
    target = Target(tmp_path / "target.sqlite")
    crash = {"pay": True}
    book, pay = make_tools(target, crash)
    calls: list[dict[str, Any]] = []
    # SQLite: the runtime opens the journal from its URL; PostgreSQL: an instance we own
    # (its tests live in a schema of their own, which a bare URL cannot name).
    owned = backend.journal() if backend.schema is not None else None
    journal: Any = owned if owned is not None else backend.url
    try:
        async with Runtime(config(journal, calls)) as rt:
            with pytest.raises(UnknownOutcome):
                await run_program(rt, book, pay, "trip-2")
            crash.clear()
            with pytest.raises(UnknownOutcome) as caught:
                await run_program(rt, book, pay, "trip-2")
    finally:
        if owned is not None:
            await owned.close()
    assert target.count()[caught.value.key] == 1  # it did happen, and was not repeated


async def test_side_effect_tool_fails_closed_when_the_journal_is_unreachable(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("x")
    target = Target(tmp_path / "target.sqlite")
    book, _ = make_tools(target, {})
    calls: list[dict[str, Any]] = []
    journal = Journal(str(tmp_path / "file" / "journal.sqlite"))
    async with journal, Runtime(config(journal, calls)) as rt, rt.program("t", program_id="t3"):
        plan = await agentrt.chat([{"role": "user", "content": "hi"}])
        with pytest.raises(agentrt.JournalError):
            await book(city="Lyon")
    assert plan.choices[0].message.content == "plan 1"
    assert target.count() == {}


async def test_two_runtimes_cannot_run_one_program_id_at_once(
    backend: Backend, tmp_path: Path
) -> None:
    target = Target(tmp_path / "target.sqlite")
    book, pay = make_tools(target, {})
    calls: list[dict[str, Any]] = []
    first_journal, second_journal = backend.journal(), backend.journal()
    async with first_journal, second_journal:
        async with (
            Runtime(config(first_journal, calls)) as rt1,
            Runtime(config(second_journal, calls)) as rt2,
        ):
            async with rt1.program("trip", program_id="trip-9"):
                with pytest.raises(ProgramLeaseHeld) as held:
                    async with rt2.program("trip", program_id="trip-9"):
                        raise AssertionError("the second run must not start")
                with pytest.raises(ProgramLeaseHeld, match="already running through this journal"):
                    async with rt1.program("trip", program_id="trip-9"):
                        raise AssertionError("nor a second run in the same runtime")
                await agentrt.chat([{"role": "user", "content": "plan a trip"}])
                await book(city="Lyon")
            # the first run ended (lease released): the second runtime resumes the program
            result = await run_program(rt2, book, pay, "trip-9")
        (lease,) = await first_journal.leases(["trip-9"])
    assert held.value.program_id == "trip-9" and first_journal.owner in held.value.holder
    assert sorted(target.count().values()) == [1, 1]  # book ran once (replayed), pay once
    assert result["booking"] == 1 and len(calls) == 1  # the LLM answer was replayed too
    assert (lease.owner, lease.epoch, lease.expires_at) == (second_journal.owner, 2, 0.0)
