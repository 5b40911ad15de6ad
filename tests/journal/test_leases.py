"""Program leases on SQLite and PostgreSQL: one holder at a time, expiry and takeover with an
epoch increment, fencing of a zombie holder's writes, exactly one winner under concurrency,
the upgrade from the schema without leases.

Expiry is driven by injected clocks (``Journal.from_store(clock=...)``), never by sleeping;
journals here are connected without ``async with``, so no background heartbeat runs (renewal
happens on demand before a side effect).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentrt.errors import JournalUnavailable, ProgramLeaseHeld, ProgramLeaseLost, UnknownOutcome
from agentrt.journal import Journal, ReconcileResult, StepSpec, StepStatus
from agentrt.journal.keys import arguments_hash, encode_result, idempotency_key
from agentrt.journal.migrations import MIGRATIONS
from agentrt.journal.records import StepPosition
from agentrt.journal.sqlite_store import SqliteJournalStore
from agentrt.journal.steps import StepRunner
from agentrt.journal.urls import make_store
from tests.journal.conftest import Backend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

T0 = 1_000_000.0
TTL = 30.0


class Clock:
    """A wall clock (epoch seconds) that only moves when told to."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


MakeJournal = Callable[..., Any]


@pytest.fixture
async def journals(backend: Backend) -> AsyncIterator[MakeJournal]:
    """``make(clock)``: a connected journal (own store, own owner id) on the test database."""
    made: list[Journal] = []

    async def make(clock: Clock, **options: Any) -> Journal:
        store = make_store(backend.url, schema=backend.schema)
        options.setdefault("lease_ttl_s", TTL)
        journal = Journal.from_store(store, clock=clock, **options)
        await journal.connect()
        made.append(journal)
        return journal

    yield make
    for journal in made:
        await journal.close()


def effect_step(seq: int, program: str = "p") -> StepSpec:
    return StepSpec(program, "main", seq, "tool", "send", {"n": seq}, side_effect=True)


def llm_step(seq: int, program: str = "p") -> StepSpec:
    return StepSpec(program, "main", seq, "llm", "model", {"n": seq})


class Effects:
    """Counts executions per idempotency key (the outside world)."""

    def __init__(self) -> None:
        self.done: list[str] = []

    async def __call__(self, key: str) -> dict[str, str]:
        self.done.append(key)
        return {"key": key[-6:]}


async def test_second_runner_fails_fast_naming_holder_and_expiry(journals: MakeJournal) -> None:
    clock = Clock()
    a, b = await journals(clock), await journals(clock)
    lease = await a.acquire_lease("p")
    assert lease is not None and lease.epoch == 1
    with pytest.raises(ProgramLeaseHeld) as held:
        await b.acquire_lease("p")
    err = held.value
    assert (err.program_id, err.holder, err.expires_at) == ("p", lease.holder, T0 + TTL)
    assert lease.holder in str(err) and "'p'" in str(err) and "release-lease" in str(err)
    with pytest.raises(ProgramLeaseHeld, match="already running through this journal"):
        await a.acquire_lease("p")  # a second run inside the same journal: refused locally
    other = await b.acquire_lease("q")  # other program ids are independent
    assert other is not None and other.epoch == 1
    (row,) = await b.leases(["p"])
    assert (row.owner, row.epoch, row.expires_at, row.state(clock())) == (
        a.owner,
        1,
        T0 + TTL,
        "held",
    )


async def test_expired_lease_is_taken_over_with_a_new_epoch_and_replays(
    journals: MakeJournal,
) -> None:
    clock = Clock()
    a, b = await journals(clock), await journals(clock)
    effects = Effects()
    await a.acquire_lease("p")
    first = await a.run_step(effect_step(0), effects)
    clock.now = T0 + TTL  # the holder stopped renewing (crashed): expired at T0 + TTL
    lease_b = await b.acquire_lease("p")
    assert lease_b is not None and lease_b.epoch == 2
    assert await b.run_step(effect_step(0), effects) == first  # replayed, not re-run
    await b.run_step(effect_step(1), effects)
    assert len(effects.done) == 2


