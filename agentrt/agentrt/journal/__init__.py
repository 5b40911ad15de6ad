"""Durable intent journal for side-effecting tools (docs/journal.md). See ``api`` for the seam.

Use::

    async with Journal() as journal:                 # ./.agentrt/journal.sqlite
        result = await journal.run_step(StepSpec(...), execute, reconcile=reconcile)

``Journal("postgresql://user@host/db")`` puts it in PostgreSQL. ``acquire_lease`` /
``release_lease`` make a program id run in one place at a time (the SDK's ``Program`` does it).
docs/journal.md has the protocol, the durability guarantee, program leases and the
``agentrt journal`` commands.

Names are imported on first use (PEP 562), so that registering the ``agentrt journal`` command
group does not load SQLAlchemy (``agentrt --help`` stays fast); type checkers see the imports.
"""

from __future__ import annotations

import typing as _typing

from agentrt import _lazy

if _typing.TYPE_CHECKING:
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

#: Public name -> module defining it, imported on first access.
_LAZY: dict[str, str] = {
    "LeasingJournal": "agentrt.journal.api",
    "ReconcileResult": "agentrt.journal.api",
    "StepJournal": "agentrt.journal.api",
    "StepSpec": "agentrt.journal.api",
    "Journal": "agentrt.journal.journal",
    "ArgumentsNotSerializable": "agentrt.journal.keys",
    "DEFAULT_LEASE_TTL_S": "agentrt.journal.leases",
    "LeaseRecord": "agentrt.journal.leases",
    "ProgramLease": "agentrt.journal.leases",
    "ProgramSummary": "agentrt.journal.records",
    "PurgePolicy": "agentrt.journal.records",
    "PurgeResult": "agentrt.journal.records",
    "StepPosition": "agentrt.journal.records",
    "StepRecord": "agentrt.journal.records",
    "StepStatus": "agentrt.journal.records",
    "DEFAULT_JOURNAL_PATH": "agentrt.journal.urls",
    "default_journal_path": "agentrt.journal.urls",
}

if not _typing.TYPE_CHECKING:  # hidden from type checkers, which see the real imports above
    __getattr__, __dir__ = _lazy.exports(__name__, _LAZY)


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
