"""Small builders shared by the policy tests."""

from __future__ import annotations

import itertools
from typing import Any

from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_controller.scheduling.srpt import OracleBook, OracleFigures

_ids = itertools.count()

#: Fields of :class:`CallEntry` (the rest of ``fields`` are facts).
_ENTRY_FIELDS = frozenset(CallEntry.__slots__) - {"facts"}


def make_facts(
    program_id: str,
    now_s: float = 0.0,
    *,
    session_id: str | None = None,
    tenant: str | None = None,
    **fields: Any,
) -> CallFacts:
    """The facts of a call of ``program_id`` arriving at ``now_s`` with a fresh id (``fields``
    override; ``session_id`` / ``tenant`` go into its program key)."""
    number = next(_ids)
    values: dict[str, Any] = {"call_id": f"c{number}", "node_id": f"n{number}"}
    values.update(fields)
    program = ProgramKey.untagged(program_id, tenant)
    if session_id is not None:
        program = ProgramKey(session_id=session_id, program_id=program_id, tenant=tenant)
    return CallFacts(program=program, arrival_s=now_s, **values)


def make_call(program_id: str, now_s: float = 0.0, **fields: Any) -> CallEntry:
    """A scheduler's entry for a new call (:func:`make_facts`; entry fields such as
    ``retained_backend`` set on the entry), for tests that drive a scheduler directly."""
    entry_values = {k: fields.pop(k) for k in list(fields) if k in _ENTRY_FIELDS}
    return CallEntry(make_facts(program_id, now_s, **fields), **entry_values)


def oracle_call(
    book: OracleBook,
    program_id: str,
    now_s: float = 0.0,
    *,
    remaining_s: float | None,
    service_s: float | None = None,
    **fields: Any,
) -> CallEntry:
    """:func:`make_call`, with its true figures written in ``book`` (the SRPT tests'
    simulator)."""
    call = make_call(program_id, now_s, **fields)
    book.figures[call.facts.call_id] = OracleFigures(service_s, remaining_s)
    return call