async def test_zombie_intent_after_takeover_is_refused_before_the_effect(
    journals: MakeJournal,
) -> None:
    # The zombie's clock lags (a paused process): locally its lease still looks fresh, so only
    # the database's fence can stop it.
    zombie_clock, clock = Clock(T0), Clock(T0)
    zombie, b = await journals(zombie_clock), await journals(clock)
    effects = Effects()
    await zombie.acquire_lease("p")
    clock.now = T0 + TTL + 1
    lease_b = await b.acquire_lease("p")
    assert lease_b is not None and lease_b.epoch == 2
    zombie_clock.now = T0 + 5
    with pytest.raises(ProgramLeaseLost, match="epoch 1"):
        await zombie.run_step(effect_step(0), effects)
    assert effects.done == []  # the effect never started
    held = zombie.held_lease("p")
    assert held is not None and held.lost
    with pytest.raises(ProgramLeaseLost):  # from now on refused before anything runs
        await zombie.run_step(llm_step(1), effects)
    assert effects.done == []
    assert await b.program_steps("p") == []  # nothing of the zombie's was recorded


async def test_zombie_read_only_record_after_takeover_is_refused(journals: MakeJournal) -> None:
    zombie_clock, clock = Clock(T0), Clock(T0 + TTL)
    zombie, b = await journals(zombie_clock), await journals(clock)
    await zombie.acquire_lease("p")
    await b.acquire_lease("p")
    with pytest.raises(ProgramLeaseLost):
        await zombie.run_step(llm_step(0), Effects())
    assert await b.program_steps("p") == []


async def test_zombie_commit_after_takeover_is_refused_and_the_new_holder_reconciles(
    journals: MakeJournal,
) -> None:
    zombie_clock, clock = Clock(T0), Clock(T0)
    zombie, b = await journals(zombie_clock), await journals(clock)
    outside: list[str] = []
    await zombie.acquire_lease("p")

    async def slow_effect(key: str) -> str:
        outside.append(key)
        clock.now = T0 + TTL + 1  # while the effect runs, the zombie's lease expires...
        assert (await b.acquire_lease("p")) is not None  # ...and is taken over
        return "receipt"

    with pytest.raises(ProgramLeaseLost, match="the effect ran"):
        await zombie.run_step(effect_step(0), slow_effect)
    (row,) = await b.program_steps("p")
    assert row.status is StepStatus.STARTED  # not recorded by the zombie: an unknown outcome
    with pytest.raises(UnknownOutcome):
        await b.run_step(effect_step(0), slow_effect)

    async def reconcile(key: str) -> ReconcileResult:
        return ReconcileResult("done", "receipt") if key in outside else ReconcileResult("not_done")

    assert await b.run_step(effect_step(0), slow_effect, reconcile=reconcile) == "receipt"
    assert len(outside) == 1


async def test_side_effect_renews_a_lease_close_to_expiry(journals: MakeJournal) -> None:
    clock = Clock()
    a, b = await journals(clock), await journals(clock)
    await a.acquire_lease("p")
    clock.now = T0 + TTL - 1  # less than TTL / 3 left: renewed before the effect starts
    await a.run_step(effect_step(0), Effects())
    (row,) = await a.leases(["p"])
    assert (row.epoch, row.expires_at) == (1, T0 + 2 * TTL - 1)
    clock.now = T0 + TTL + 1
    with pytest.raises(ProgramLeaseHeld):
        await b.acquire_lease("p")


async def test_release_lets_the_next_runner_in_and_fences_the_old_one(
    journals: MakeJournal,
) -> None:
    clock = Clock()
    a, b = await journals(clock), await journals(clock)
    await a.acquire_lease("p")
    await a.release_lease("p")
    (row,) = await a.leases(["p"])
    assert row.state(clock()) == "released"
    lease_b = await b.acquire_lease("p")
    assert lease_b is not None and lease_b.epoch == 2
    effects = Effects()
    with pytest.raises(ProgramLeaseHeld):  # a run without the lease cannot write
        await a.run_step(effect_step(0), effects)
    assert effects.done == []


async def test_operator_break_fences_the_holder_at_once(journals: MakeJournal) -> None:
    clock = Clock()
    a, b, operator = await journals(clock), await journals(clock), await journals(clock)
    await a.acquire_lease("p")
    before = await operator.break_lease("p")
    assert before is not None and before.epoch == 1 and before.owner == a.owner
    effects = Effects()
    with pytest.raises(ProgramLeaseLost):
        await a.run_step(effect_step(0), effects)
    assert effects.done == []
    lease_b = await b.acquire_lease("p")
    assert lease_b is not None and lease_b.epoch == 3
    assert await operator.break_lease("never-leased") is None


