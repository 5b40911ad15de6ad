"""The call in two parts: immutable facts carrying one program key, the scheduler's entry made
by ``Dispatcher.submit``, and the program key built once at parse time."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agentrt.protocol import DEFAULT_SESSION_ID, CallTags
from agentrt_controller.keys import DEFAULT_SESSION, ProgramKey
from agentrt_controller.routing.hashing import DEFAULT_BLOCK_TOKENS
from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.service.http.incoming import parse_call

pytestmark = pytest.mark.timeout(30)


def test_facts_are_frozen_and_a_later_fact_makes_a_new_value() -> None:
    facts = CallFacts(call_id="c1", program=ProgramKey.untagged("p"), prompt_tokens=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.prompt_tokens = 20  # type: ignore[misc]
    later = dataclasses.replace(facts, token_block_hashes=(1, 2), token_block_size=16)
    assert facts.token_block_hashes == () and later.token_block_hashes == (1, 2)
    assert later.program is facts.program  # the key is carried, not rebuilt


def test_a_chain_element_is_the_routers_block_unless_the_driver_says() -> None:
    facts = CallFacts(call_id="c1", program=ProgramKey.untagged("p"))
    assert facts.block_tokens == DEFAULT_BLOCK_TOKENS  # written out in call.py (import order)


def test_submit_makes_the_entry_the_driver_holds() -> None:
    dispatcher = Dispatcher(build_scheduler("plas"), RoundRobinRouter(), FixedWindowAdmission(4))
    facts = CallFacts(call_id="c1", program=ProgramKey.untagged("p", "acme"), arrival_s=1.0)
    entry = dispatcher.submit(facts, 1.0, retained_backend="b1")
    assert isinstance(entry, CallEntry) and entry.facts is facts
    assert entry.retained_backend == "b1" and entry.enqueued_s == 1.0
    (admission,) = dispatcher.admit(1.0, [BackendView("b0", 0), BackendView("b1", 0)])
    assert admission.call is entry and admission.backend_id == "b1"
    dispatcher.on_tokens(entry, 5, 2.0)
    dispatcher.on_finish(entry, "b1", 0.5, 2.0)
    program = dispatcher.table.get(facts.program)
    assert program is not None and program.attained_service_s == 0.5
    assert entry.facts is facts  # no chain given: the facts stay
    json.dumps(dispatcher.snapshot(2.0))


def test_the_default_session_is_the_wire_protocols() -> None:
    assert DEFAULT_SESSION == DEFAULT_SESSION_ID
    tags = CallTags.from_headers({"X-Agentrt-Program-Id": "p"})
    assert tags is not None and tags.session_id == DEFAULT_SESSION
    assert ProgramKey.one_call("r1", "acme") == ProgramKey(
        session_id=DEFAULT_SESSION, program_id="call-r1", tenant="acme"
    )


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (
            {"x-agentrt-session-id": "s", "x-agentrt-program-id": "p", "x-agentrt-node-id": "n"},
            ProgramKey(session_id="s", program_id="p", tenant="acme"),
        ),
        ({}, ProgramKey.one_call("r1", "acme")),
    ],
)
def test_parsing_builds_the_program_key_once(headers: dict[str, str], expected: ProgramKey) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    parsed = parse_call(json.dumps(body).encode(), headers, "r1", 5.0, None, tenant="acme")
    assert parsed.call.program == expected
    assert parsed.call.call_id == "r1" and parsed.call.arrival_s == 5.0
