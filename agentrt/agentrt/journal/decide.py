"""What to do with a step, given what the journal holds at its position (docs/journal.md,
"The protocol").

Pure: no I/O, no clock. ``Journal.run_step`` performs the returned action; the table-driven
tests in ``tests/journal/test_decide.py`` pin every row of the protocol.
"""

from __future__ import annotations

import enum

from agentrt.journal.api import StepSpec
from agentrt.journal.records import StepRecord, StepStatus

__all__ = ["Action", "decide", "mismatch_message"]


class Action(enum.Enum):
    """The journal's answer for one ``run_step`` call."""

    #: Nothing recorded: write the intent (side effect) or just run (read-only), attempt 1.
    RUN_NEW = "run_new"
    #: COMMITTED: return the stored result without executing.
    REPLAY = "replay"
    #: FAILED: run again as attempt ``attempts + 1``.
    RETRY = "retry"
    #: STARTED, outcome unknown, a reconcile hook is given: ask it.
    RECONCILE = "reconcile"
    #: STARTED, outcome unknown, the step is idempotent: run again.
    RERUN = "rerun"
    #: STARTED, outcome unknown, no hook, not idempotent: raise ``UnknownOutcome``.
    UNKNOWN = "unknown"
    #: Another step is recorded at this position: raise ``NonDeterminismError``.
    MISMATCH = "mismatch"


def decide(
    record: StepRecord | None, step: StepSpec, args_hash: str, *, has_reconcile: bool
) -> Action:
    """The action for ``step`` (whose arguments hash to ``args_hash``) given ``record``."""
    if record is None:
        return Action.RUN_NEW
    if (record.kind, record.name, record.args_hash) != (step.kind, step.name, args_hash):
        return Action.MISMATCH
    if record.status is StepStatus.COMMITTED:
        return Action.REPLAY
    if record.status is StepStatus.FAILED:
        return Action.RETRY
    # STARTED. A read-only step (now and when recorded) is harmless to run again.
    if not (step.side_effect or record.side_effect):
        return Action.RERUN
    if has_reconcile:
        return Action.RECONCILE
    if step.idempotent:
        return Action.RERUN
    return Action.UNKNOWN


def mismatch_message(record: StepRecord, step: StepSpec, args_hash: str) -> str:
    """A clear NonDeterminismError message (names and hashes only, never argument values)."""
    p = record.position
    recorded = f"{record.kind} {record.name!r} with arguments hash {record.args_hash[:12]}"
    asked = f"{step.kind} {step.name!r} with arguments hash {args_hash[:12]}"
    what = (
        "different arguments"
        if (record.kind, record.name) == (step.kind, step.name)
        else ("a different step")
    )
    return (
        f"non-deterministic re-run of program {p.program_id!r}: at thread {p.thread_id!r} "
        f"seq {p.seq} the journal recorded {recorded}, this run asked for {asked} "
        f"({what}). A re-run must make the same steps in the same order with the same "
        "arguments; run it under a new program id, or purge the old program "
        f"(agentrt journal purge --program {p.program_id})"
    )
