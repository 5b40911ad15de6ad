"""The spelt-out copies of the per-call dataclasses equal ``dataclasses.replace``, field for
field, and :func:`new_call_facts` equals the ``__init__``: a field added to :class:`CallFacts`
or :class:`BackendView` and forgotten in its copy fails here."""

from __future__ import annotations

import dataclasses

import pytest

from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallFacts, maker, new_call_facts

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


def test_new_call_facts_builds_what_the_init_builds() -> None:
    base = CallFacts(call_id="c", program=ProgramKey.untagged("p"))
    assert new_call_facts(call_id="c", program=ProgramKey.untagged("p")) == base
    values = _distinct(CallFacts, base)
    built = new_call_facts(**values)  # type: ignore[arg-type]
    assert type(built) is CallFacts and built == CallFacts(**values)  # type: ignore[arg-type]
    assert hash(built) == hash(CallFacts(**values))  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.call_id = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        new_call_facts(program=ProgramKey.untagged("p"))  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        new_call_facts("c", ProgramKey.untagged("p"))  # type: ignore[misc]


def test_maker_refuses_what_it_cannot_build() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Listed:
        items: list[int] = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError):
        maker(Listed)
