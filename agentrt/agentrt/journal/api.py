"""The seam between the SDK's step execution and the durable intent journal (docs/journal.md).

The SDK (``agentrt`` runtime) runs every tool call and every LLM call of a program through a
:class:`StepJournal`; the journal package implements it on SQLAlchemy (SQLite / PostgreSQL).

Step identity must be stable across re-runs of the same program: it is the program id plus the
step's *position* — its thread id and its sequence number within that thread (both assigned
deterministically by the SDK in creation order) — plus the step's kind and name, and a canonical
hash of its arguments. A re-run that asks for a different name or arguments at a recorded
position raises :class:`agentrt.errors.NonDeterminismError`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from agentrt.journal.leases import ProgramLease
from agentrt.json_types import JSONValue

__all__ = ["LeasingJournal", "ReconcileResult", "StepJournal", "StepSpec"]


@dataclass(frozen=True, slots=True)
class StepSpec:
    """Identity and nature of one step (a tool call or an LLM call) of a program."""

    #: The program (stable across re-runs: the caller re-runs with the same id).
    program_id: str
    #: Deterministic thread id (``"main"``, then ids derived from the parent thread and fork
    #: order, e.g. ``"main.0"``).
    thread_id: str
    #: 0-based sequence number of the step within its thread.
    seq: int
    #: ``"tool"`` or ``"llm"``.
    kind: Literal["tool", "llm"]
    #: Tool name, or the model name for an LLM call.
    name: str
    #: JSON-able arguments (tool arguments, or the LLM request body without transport fields).
    arguments: Any
    #: True for a tool with side effects: intent is recorded durably *before* it runs.
    side_effect: bool = False
    #: True when running the step twice is harmless (a side effect the provider deduplicates,
    #: or a read); an unknown outcome of an idempotent step is simply run again.
    idempotent: bool = False
    #: The node id the SDK gave the step (informational; identity uses thread_id + seq).
    node_id: str = ""

    def __repr__(self) -> str:  # arguments may hold user data: never print them
        return (
            f"StepSpec(program_id={self.program_id!r}, thread_id={self.thread_id!r}, "
            f"seq={self.seq}, kind={self.kind!r}, name={self.name!r})"
        )


@dataclass(frozen=True, slots=True)
class ReconcileResult:
    """What a tool's ``reconcile(key)`` hook found out about an unknown outcome."""

    #: ``"done"``: the effect happened, ``result`` is its result (it is committed);
    #: ``"not_done"``: it never happened, the step may run now;
    #: ``"unknown"``: still unknown, :class:`agentrt.errors.UnknownOutcome` is raised.
    status: Literal["done", "not_done", "unknown"]
    #: JSON-able result when ``status == "done"``.
    result: JSONValue = None


#: Runs the step; receives the idempotency key (to pass on to a provider that deduplicates).
Execute = Callable[[str], Awaitable[JSONValue]]
#: Asks the outside world whether the step with this key already happened.
Reconcile = Callable[[str], Awaitable[ReconcileResult]]


class StepJournal(Protocol):
    """Durable record of a program's steps."""

    async def run_step(
        self, step: StepSpec, execute: Execute, *, reconcile: Reconcile | None = None
    ) -> JSONValue:
        """Run ``execute`` at most once per step identity (docs/journal.md, "The protocol").

        * a COMMITTED step returns its stored result without executing (replay);
        * a side-effect step writes its intent (STARTED) durably before ``execute`` runs;
        * a STARTED step with no result is an unknown outcome: ``reconcile`` if given, run again
          if ``step.idempotent``, else :class:`agentrt.errors.UnknownOutcome`;
        * a FAILED step is run again (the retry policy is the caller's);
        * a different name or arguments at a recorded position raise
          :class:`agentrt.errors.NonDeterminismError`.

        Results must be JSON-able (else :class:`agentrt.errors.ResultNotSerializable`, before
        the step completes). When the store cannot be reached, side-effect steps raise
        :class:`agentrt.errors.JournalUnavailable` (fail closed); other steps just run.
        """
        ...

    async def record_tool_duration(self, tool_name: str, duration_s: float) -> None:
        """Add one observed duration (seconds) to the tool's history."""
        ...

    async def predict_tool_duration(self, tool_name: str) -> float | None:
        """Predicted duration (seconds) of the tool's next run, ``None`` without history."""
        ...


@runtime_checkable
class LeasingJournal(Protocol):
    """A journal that leases program ids (``agentrt.journal.Journal`` does): the SDK's
    ``Program`` takes the lease when the program starts and releases it when it ends, so one
    program id runs in one place at a time (docs/journal.md, "Program leases")."""

    async def acquire_lease(
        self, program_id: str, *, wait_s: float | None = None, required: bool = True
    ) -> ProgramLease | None:
        """Take the program's lease; raises :class:`agentrt.errors.ProgramLeaseHeld` while
        another runner holds it live. ``required=False``: an unreachable store defers the
        lease to the program's first side effect instead of failing (``None`` is returned)."""
        ...

    async def release_lease(self, program_id: str) -> None:
        """Release it (never raises for an unreachable store: it then expires)."""
        ...