async def test_operator_resolve_is_refused_while_the_program_runs(journals: MakeJournal) -> None:
    clock = Clock()
    a, operator = await journals(clock), await journals(clock)
    await a.acquire_lease("p")

    async def lost(key: str) -> None:
        raise UnknownOutcome("timeout", key=key)

    with pytest.raises(UnknownOutcome) as unknown:
        await a.run_step(effect_step(0), lost)
    with pytest.raises(ProgramLeaseHeld):
        await operator.resolve_unknown(unknown.value.key, happened=False)
    await a.release_lease("p")
    resolved = await operator.resolve_unknown(unknown.value.key, happened=False)
    assert resolved.status is StepStatus.FAILED


async def test_waiting_acquirer_gets_the_lease_once_released(journals: MakeJournal) -> None:
    clock = Clock()
    a, b = await journals(clock), await journals(clock)
    await a.acquire_lease("p")
    with pytest.raises(ProgramLeaseHeld):
        await b.acquire_lease("p", wait_s=0.1)
    got: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def wait_for_it() -> None:
            got.append(await b.acquire_lease("p", wait_s=30))

        tg.start_soon(wait_for_it)
        await anyio.sleep(0.1)  # let it find the lease held (ordering only, nothing measured)
        await a.release_lease("p")
    assert got[0] is not None and got[0].epoch == 2


@pytest.mark.parametrize("contenders", [8])
async def test_concurrent_acquisition_has_exactly_one_winner(
    journals: MakeJournal, contenders: int
) -> None:
    clock = Clock()
    runners = [await journals(clock) for _ in range(contenders)]

    async def race(runners: list[Journal]) -> list[Any]:
        outcomes: list[Any] = []

        async def one(journal: Journal) -> None:
            try:
                outcomes.append(await journal.acquire_lease("p"))
            except ProgramLeaseHeld as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            for journal in runners:
                tg.start_soon(one, journal)
        return outcomes

    first = await race(runners)
    winners = [o for o in first if not isinstance(o, ProgramLeaseHeld)]
    assert len(first) == contenders and len(winners) == 1 and winners[0].epoch == 1
    clock.now = T0 + TTL  # the winner died: new runners race to take the expired lease over
    second = await race([await journals(clock) for _ in range(contenders)])
    winners = [o for o in second if not isinstance(o, ProgramLeaseHeld)]
    assert len(winners) == 1 and winners[0].epoch == 2


def _race_processes(backend: Backend, tmp_path: Path, contenders: int) -> list[str]:
    """Start ``contenders`` processes that each try to acquire one lease at the same moment
    (after all of them connected); their outputs (``won <epoch>`` / ``held``)."""
    go = tmp_path / "go"
    script = Path(__file__).with_name("leaseproc.py")
    args = [backend.url, backend.schema or "", "p-proc", str(go)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        for _ in range(contenders)
    ]
    try:
        give_up = time.monotonic() + 40
        while len(list(tmp_path.glob("ready-*"))) < contenders:
            failed = [p for p in procs if p.poll() not in (None, 0)]
            assert not failed, failed[0].communicate()
            assert time.monotonic() < give_up, "contenders did not connect"
            time.sleep(0.02)
        go.touch()
        outputs = [p.communicate(timeout=40) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs]
    return sorted(out.strip() for out, _ in outputs)


async def test_concurrent_acquisition_across_processes_has_exactly_one_winner(
    backend: Backend, tmp_path: Path
) -> None:
    results = await anyio.to_thread.run_sync(_race_processes, backend, tmp_path, 3)
    assert results == ["held", "held", "won 1"], results


async def test_upgrade_from_schema_v1_keeps_steps_and_adds_leases(backend: Backend) -> None:
    # A version-1 database holding one committed side effect, as the agentrt before leases
    # wrote it (plain, unfenced store writes).
    old_store = make_store(backend.url, schema=backend.schema)
    old_store._migrations = MIGRATIONS[:1]
    step = effect_step(0)
    args_hash = arguments_hash(step.arguments)
    key = idempotency_key("p", "main", 0, "tool", "send", args_hash)
    record = StepRunner(owner="old", clock=Clock())._new_record(
        step, StepPosition("p", "main", 0), key, args_hash
    )
    try:
        assert await old_store.open() == 1
        await old_store.upsert_step(
            replace(record, status=StepStatus.COMMITTED, result_json=encode_result("sent", what=""))
        )
    finally:
        await old_store.close()
    effects = Effects()
    first = "sent"

    store = make_store(backend.url, schema=backend.schema)
    assert await store.open() == len(MIGRATIONS) == 2
    await store.close()
    clock = Clock()
    new = Journal.from_store(make_store(backend.url, schema=backend.schema), clock=clock)
    try:
        lease = await new.acquire_lease("p")
        assert lease is not None and lease.epoch == 1
        assert await new.run_step(effect_step(0), effects) == first  # replayed after upgrade
        await new.run_step(effect_step(1), effects)
        assert [s.status for s in await new.program_steps("p")] == [StepStatus.COMMITTED] * 2
        assert len(effects.done) == 1  # only the new step ran
    finally:
        await new.close()


