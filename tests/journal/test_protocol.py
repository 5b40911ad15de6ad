"""The intent protocol on real databases (SQLite file and PostgreSQL): docs/journal.md,
"The protocol"."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentrt.errors import (
    NonDeterminismError,
    ResultNotSerializable,
    UnknownOutcome,
)
from agentrt.journal import Journal, ReconcileResult, StepPosition, StepSpec, StepStatus
from tests.journal.conftest import Backend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def effect_step(
    seq: int = 0,
    *,
    name: str = "send_email",
    args: Any = None,
    idempotent: bool = False,
    program: str = "prog-1",
) -> StepSpec:
    return StepSpec(
        program,
        "main",
        seq,
        "tool",
        name,
        args if args is not None else {"to": "a"},
        side_effect=True,
        idempotent=idempotent,
        node_id=f"n{seq}",
    )


class Tool:
    """A side-effecting tool that counts its effects and can fail or hang on demand."""

    def __init__(self, journal: Journal | None = None) -> None:
        self.effects: list[str] = []
        self.journal = journal
        self.seen_status: list[StepStatus | None] = []
        self.fail_with: Exception | None = None
        self.hang = False
        self.hanging = anyio.Event()  # set when a hanging call has begun its effect

    async def __call__(self, key: str) -> dict[str, Any]:
        if self.journal is not None:  # the intent must be durable before the effect runs
            record = await self.journal.store.get_step_by_key(key)
            self.seen_status.append(None if record is None else record.status)
        if self.hang:
            self.hanging.set()
            await anyio.sleep_forever()
        if self.fail_with is not None:
            raise self.fail_with
        self.effects.append(key)
        return {"sent": len(self.effects), "key": key}


async def test_intent_is_durable_before_the_effect_then_committed(backend: Backend) -> None:
    async with backend.journal() as journal:
        tool = Tool(journal)
        result = await journal.run_step(effect_step(), tool)
        assert tool.seen_status == [StepStatus.STARTED]
        assert result == {"sent": 1, "key": tool.effects[0]}
        (record,) = await journal.program_steps("prog-1")
        assert record.status is StepStatus.COMMITTED and record.result == result
        assert record.attempts == 1 and record.key == tool.effects[0]
        assert record.duration_s is not None and record.duration_s >= 0


async def test_rerun_replays_a_committed_effect_without_executing(backend: Backend) -> None:
    tool = Tool()
    async with backend.journal() as journal:
        first = await journal.run_step(effect_step(), tool)
    async with backend.journal() as journal:  # a new process re-running the program
        again = await journal.run_step(effect_step(), tool)
    assert again == first and len(tool.effects) == 1


async def test_failed_step_runs_again_with_the_same_key(backend: Backend) -> None:
    tool = Tool()
    tool.fail_with = RuntimeError("smtp down")
    async with backend.journal() as journal:
        with pytest.raises(RuntimeError, match="smtp down"):
            await journal.run_step(effect_step(), tool)
        (failed,) = await journal.program_steps("prog-1")
        assert failed.status is StepStatus.FAILED and failed.error_type == "RuntimeError"
        tool.fail_with = None
        await journal.run_step(effect_step(), tool)
        (done,) = await journal.program_steps("prog-1")
    assert done.status is StepStatus.COMMITTED and done.attempts == 2
    assert tool.effects == [failed.key]


async def test_cancelled_effect_is_an_unknown_outcome(backend: Backend) -> None:
    tool = Tool()
    tool.hang = True
    async with backend.journal() as journal:
        # Cancelled once the effect has begun (its intent durable), not after a fixed time:
        # a loaded machine may not have written the intent within any short window.
        with anyio.fail_after(10):  # a hang, not a measurement
            async with anyio.create_task_group() as group:
                group.start_soon(journal.run_step, effect_step(), tool)
                await tool.hanging.wait()
                group.cancel_scope.cancel()
        with pytest.raises(UnknownOutcome) as caught:
            await journal.run_step(effect_step(), Tool())
    (record,) = [caught.value.intent]
    assert caught.value.key == record.key and record.status is StepStatus.STARTED
    assert "agentrt journal resolve" in str(caught.value)


async def test_tool_raising_unknown_outcome_leaves_the_intent_started(backend: Backend) -> None:
    async def unsure(key: str) -> None:
        raise UnknownOutcome("provider timed out", key=key)

    async with backend.journal() as journal:
        with pytest.raises(UnknownOutcome):
            await journal.run_step(effect_step(), unsure)
        (record,) = await journal.program_steps("prog-1")
        assert record.status is StepStatus.STARTED
        with pytest.raises(UnknownOutcome, match="unknown outcome"):
            await journal.run_step(effect_step(), Tool())


async def _leave_started(journal: Journal, step: StepSpec) -> str:
    async def crash(key: str) -> None:
        raise UnknownOutcome("simulated crash", key=key)

    with pytest.raises(UnknownOutcome):
        await journal.run_step(step, crash)
    (record,) = [
        r for r in await journal.program_steps(step.program_id) if r.position.seq == step.seq
    ]
    return record.key


async def test_reconcile_done_commits_the_found_result(backend: Backend) -> None:
    tool = Tool()
    asked: list[str] = []

    async def found(key: str) -> ReconcileResult:
        asked.append(key)
        return ReconcileResult("done", {"sent": "found at provider"})

    async with backend.journal() as journal:
        key = await _leave_started(journal, effect_step())
        result = await journal.run_step(effect_step(), tool, reconcile=found)
        assert result == {"sent": "found at provider"} and asked == [key] and not tool.effects
        # From now on it replays; the hook is not asked again.
        assert await journal.run_step(effect_step(), tool, reconcile=found) == result
        (record,) = await journal.program_steps("prog-1")
    assert asked == [key] and record.status is StepStatus.COMMITTED


async def test_reconcile_not_done_runs_the_step(backend: Backend) -> None:
    tool = Tool()

    async def absent(key: str) -> ReconcileResult:
        return ReconcileResult("not_done")

    async with backend.journal() as journal:
        key = await _leave_started(journal, effect_step())
        await journal.run_step(effect_step(), tool, reconcile=absent)
        (record,) = await journal.program_steps("prog-1")
    assert tool.effects == [key] and record.attempts == 2
    assert record.status is StepStatus.COMMITTED


@pytest.mark.parametrize("answer", ["unknown", "raises", "garbage"])
async def test_reconcile_that_cannot_tell_raises_unknown_outcome(
    backend: Backend, answer: str
) -> None:
    async def hook(key: str) -> Any:
        if answer == "raises":
            raise ConnectionError("provider down")
        return ReconcileResult("unknown") if answer == "unknown" else "yes"

    tool = Tool()
    async with backend.journal() as journal:
        key = await _leave_started(journal, effect_step())
        with pytest.raises(UnknownOutcome) as caught:
            await journal.run_step(effect_step(), tool, reconcile=hook)
    assert caught.value.key == key and not tool.effects


async def test_idempotent_unknown_outcome_runs_again_with_the_same_key(backend: Backend) -> None:
    tool = Tool()
    async with backend.journal() as journal:
        key = await _leave_started(journal, effect_step(idempotent=True))
        await journal.run_step(effect_step(idempotent=True), tool)
    assert tool.effects == [key]


async def test_different_step_at_a_recorded_position_is_non_deterministic(
    backend: Backend,
) -> None:
    async with backend.journal() as journal:
        await journal.run_step(effect_step(), Tool())
        with pytest.raises(NonDeterminismError, match="'charge_card'"):
            await journal.run_step(effect_step(name="charge_card"), Tool())
        with pytest.raises(NonDeterminismError, match="different arguments"):
            await journal.run_step(effect_step(args={"to": "b"}), Tool())
        llm = StepSpec("prog-1", "main", 0, "llm", "send_email", {"to": "a"})
        with pytest.raises(NonDeterminismError):
            await journal.run_step(llm, Tool())


async def test_llm_and_read_only_steps_are_recorded_after_and_replayed(backend: Backend) -> None:
    calls: list[str] = []

    async def llm(key: str) -> dict[str, Any]:
        calls.append(key)
        return {"content": f"answer {len(calls)}"}

    step = StepSpec("prog-2", "main.0", 0, "llm", "llama-8b", {"messages": ["hi"]})
    async with backend.journal() as journal:
        first = await journal.run_step(step, llm)
    async with backend.journal() as journal:
        assert await journal.run_step(step, llm) == first
        (record,) = await journal.program_steps("prog-2")
    assert len(calls) == 1 and record.status is StepStatus.COMMITTED and not record.side_effect


async def test_read_only_failure_is_recorded_and_retried(backend: Backend) -> None:
    async def flaky(key: str) -> str:
        raise ValueError("rate limited")

    step = StepSpec("prog-3", "main", 0, "tool", "search", {"q": "x"})
    async with backend.journal() as journal:
        with pytest.raises(ValueError):
            await journal.run_step(step, flaky)
        (failed,) = await journal.program_steps("prog-3")
        assert failed.status is StepStatus.FAILED

        async def ok(key: str) -> str:
            return "found"

        assert await journal.run_step(step, ok) == "found"
        (done,) = await journal.program_steps("prog-3")
    assert done.status is StepStatus.COMMITTED and done.attempts == 2


async def test_unserialisable_side_effect_result_stays_unknown(backend: Backend) -> None:
    tool_runs: list[str] = []

    async def returns_object(key: str) -> object:
        tool_runs.append(key)
        return object()

    async with backend.journal() as journal:
        with pytest.raises(ResultNotSerializable, match="send_email"):
            await journal.run_step(effect_step(), returns_object)
        (record,) = await journal.program_steps("prog-1")
        # The effect happened but cannot be replayed: never FAILED (that would re-run it).
        assert record.status is StepStatus.STARTED
        assert record.error_type == "ResultNotSerializable"
        with pytest.raises(UnknownOutcome):
            await journal.run_step(effect_step(), returns_object)
    assert len(tool_runs) == 1


async def test_unserialisable_read_only_result_is_not_recorded(backend: Backend) -> None:
    async def returns_set(key: str) -> set[int]:
        return {1, 2}

    step = StepSpec("prog-4", "main", 0, "llm", "m", {})
    async with backend.journal() as journal:
        with pytest.raises(ResultNotSerializable):
            await journal.run_step(step, returns_set)
        assert await journal.program_steps("prog-4") == []


async def test_resolve_unknown_by_hand(backend: Backend) -> None:
    async with backend.journal() as journal:
        key_a = await _leave_started(journal, effect_step(0))
        key_b = await _leave_started(journal, effect_step(1))
        done = await journal.resolve_unknown(key_a, happened=True, result={"sent": "by hand"})
        assert done.status is StepStatus.COMMITTED
        not_done = await journal.resolve_unknown(key_b, happened=False)
        assert not_done.status is StepStatus.FAILED
        tool = Tool()
        assert await journal.run_step(effect_step(0), tool) == {"sent": "by hand"}
        await journal.run_step(effect_step(1), tool)
    assert tool.effects == [key_b]


async def test_threads_and_positions_are_independent(backend: Backend) -> None:
    tool = Tool()
    async with backend.journal() as journal:
        for thread in ("main", "main.0", "main.1"):
            for seq in range(3):
                step = StepSpec("prog-5", thread, seq, "tool", "t", {"s": seq}, side_effect=True)
                await journal.run_step(step, tool)
        records = await journal.program_steps("prog-5")
    assert len(tool.effects) == len(set(tool.effects)) == 9
    assert [(r.position.thread_id, r.position.seq) for r in records] == [
        (t, s) for t in ("main", "main.0", "main.1") for s in range(3)
    ]
    assert records[0].position == StepPosition("prog-5", "main", 0)


@pytest.mark.parametrize(
    "bad",
    [
        {"program_id": ""},
        {"program_id": "p" * 256},
        {"thread_id": ""},
        {"name": "n" * 300},
        {"seq": -1},
        {"kind": "shell"},
    ],
)
async def test_identities_the_store_cannot_hold_are_refused_before_running(
    backend: Backend, bad: dict[str, Any]
) -> None:
    from dataclasses import replace

    from agentrt.errors import JournalError

    tool = Tool()
    async with backend.journal() as journal:
        with pytest.raises(JournalError, match="must be"):
            await journal.run_step(replace(effect_step(), **bad), tool)
    assert tool.effects == []
