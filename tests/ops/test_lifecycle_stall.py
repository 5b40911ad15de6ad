"""A backend that stops answering (SIGSTOP) does not hold its calls (docs/controller.md,
"Lifecycle").

Two emulator subprocesses behind a controller; one is stopped with calls in flight. Its
non-streamed calls (nothing reached the client yet) are aborted when its health probe fails and
finish on the other; its streams already under way end with an OpenAI-shaped error event
within ``backend_stall_s`` plus slack; the other backend's calls are untouched.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import Process

from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from tests.backends.servers import serve_app
from tests.ops.processes import AGENTRT, free_port, reap

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

STALL_S = 1.5
#: Generous: the client sees the error at most one stall limit after the last byte.
SLACK_S = 5.0


@contextlib.asynccontextmanager
async def emulator_process() -> AsyncIterator[tuple[Process, str]]:
    """``agentrt engine serve`` on a free port; yields it and its base URL once healthy.
    Continued (if stopped) and killed on exit."""
    port = free_port()
    command = [*AGENTRT, "engine", "serve", "--port", str(port)]
    process = await anyio.open_process(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            with anyio.fail_after(20):
                while True:
                    with contextlib.suppress(httpx.TransportError):
                        if (await http.get(url + "/health")).status_code == 200:
                            break
                    await anyio.sleep(0.05)
        yield process, url
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGCONT)  # a stopped process must not outlive the test
        await reap(process)


def body(tokens: int, stream: bool) -> dict[str, object]:
    return {"model": DEFAULT_MODEL_NAME, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": tokens, "ignore_eos": True, "stream": stream}  # fmt: skip


async def test_a_stopped_backend_s_calls_are_retried_or_failed_in_time() -> None:
    apps: list[ControllerApp] = []
    async with emulator_process() as (first, first_url), emulator_process() as (_, second_url):
        config = ControllerConfig(
            port=0,
            backends=(BackendSpec(first_url, kind="emulator", backend_id="first"),
                      BackendSpec(second_url, kind="emulator", backend_id="second")),
            router="round_robin",
            admission_window=None,
            scrape_interval_s=0.2,
            backend_stall_s=STALL_S,
        )  # fmt: skip
        async with (
            serve_controller(config, on_app=apps.append) as url,
            httpx.AsyncClient(timeout=30) as http,
        ):
            pool = apps[0].core.pool
            with anyio.fail_after(10):
                while not all(s.healthy for s in pool.states.values()):  # noqa: ASYNC110 - probes over HTTP
                    await anyio.sleep(0.05)
            stream_ends: list[tuple[str, float]] = []  # ("done" | error message, when)
            answers: list[int] = []
            starts = [anyio.Event() for _ in range(4)]

            async def streamed(started: anyio.Event) -> None:
                request = body(600, stream=True)
                async with http.stream("POST", url + "/v1/chat/completions", json=request) as r:
                    async for line in r.aiter_lines():
                        if not line.startswith("data: "):
                            continue
                        started.set()
                        if line == "data: [DONE]":
                            stream_ends.append(("done", anyio.current_time()))
                            return
                        event = json.loads(line[6:])
                        if "error" in event:
                            stream_ends.append((event["error"]["message"], anyio.current_time()))
                            return
                raise AssertionError("the stream ended with neither [DONE] nor an error event")

            async def whole() -> None:
                answer = await http.post(url + "/v1/chat/completions", json=body(300, False))
                answers.append(answer.status_code)
                assert answer.json()["usage"]["completion_tokens"] == 300

            async with anyio.create_task_group() as group:
                for started in starts:
                    group.start_soon(streamed, started)
                    await started.wait()  # in turn: round robin puts two streams on each
                for _ in range(4):
                    group.start_soon(whole)
                with anyio.fail_after(10):
                    while pool.states["first"].in_flight < 4:  # noqa: ASYNC110 - admitted calls
                        await anyio.sleep(0.01)
                first.send_signal(signal.SIGSTOP)
                stopped_at = anyio.current_time()
    # Two of them were on the stopped backend when it stopped: they finished on the other.
    assert answers == [200] * 4
    failed = [(message, at) for message, at in stream_ends if message != "done"]
    assert len(failed) == 2, stream_ends
    for message, at in failed:
        assert "backend first" in message
        assert at - stopped_at < STALL_S + SLACK_S
    assert sum(1 for message, _ in stream_ends if message == "done") == 2


async def silent_backend(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers its probes, never a generation request: a stalled server behind a live port."""
    if scope["type"] != "http":
        return
    if scope["method"] == "POST":
        await anyio.sleep_forever()
    body = b'{"object": "list", "data": [{"id": "%s", "object": "model"}]}' % (
        DEFAULT_MODEL_NAME.encode()
    )
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


async def test_a_stream_whose_backend_never_answers_is_retried_after_the_stall_limit() -> None:
    async with (
        serve_app(silent_backend) as silent_url,
        serve_engine(EmulatorConfig()) as engine,
    ):
        config = ControllerConfig(
            port=0,
            backends=(BackendSpec(silent_url, kind="openai", backend_id="silent"),
                      BackendSpec(engine.base_url, kind="emulator", backend_id="live")),
            router="round_robin",
            admission_window=None,
            scrape_interval_s=0.2,
            backend_stall_s=0.5,
        )  # fmt: skip
        async with serve_controller(config) as url, httpx.AsyncClient(timeout=30) as http:
            ends: list[str] = []

            async def streamed() -> None:
                request = body(20, stream=True)
                async with http.stream("POST", url + "/v1/chat/completions", json=request) as r:
                    assert r.status_code == 200
                    ends.extend([line async for line in r.aiter_lines() if line][-1:])

            with anyio.fail_after(20):
                async with anyio.create_task_group() as group:
                    for _ in range(4):
                        group.start_soon(streamed)
    assert ends == ["data: [DONE]"] * 4
