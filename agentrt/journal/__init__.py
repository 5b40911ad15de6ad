"""Durable intent journal for side-effecting tools (BRIEF.md §6). See ``api`` for the seam.

Use::

    async with Journal() as journal:                 # ./.agentrt/journal.sqlite
        result = await journal.run_step(StepSpec(...), execute, reconcile=reconcile)

``Journal("postgresql://user@host/db")`` puts it in PostgreSQL. ``acquire_lease`` /
``release_lease`` make a program id run in one place at a time (the SDK's ``Program`` does it).
docs/journal.md has the protocol, the durability guarantee, program leases and the
``agentrt journal`` commands.
"""

from agentrt.journal.api import LeasingJournal, ReconcileResult, StepJournal, StepSpec
from agentrt.journal.journal import Journal
from agentrt.journal.keys import ArgumentsNotSerializable
from agentrt.journal.leases import DEFAULT_LEASE_TTL_S, LeaseRecord, ProgramLease
from agentrt.journal.records import (
    ProgramSummary,
    PurgePolicy,
    PurgeResult,
    StepPosition,
    StepRecord,
    StepStatus,
)
from agentrt.journal.urls import DEFAULT_JOURNAL_PATH, default_journal_path

__all__ = [
    "DEFAULT_JOURNAL_PATH",
    "DEFAULT_LEASE_TTL_S",
    "ArgumentsNotSerializable",
    "Journal",
    "LeaseRecord",
    "LeasingJournal",
    "ProgramLease",
    "ProgramSummary",
    "PurgePolicy",
    "PurgeResult",
    "ReconcileResult",
    "StepJournal",
    "StepPosition",
    "StepRecord",
    "StepSpec",
    "StepStatus",
    "default_journal_path",
]
