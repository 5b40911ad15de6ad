"""Backend faults under load, seen from the client (docs/backends.md, "When backends fail").

Complements ``tests/backends/test_failover.py`` (a backend SIGKILLed: calls not yet
streaming move, streams in flight end with an error event) and
``tests/ops/test_lifecycle_stall.py`` (a backend SIGSTOPped):

* a backend that answers 5xx under load: no client sees the 5xx (the calls are retried on
  the other backend before anything reached the client), its circuit opens, and once it
  answers again a trial probe closes the circuit and it takes calls again;
* SDK programs (``agentrt.Runtime``, several calls each: whole answers through
  ``agentrt.chat``, streams through the runtime's tagged ``openai`` client) running while one
  of two emulator processes is SIGKILLed: every program ends within bounded time, none hangs;
  whole calls are retried on the survivor and all finish; only streams already flowing from
  the dead backend fail, with an error naming it.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import openai
import pytest

import agentrt
from agentrt import Runtime, RuntimeConfig
from agentrt.errors import AgentrtError
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.server import DEFAULT_MODEL_NAME
from tests.backends.fake_vllm import FakeVllm, build_app
from tests.backends.servers import serve_app, spawn_emulator

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

CHAT = "/v1/chat/completions"


class Failing:
    """An ASGI wrapper that answers every generation request with ``status`` while
    ``failing`` is set (probes and metrics still pass: a server that is up but erring, as a
    vLLM whose engine died behind its API server answers 500)."""

    def __init__(self, app: Any, status: int) -> None:
        self.app = app
        self.status = status
        self.failing = True
        #: Generation requests answered with the error.
        self.refused = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and self.failing:
            self.refused += 1
            body = json.dumps({"error": {"message": "engine error", "type": "InternalError",
                                         "code": self.status}}).encode()  # fmt: skip
            await send({"type": "http.response.start", "status": self.status,
                        "headers": [(b"content-type", b"application/json")]})  # fmt: skip
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


async def one_call(http: httpx.AsyncClient, url: str, stream: bool) -> str:
    """A chat call; the answering server's name (from the answer id)."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    if not stream:
        answer = await http.post(url + CHAT, json=body)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["id"]).removeprefix("chatcmpl-")
    async with http.stream("POST", url + CHAT, json=body) as answer:
        assert answer.status_code == 200, await answer.aread()
        lines = [line async for line in answer.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]", lines[-3:]
    return str(json.loads(lines[0][6:])["id"]).removeprefix("chatcmpl-")


@pytest.mark.parametrize("status", [500, 503])
async def test_a_backend_answering_5xx_under_load_is_retried_elsewhere_and_comes_back(
    status: int,
) -> None:
    flaky = Failing(build_app(FakeVllm(name="flaky", chunk_delay_s=0.005)), status)
    apps: list[ControllerApp] = []
    async with (
        serve_app(flaky) as flaky_url,
        serve_app(build_app(FakeVllm(name="good", chunk_delay_s=0.005))) as good_url,
    ):
        config = ControllerConfig(
            port=0,
            backends=(BackendSpec(flaky_url, kind="vllm", backend_id="flaky"),
                      BackendSpec(good_url, kind="vllm", backend_id="good")),
            router="round_robin",
            admission_window=None,
            scrape_interval_s=0.2,
            breaker={"cooldown_s": 0.5, "failure_threshold": 3},
        )  # fmt: skip
        async with (
            serve_controller(config, on_app=apps.append) as url,
            httpx.AsyncClient(timeout=30) as http,
        ):
            pool = apps[0].core.pool
            answered_by: list[str] = []

            async def call(stream: bool) -> None:
                answered_by.append(await one_call(http, url, stream))

            async with anyio.create_task_group() as group:
                for i in range(40):
                    group.start_soon(call, i % 2 == 0)
            assert answered_by == ["good"] * 40  # every call: retried, never a 5xx seen
            assert flaky.refused >= 3
            assert pool.states["flaky"].breaker.opened_total >= 1
            # It recovers: a trial probe after the cool-down closes its circuit.
            flaky.failing = False
            with anyio.fail_after(10):
                while pool.states["flaky"].status() != "up":  # noqa: ASYNC110 - probes over HTTP
                    await anyio.sleep(0.05)
            answered_by.clear()
            async with anyio.create_task_group() as group:
                for i in range(10):
                    group.start_soon(call, i % 2 == 0)
    assert "flaky" in answered_by


async def test_no_sdk_program_is_lost_when_a_backend_dies_mid_run() -> None:
    programs, calls_each = 12, 4
    ended: dict[str, str] = {}  # program -> "done" or the error it failed with
    async with spawn_emulator() as doomed, spawn_emulator() as survivor:
        config = ControllerConfig(
            port=0,
            backends=(BackendSpec(doomed.url, kind="emulator", backend_id="doomed"),
                      BackendSpec(survivor.url, kind="emulator", backend_id="survivor")),
            router="round_robin",
            scrape_interval_s=0.2,
        )  # fmt: skip
        async with serve_controller(config) as url:
            runtime_config = RuntimeConfig(base_url=url + "/v1", model=DEFAULT_MODEL_NAME)
            async with Runtime(runtime_config) as rt:
                flowing = 0  # streams that received their first chunk
                enough_flowing = anyio.Event()
                messages = [{"role": "user", "content": "hi"}]

                async def streamed_call() -> None:
                    nonlocal flowing
                    stream = await rt.client.chat.completions.create(
                        model=DEFAULT_MODEL_NAME, messages=messages, max_tokens=200,
                        stream=True, extra_body={"ignore_eos": True},
                    )  # fmt: skip
                    first = True
                    async for _ in stream:
                        if first:
                            first, flowing = False, flowing + 1
                            if flowing >= 4:
                                enough_flowing.set()

                async def program(index: int) -> None:
                    # Even programs make whole calls (agentrt.chat), odd ones stream.
                    name = f"p{index}"
                    try:
                        async with rt.program("fault-run"):
                            for _ in range(calls_each):
                                if index % 2:
                                    await streamed_call()
                                else:
                                    await agentrt.chat(
                                        messages, max_tokens=60, extra_body={"ignore_eos": True}
                                    )
                        ended[name] = "done"
                    except (AgentrtError, openai.APIError) as exc:
                        ended[name] = f"{type(exc).__name__}: {exc}"

                with anyio.fail_after(45):  # none hangs
                    async with anyio.create_task_group() as group:
                        for index in range(programs):
                            group.start_soon(program, index)
                        await enough_flowing.wait()
                        doomed.kill()
    assert len(ended) == programs  # every program ended, one way or the other
    failed = {name: why for name, why in ended.items() if why != "done"}
    for name, why in failed.items():
        assert int(name[1:]) % 2 == 1, why  # only a stream already flowing can fail ...
        assert "doomed" in why, why  # ... with a clear error naming the backend that died
    # Whole calls had not reached their client when the backend died: retried, all done.
    assert all(ended[f"p{i}"] == "done" for i in range(0, programs, 2))
