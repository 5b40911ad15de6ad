"""Plain data crossing the journal's store boundary: step records, summaries, purge policy."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agentrt.errors import ConfigError
from agentrt.journal.keys import decode_result
from agentrt.json_types import JSONValue

__all__ = [
    "ProgramSummary",
    "PurgePolicy",
    "PurgeResult",
    "StepPosition",
    "StepRecord",
    "StepStatus",
]


class StepStatus(enum.StrEnum):
    """Life cycle of a step row."""

    #: Intent recorded (side effect) — the effect may be running, or may have happened and the
    #: process died before recording it: an unknown outcome when found on a re-run.
    STARTED = "STARTED"
    #: Finished; ``result_json`` holds the result that replays return.
    COMMITTED = "COMMITTED"
    #: The step raised; a re-run runs it again (the retry policy is the caller's).
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class StepPosition:
    """Where a step sits in its program: its primary key."""

    program_id: str
    thread_id: str
    #: 0-based sequence number within the thread.
    seq: int


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One row of ``agentrt_journal_steps`` (see ``schema.steps`` for each field)."""

    position: StepPosition
    kind: str
    name: str
    args_hash: str
    key: str
    status: StepStatus
    side_effect: bool
    idempotent: bool
    #: How many times the step was started (>= 1).
    attempts: int
    node_id: str
    result_json: str | None
    error_type: str | None
    error_message: str | None
    owner: str
    #: Epoch seconds.
    created_at: float
    started_at: float
    updated_at: float
    #: Seconds, ``None`` while STARTED.
    duration_s: float | None

    @property
    def result(self) -> JSONValue:
        """The stored result (decoded JSON), ``None`` when there is none."""
        return decode_result(self.result_json)

    def describe(self) -> str:
        """One line for messages: position, kind, name, status, attempts (never user data)."""
        p = self.position
        return (
            f"{self.kind} {self.name!r} at program {p.program_id!r} thread {p.thread_id!r} "
            f"seq {p.seq} ({self.status.value}, attempt {self.attempts}, key {self.key})"
        )

    def __repr__(self) -> str:  # results may hold user data: never print them
        return f"StepRecord({self.describe()})"


@dataclass(frozen=True, slots=True)
class ProgramSummary:
    """Aggregate of one program's steps, for ``agentrt journal list``."""

    program_id: str
    steps: int
    committed: int
    failed: int
    #: Steps left STARTED: running now, or unknown outcomes of a crashed run.
    started: int
    #: Epoch seconds of the first step and of the last change.
    first_at: float
    last_at: float


@dataclass(frozen=True, slots=True)
class PurgePolicy:
    """Which *whole programs* to delete from the journal.

    A program is purged when every given condition holds: its last change is older than
    ``older_than_s`` seconds (``None``: any age), every one of its steps has a status in
    ``statuses`` (``None``: any status — so programs with unresolved STARTED steps are kept by
    the default ``{COMMITTED, FAILED}``), and its id is in ``program_ids`` (``None``: any id).
    Whole programs only: deleting some steps of a program would make its re-run execute them
    again.
    """

    older_than_s: float | None = 7 * 24 * 3600.0
    statuses: frozenset[StepStatus] | None = frozenset({StepStatus.COMMITTED, StepStatus.FAILED})
    program_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.older_than_s is not None and self.older_than_s < 0:
            raise ConfigError(f"older_than_s must be >= 0, got {self.older_than_s}")
        if self.statuses is not None and not self.statuses:
            raise ConfigError("statuses must not be empty (use None for any status)")


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """What a purge deleted."""

    programs: int
    steps: int
