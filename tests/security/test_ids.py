"""Every id the protocol allows works in every event route (``/`` and dot-only ids
included), and a refused event holds back only its own program's events."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import httpx
import pytest

from agentrt.errors import EndpointUnavailable
from agentrt.protocol import EVENTS_PREFIX, ProgramEnd, ProgramStart, ToolWaitEnd, ToolWaitStart
from agentrt.runtime.config import RuntimeConfig
from agentrt.runtime.controller import ControllerLink

from .stack import Stack, threaded_stack

pytestmark = pytest.mark.anyio

# Valid on the wire (agentrt.protocol: 1-128 of [A-Za-z0-9._:@/+=-]).
WIRE_IDS = ["team/a/run-1", "..", ".", "a/../b", "x:y@z+w=v", "/leading", "trailing/", "a//b"]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with threaded_stack() as running:
        yield running


def _programs(stack: Stack) -> dict[str, dict[str, object]]:
    answer = httpx.get(stack.controller_url + EVENTS_PREFIX + "/programs", timeout=10).json()
    return {entry["program_id"]: entry for entry in answer["entries"]}


def _link(stack: Stack, hold_s: float = 30.0) -> ControllerLink:
    config = RuntimeConfig(base_url=stack.controller_url + "/v1", model="m", fallback_hold_s=hold_s)
    return ControllerLink(config)


@pytest.mark.parametrize("program_id", WIRE_IDS)
async def test_the_sdk_reports_every_event_of_a_program_whose_id_has_slashes_or_dots(
    stack: Stack, program_id: str
) -> None:
    link = _link(stack)
    assert await link.open() == "connected"
    session = link.session_id
    try:
        await link.program_start(program_id, ProgramStart(session_id=session, name="t"))
        entry = _programs(stack)[program_id]
        assert entry["name"] == "t"
        ids = {"session_id": session, "thread_id": "main", "node_id": "n1", "tool_name": "search"}
        await link.tool_start(program_id, ToolWaitStart.model_validate(ids))
        assert _programs(stack)[program_id]["tool_waits"]
        await link.tool_end(program_id, ToolWaitEnd.model_validate({**ids, "duration_s": 0.1}))
        await link.program_end(program_id, ProgramEnd(session_id=session))
        assert program_id not in _programs(stack)
        assert link.stats.events_failed == 0
        assert link.stats.events_sent == 4
    finally:
        await link.close()


def test_unencoded_slashes_reach_the_route_too(stack: Stack) -> None:
    url = stack.controller_url + EVENTS_PREFIX + "/programs/raw/with/slashes/start"
    response = httpx.post(url, json={"session_id": "s-raw"}, timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["program_id"] == "raw/with/slashes"
    ended = httpx.request(
        "DELETE", stack.controller_url + EVENTS_PREFIX + "/sessions/s%2Fraw", timeout=10
    )
    assert ended.status_code == 200 and ended.json()["session_id"] == "s/raw"


def test_an_id_the_protocol_forbids_is_a_clear_400(stack: Stack) -> None:
    url = stack.controller_url + EVENTS_PREFIX + "/programs/has%20space/start"
    response = httpx.post(url, json={"session_id": "s-1"}, timeout=10)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "program_id must be 1-128 characters" in error["message"]


async def test_a_refused_event_holds_back_only_its_own_programs_events(stack: Stack) -> None:
    link = _link(stack, hold_s=30.0)
    assert await link.open() == "connected"
    session = link.session_id
    try:
        start = ProgramStart(session_id=session)
        await link.program_start("bad id", start)  # the controller answers 400
        assert (link.stats.events_failed, link.stats.events_sent) == (1, 0)
        await link.program_start("good/one", start)  # another program: still reported
        await link.program_start("good/two", start)
        assert link.stats.events_sent == 2
        assert {"good/one", "good/two"} <= set(_programs(stack))
        await link.program_end("bad id", ProgramEnd(session_id=session))  # held back
        assert link.stats.events_skipped == 1
        await link.program_end("good/one", ProgramEnd(session_id=session))
        assert link.stats.events_sent == 3
        assert "good/one" not in _programs(stack)
    finally:
        await link.close()


async def test_a_required_link_raises_the_controllers_refusal(stack: Stack) -> None:
    config = RuntimeConfig(base_url=stack.controller_url + "/v1", model="m", controller="required")
    link = ControllerLink(config)
    assert await link.open() == "connected"
    try:
        start = ProgramStart(session_id=link.session_id)
        with pytest.raises(EndpointUnavailable, match=r"controller answered 400: .*program_id"):
            await link.program_start("bad id", start)
        assert link.stats.events_failed == 1
    finally:
        await link.close()


async def test_after_the_hold_a_refused_programs_events_are_tried_again(stack: Stack) -> None:
    link = _link(stack, hold_s=0.2)
    assert await link.open() == "connected"
    try:
        start = ProgramStart(session_id=link.session_id)
        await link.program_start("bad id", start)
        await link.program_start("bad id", start)
        assert (link.stats.events_failed, link.stats.events_skipped) == (1, 1)
        await anyio.sleep(0.3)
        await link.program_start("bad id", start)
        assert link.stats.events_failed == 2  # tried (and refused) again
    finally:
        await link.close()
