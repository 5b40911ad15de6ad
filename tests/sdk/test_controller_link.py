"""Session and program events, controller modes, fallback routing — never hanging."""

from __future__ import annotations

import socket

import anyio
import pytest

import agentrt
from agentrt import EndpointUnavailable, Runtime, RuntimeConfig, tool
from agentrt.protocol import CallTags, ProgramStart
from agentrt.runtime.controller import ControllerLink, LinkStats

from .fakeserver import FakeServer, FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]
USER = [{"role": "user", "content": "hi"}]


def closed_port_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


@tool
async def fetch(url: str) -> str:
    """Fetch a page."""
    await anyio.sleep(0.01)
    return "page"


async def test_events_with_a_controller(server: FakeServer, state: FakeState) -> None:
    state.controller = True
    config = RuntimeConfig(base_url=server.base_url, model="m1", session_id="sess-1")
    async with Runtime(config) as rt:
        assert rt.controller_state == "connected"
        async with rt.program("agent", program_id="prog-1", timeout_s=60):
            await agentrt.chat(USER)
            await fetch("a")
            await fetch("b")
            async with agentrt.wait("approval", predicted_s=30):
                pass
    paths = [(m, p) for m, p, _ in state.events]
    assert paths == [
        ("POST", "/agentrt/v1/sessions"),
        ("POST", "/agentrt/v1/programs/prog-1/start"),
        ("POST", "/agentrt/v1/programs/prog-1/tool-start"),
        ("POST", "/agentrt/v1/programs/prog-1/tool-end"),
        ("POST", "/agentrt/v1/programs/prog-1/tool-start"),
        ("POST", "/agentrt/v1/programs/prog-1/tool-end"),
        ("POST", "/agentrt/v1/programs/prog-1/tool-start"),
        ("POST", "/agentrt/v1/programs/prog-1/tool-end"),
        ("POST", "/agentrt/v1/programs/prog-1/end"),
        ("DELETE", "/agentrt/v1/sessions/sess-1"),
    ]
    bodies = [b for _, _, b in state.events]
    assert bodies[0]["session_id"] == "sess-1"
    assert bodies[1]["name"] == "agent" and 0 < bodies[1]["timeout_ms"] <= 60_000
    first_start, first_end, second_start = bodies[2], bodies[3], bodies[4]
    assert first_start["tool_name"] == "fetch" and first_start["node_id"] == "main:1"
    assert "predicted_duration_s" not in first_start  # no history yet
    assert first_end["duration_s"] >= 0.01 and first_end["ok"] is True
    assert second_start["predicted_duration_s"] == pytest.approx(first_end["duration_s"], rel=0.5)
    assert bodies[6]["kind"] == "human" and bodies[6]["predicted_duration_s"] == 30
    assert bodies[8] == {"session_id": "sess-1", "status": "ok"}
    tags = CallTags.from_headers(state.requests[0].headers)
    assert tags is not None and tags.session_id == "sess-1"


async def test_plain_server_means_no_events(server: FakeServer, state: FakeState) -> None:
    async with Runtime(RuntimeConfig(base_url=server.base_url, model="m1")) as rt:
        assert rt.controller_state == "absent"
        async with rt.program("agent"):
            await agentrt.chat(USER)
            await fetch("a")
    assert [p for _, p, _ in state.events] == ["/agentrt/v1/sessions"]  # the probe only
    assert len(state.requests) == 1


async def test_off_mode_never_probes(server: FakeServer, state: FakeState) -> None:
    state.controller = True
    config = RuntimeConfig(base_url=server.base_url, model="m1", controller="off")
    async with Runtime(config) as rt:
        await agentrt.chat(USER)
        assert rt.controller_state == "off"
    assert state.events == []


async def test_an_off_link_builds_nothing_from_the_key() -> None:
    """Off, the link neither opens connections nor encodes the key into its event headers (a
    key HTTP headers cannot carry fails where a request would carry it, not at start)."""
    link = ControllerLink(RuntimeConfig(base_url="http://127.0.0.1:9/v1", api_key="ключ",
                                        controller="off"))  # fmt: skip
    assert await link.open() == "off"
    await link.program_start("p", ProgramStart(session_id=link.session_id))
    assert link.stats == LinkStats()
    await link.close()


async def test_unreachable_controller_goes_to_the_fallback(
    server: FakeServer, state: FakeState
) -> None:
    config = RuntimeConfig(
        base_url=closed_port_url(), model="m1", fallback_base_url=server.base_url
    )
    with anyio.fail_after(5):
        async with Runtime(config) as rt:
            assert rt.controller_state == "unreachable"
            reply = await agentrt.chat(USER)
            fallback = rt._fallback  # the fallback layer of the runtime's transport stack
            assert fallback is not None
            fallback.primary_down_until_s = 0.0  # as if the hold expired: retry primary
            await rt.openai_client().chat.completions.create(model="m1", messages=USER)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "ok"
    assert len(state.requests) == 2  # both reached the fallback
    assert state.requests[0].headers["authorization"] == "Bearer EMPTY"


async def test_required_controller_unreachable_fails_fast() -> None:
    config = RuntimeConfig(base_url=closed_port_url(), model="m1", controller="required")
    with anyio.fail_after(5), pytest.raises(EndpointUnavailable, match="controller required"):
        async with Runtime(config):
            pass


async def test_required_controller_absent_fails(server: FakeServer) -> None:
    config = RuntimeConfig(base_url=server.base_url, model="m1", controller="required")
    with pytest.raises(EndpointUnavailable, match="no agentrt program endpoints"):
        async with Runtime(config):
            pass


async def test_no_fallback_and_no_server_is_a_clear_error() -> None:
    # A short retry budget: the call is resent for 1 s (a restart would be back), then fails.
    config = RuntimeConfig(base_url=closed_port_url(), model="m1", max_retries=0, retry_budget_s=1)
    with anyio.fail_after(5):
        async with Runtime(config) as rt:
            with pytest.raises(EndpointUnavailable):
                await agentrt.chat(USER)
            assert rt.controller_state == "unreachable"


async def test_controller_dying_mid_run_does_not_break_programs(
    server: FakeServer, state: FakeState
) -> None:
    state.controller = True
    async with Runtime(RuntimeConfig(base_url=server.base_url, model="m1")) as rt:
        rt.link._base = closed_port_url()  # the controller goes away after the session opened
        async with rt.program("agent"):
            await fetch("a")
            await fetch("b")
            await agentrt.chat(USER)
    assert rt.link.stats.events_failed == 1  # then the link stays quiet for a while
    assert rt.link.stats.events_skipped >= 3
    assert len(state.requests) == 1
