"""Routing and retention wired into the controller service, over real HTTP on loopback.

* ``--router prefix``: calls that extend one conversation stay on the backend that has it;
  names and parameters are validated when the app is built;
* ``--retention on`` in front of a real emulator: a tool wait pins the thread's context on
  the emulator (``/agentrt/engine/v1/pins``), the returning call is tagged, goes through the
  retained lane and releases the pin; a program that ends while retained releases its pin.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from agentrt.errors import ConfigError
from agentrt.protocol import EVENTS_PREFIX, CallTags
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.server import (
    DEFAULT_MODEL_NAME,
    EmulatorConfig,
    RunningEmulator,
    serve_engine,
)
from tests.controller_service.conftest import chat_body, controller, fake_backends
from tests.controller_service.fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SESSION = "s1"


def _conversation(turns: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "You are a careful agent. " * 40}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn} " * 30})
        messages.append({"role": "assistant", "content": f"answer {turn} " * 30})
    return messages


async def test_prefix_router_keeps_a_conversation_on_its_backend() -> None:
    first, second = FakeState(), FakeState()
    async with (
        fake_backends(first, second) as urls,
        controller(urls, router="prefix") as (url, app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        for turns in range(1, 5):
            body = chat_body(messages=_conversation(turns))
            response = await http.post(url + "/v1/chat/completions", json=body)
            assert response.status_code == 200
        assert app.core.dispatcher.router.name == "prefix"
    assert sorted((len(first.requests), len(second.requests))) == [0, 4]


@pytest.mark.parametrize(
    "options",
    [
        {"router": "nearest"},
        {"router": "prefix", "routing": {"queued_tokens": 1}},
        {"router": "round_robin", "routing": {"x": 1}},
        {"retention": "on", "retention_options": {"ttl": 3}},
    ],
)
async def test_bad_router_and_retention_config(options: dict[str, Any]) -> None:
    base: dict[str, Any] = {"backends": (BackendSpec("http://a:1"),)}
    with pytest.raises(ConfigError):
        ControllerApp(ControllerConfig(**{**base, **options}))


async def test_retention_must_be_on_or_off() -> None:
    with pytest.raises(ConfigError, match="retention: must be 'on' or 'off', got 'maybe'"):
        ControllerConfig(retention="maybe")


def _tags(program: str, node: str) -> dict[str, str]:
    return CallTags(
        session_id=SESSION, program_id=program, thread_id="main", node_id=node
    ).to_headers()


async def _pins(engine: RunningEmulator, http: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await http.get(engine.base_url + "/agentrt/engine/v1/pins")
    pins: list[dict[str, Any]] = response.json()["pins"]
    return pins


async def _eventually(check: Any, timeout_s: float = 10.0) -> None:
    with anyio.fail_after(timeout_s):
        while not await check():  # noqa: ASYNC110 - polling another server's state
            await anyio.sleep(0.02)


async def test_retention_pins_on_the_emulator_and_releases_at_the_next_call_and_the_end() -> None:
    options = {
        # Make every wait worth a pin: R = (1 - u) * 100k / 1M = 0.1 s, holding costs nothing.
        "kv_capacity_tokens": 100_000,
        "churn_tokens_per_s": 1_000_000,
        "reuse_fraction": 0.0,
    }
    async with serve_engine(EmulatorConfig()) as engine:
        config = ControllerConfig(
            port=0,
            policy="plas",
            backends=(BackendSpec(engine.base_url, kind="emulator"),),
            retention="on",
            retention_options=options,
            scrape_interval_s=0.2,
        )
        apps: list[ControllerApp] = []
        async with (
            serve_controller(config, on_app=apps.append) as url,
            httpx.AsyncClient(timeout=20) as http,
        ):
            events = url + EVENTS_PREFIX + "/programs/agent-1"
            body = {
                "model": DEFAULT_MODEL_NAME,
                "messages": _conversation(3),
                "max_tokens": 8,
            }
            assert (
                await http.post(events + "/start", json={"session_id": SESSION, "name": "react"})
            ).status_code == 200
            answer = await http.post(
                url + "/v1/chat/completions", json=body, headers=_tags("agent-1", "c0")
            )
            assert answer.status_code == 200
            wait = {"session_id": SESSION, "thread_id": "main", "node_id": "t1",
                    "tool_name": "search", "predicted_duration_s": 5.0}  # fmt: skip
            assert (await http.post(events + "/tool-start", json=wait)).status_code == 200

            async def pinned() -> bool:
                pins = await _pins(engine, http)
                return len(pins) == 1 and pins[0]["blocks"] > 0

            await _eventually(pinned)
            (pin,) = await _pins(engine, http)

            async def counted() -> bool:
                queues = (await http.get(url + EVENTS_PREFIX + "/queues")).json()
                return bool(queues["retention"]["counts"].get("pins") == 1)

            await _eventually(counted)  # the executor counts once the engine has answered
            queues = (await http.get(url + EVENTS_PREFIX + "/queues")).json()
            assert queues["retention"]["retained"] == 1
            assert queues["retention"]["counts"]["pin"] == 1
            # the blocks the engine says it pinned, summed over the pins placed
            assert queues["retention"]["counts"]["pinned_blocks"] == pin["blocks"]
            programs = (await http.get(url + EVENTS_PREFIX + "/programs")).json()
            assert any(p.get("retained_until_at") for p in programs["entries"]), programs

            # The tool returns; the next call is tagged, takes the lane and releases the pin.
            done = {"session_id": SESSION, "thread_id": "main", "node_id": "t1",
                    "tool_name": "search", "duration_s": 0.4}  # fmt: skip
            assert (await http.post(events + "/tool-end", json=done)).status_code == 200
            body["messages"] = [*body["messages"], {"role": "user", "content": "observation"}]
            answer = await http.post(
                url + "/v1/chat/completions", json=body, headers=_tags("agent-1", "c1")
            )
            assert answer.status_code == 200

            async def released() -> bool:
                return await _pins(engine, http) == []

            await _eventually(released)
            app = apps[0]
            assert app.core.dispatcher.lane_total == 1
            assert app.core.retention is not None
            assert app.core.retention.counts.get("unpins") == 1

            # Waiting again, then the program ends: the pin is released at once.
            wait["node_id"] = "t2"
            assert (await http.post(events + "/tool-start", json=wait)).status_code == 200
            await _eventually(pinned)
            ended = await http.post(events + "/end", json={"session_id": SESSION})
            assert ended.status_code == 200
            await _eventually(released)
            assert len(app.core.retention.tracker) == 0
            # A late tool event for the ended program retains nothing.
            wait["node_id"] = "t3"
            await http.post(events + "/tool-start", json=wait)
            await anyio.sleep(0.2)
            assert await _pins(engine, http) == []


async def test_retention_rewarms_a_backend_without_pins_before_the_predicted_return() -> None:
    options = {"kv_capacity_tokens": 100_000, "churn_tokens_per_s": 1_000_000,
               "reuse_fraction": 0.0}  # fmt: skip
    backend = FakeState()
    async with (
        fake_backends(backend) as urls,
        controller(urls, retention="on", retention_options=options) as (url, app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        events = url + EVENTS_PREFIX + "/programs/agent-2"
        body = chat_body(messages=_conversation(2))
        answer = await http.post(
            url + "/v1/chat/completions", json=body, headers=_tags("agent-2", "c0")
        )
        assert answer.status_code == 200
        wait = {"session_id": SESSION, "thread_id": "main", "node_id": "t1",
                "tool_name": "browse", "predicted_duration_s": 0.6}  # fmt: skip
        assert (await http.post(events + "/tool-start", json=wait)).status_code == 200

        assert app.core.retention is not None
        retention = app.core.retention

        async def rewarmed() -> bool:
            # The driver counts the re-warm once the backend has answered it: wait for both.
            return len(backend.requests) == 2 and "rewarms" in retention.counts

        await _eventually(rewarmed)
        warm = backend.requests[1]
        assert warm["max_tokens"] == 1 and warm["messages"] == body["messages"]
        assert app.core.retention.counts.get("rewarms") == 1
        assert app.core.retention.counts.get("pins") is None  # a vLLM-like server cannot pin