async def test_purge_keeps_a_running_program(journals: MakeJournal) -> None:
    from agentrt.journal import PurgePolicy

    clock = Clock()
    a = await journals(clock)
    await a.acquire_lease("p")
    await a.run_step(effect_step(0), Effects())
    kept = await a.purge(PurgePolicy(older_than_s=None, program_ids=("p",)))
    assert kept.programs == 0
    await a.release_lease("p")
    purged = await a.purge(PurgePolicy(older_than_s=None, program_ids=("p",)))
    assert purged.programs == 1 and await a.leases(["p"]) == []
    # a program that never recorded a step: its lease row goes once released and old enough
    await a.acquire_lease("idle")
    await a.purge(PurgePolicy(older_than_s=0.0))
    assert len(await a.leases(["idle"])) == 1  # live: kept
    await a.release_lease("idle")
    await a.purge(PurgePolicy(older_than_s=60.0))
    assert len(await a.leases(["idle"])) == 1  # released just now: younger than 60 s
    clock.now += 61
    await a.purge(PurgePolicy(older_than_s=60.0))
    assert await a.leases(["idle"]) == []


async def _until(condition: Callable[[], Any], what: str) -> None:
    """Poll ``condition`` (async) until true; fails after 10 s (a hang, not a measurement)."""
    with anyio.fail_after(10):
        while not await condition():  # noqa: ASYNC110 (state in a database: nothing to await)
            await anyio.sleep(0.02)


async def test_entered_journal_renews_in_the_background_and_releases_at_exit(
    backend: Backend,
) -> None:
    observer = backend.journal()
    try:
        async with backend.journal(lease_ttl_s=0.3) as journal:
            lease = await journal.acquire_lease("p")
            assert lease is not None

            async def renewed() -> bool:
                (row,) = await observer.leases(["p"])
                return row.renewed_at > row.acquired_at and row.epoch == 1

            await _until(renewed, "a heartbeat renewal")
            assert not lease.lost
        (row,) = await observer.leases(["p"])
        assert row.state(0.0) == "released" and row.epoch == 1
    finally:
        await observer.close()


async def test_heartbeat_notices_a_broken_lease(backend: Backend) -> None:
    operator = backend.journal()
    try:
        async with backend.journal(lease_ttl_s=0.3) as journal:
            lease = await journal.acquire_lease("p")
            assert lease is not None
            await operator.break_lease("p")

            async def noticed() -> bool:
                return lease.lost

            await _until(noticed, "the heartbeat to notice")
            with pytest.raises(ProgramLeaseLost):
                await journal.run_step(llm_step(0), Effects())
    finally:
        await operator.close()


async def test_errors_leave_an_entered_journal_unchanged(backend: Backend) -> None:
    with pytest.raises(KeyError):  # not wrapped in an exception group by the heartbeat group
        async with backend.journal() as journal:
            await journal.acquire_lease("p")
            raise KeyError("body")


class _DownAtFirst(SqliteJournalStore):
    """A real SQLite store that cannot be reached until ``down`` is switched off."""

    down = True

    async def _connect(self) -> None:
        if self.down:
            raise JournalUnavailable("the journal host is down")
        await super()._connect()


async def test_store_down_at_start_defers_the_lease_to_the_first_side_effect(
    tmp_path: Path,
) -> None:
    clock = Clock()
    store = _DownAtFirst(tmp_path / "j.sqlite")
    journal = Journal.from_store(store, clock=clock, retry_open_after_s=0.0)
    other = Journal.from_store(SqliteJournalStore(tmp_path / "j.sqlite"), clock=clock)
    try:
        with pytest.raises(JournalUnavailable):
            await journal.acquire_lease("p")
        assert await journal.acquire_lease("p", required=False) is None  # starts unleased
        effects = Effects()
        with pytest.raises(JournalUnavailable):  # side effects still fail closed
            await journal.run_step(effect_step(0), effects)
        store.down = False
        await journal.run_step(effect_step(0), effects)  # acquires the lease first
        held = journal.held_lease("p")
        assert held is not None and held.epoch == 1 and len(effects.done) == 1
        with pytest.raises(ProgramLeaseHeld):
            await other.acquire_lease("p")
    finally:
        await journal.close()
        await other.close()
