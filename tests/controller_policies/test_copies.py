"""The spelt-out copies of the per-call dataclasses equal ``dataclasses.replace``, field for
field: a field added to :class:`CallFacts` or :class:`BackendView` and forgotten in its copy
fails here."""

from __future__ import annotations

import dataclasses

import pytest

from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallFacts

pytestmark = pytest.mark.timeout(30)


def _distinct(cls: type, base: object) -> dict[str, object]:
    """A value for every field of ``cls`` that differs from its default in ``base``."""
    values: dict[str, object] = {}
    for number, field in enumerate(dataclasses.fields(cls)):
        current = getattr(base, field.name)
        if isinstance(current, bool):
            values[field.name] = not current
        elif isinstance(current, int | float) or current is None:
            values[field.name] = number + 7
        elif isinstance(current, str):
            values[field.name] = f"{field.name}-{number}"
        elif isinstance(current, tuple):
            values[field.name] = (number, number + 1)
        elif isinstance(current, frozenset):
            values[field.name] = frozenset({f"m{number}"})
        elif isinstance(current, ProgramKey):
            values[field.name] = ProgramKey(session_id="s", program_id=f"p{number}", tenant="t")
        else:
            raise AssertionError(f"no test value for {cls.__name__}.{field.name}")
    return values


def test_facts_with_block_hashes_copies_every_field() -> None:
    base = CallFacts(call_id="c", program=ProgramKey.untagged("p"))
    facts = CallFacts(**_distinct(CallFacts, base))  # type: ignore[arg-type]
    copied = facts.with_block_hashes((9, 8, 7))
    assert copied == dataclasses.replace(facts, block_hashes=(9, 8, 7))
    assert copied.block_hashes == (9, 8, 7) and facts.block_hashes != (9, 8, 7)


def test_view_with_in_flight_copies_every_field() -> None:
    base = BackendView("b", 0)
    view = BackendView(**_distinct(BackendView, base))  # type: ignore[arg-type]
    copied = view.with_in_flight(41)
    assert copied == dataclasses.replace(view, in_flight=41)
    assert copied.in_flight == 41 and view.in_flight != 41
