"""SIGTERM drains ``agentrt controller serve`` (docs/controller.md, "Lifecycle").

A controller subprocess in front of an in-process emulator: with 20 streams in flight, SIGTERM
closes the listening socket at once (a new connection is refused), every stream still ends
with ``[DONE]``, and the process exits 0. With a grace period shorter than the calls, they
are cut and the emulator sees its clients leave (it counts them as aborted). The probes and
the start-up line are checked here too.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess

import anyio
import httpx
import pytest

from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from tests.ops.processes import AGENTRT, controller_process, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: How long the streams may take to start: generous, for a machine busy with other work.
START_S = 30

STREAMS = 20
#: Tokens per streamed call: ~3 s at the emulator's default speed with 20 in its batch.
TOKENS = 300
#: Calls longer than any grace period: LONG_TOKENS tokens on an emulator running SLOW times
#: the modelled GPU's speed take minutes. Few tokens on a slow clock, not many on the default
#: one: the emulator plans every token of a call when it arrives, and four 20,000-token plans
#: (with the garbage collection they set off) held the test process' event loop, where the
#: emulator runs, long enough for the controller's 0.2 s probes to call it out (503).
LONG_TOKENS = 1000
SLOW = 0.05


def refused(port: int) -> bool:
    """Whether a TCP connection to ``127.0.0.1:port`` is refused."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


async def stream(http: httpx.AsyncClient, url: str, tokens: int, started: anyio.Event) -> int:
    """One streamed chat call; sets ``started`` at its first event; returns the content chunks
    it saw before ``[DONE]`` (raises when the stream ends without it)."""
    body = {"model": DEFAULT_MODEL_NAME, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": tokens, "ignore_eos": True, "stream": True}  # fmt: skip
    chunks = 0
    async with http.stream("POST", url + "/v1/chat/completions", json=body) as answer:
        assert answer.status_code == 200
        async for line in answer.aiter_lines():
            if not line.startswith("data: "):
                continue
            started.set()
            if line == "data: [DONE]":
                return chunks
            event = json.loads(line[6:])
            assert "error" not in event, event
            if event["choices"] and event["choices"][0]["delta"].get("content"):
                chunks += 1
    raise AssertionError("the stream ended without [DONE]")


async def test_sigterm_lets_twenty_streams_finish_and_refuses_new_connections() -> None:
    async with (
        serve_engine(EmulatorConfig()) as engine,
        controller_process([engine.base_url], "--shutdown-grace-s", "20") as (process, url),
        httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=50)) as http,
    ):
        results: list[int] = []
        starts = [anyio.Event() for _ in range(STREAMS)]

        async def one(started: anyio.Event) -> None:
            results.append(await stream(http, url, TOKENS, started))

        port = int(url.rsplit(":", 1)[1])
        async with anyio.create_task_group() as group:
            for started in starts:
                group.start_soon(one, started)
            with anyio.fail_after(START_S):
                for started in starts:
                    await started.wait()
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(5):
                while not refused(port):  # noqa: ASYNC110 - the socket has no event to await
                    await anyio.sleep(0.02)
            assert engine.state.driver.metrics.aborted == 0
        with anyio.fail_after(20):
            assert await process.wait() == 0
    assert len(results) == STREAMS
    assert all(chunks >= TOKENS - 1 for chunks in results), results


async def test_calls_longer_than_the_grace_period_are_aborted_upstream() -> None:
    async with (
        serve_engine(EmulatorConfig(time_scale=SLOW)) as engine,
        controller_process([engine.base_url], "--shutdown-grace-s", "0.5") as (process, url),
        httpx.AsyncClient(timeout=30) as http,
    ):
        failures: list[BaseException] = []
        starts = [anyio.Event() for _ in range(4)]

        async def one(started: anyio.Event) -> None:
            try:
                await stream(http, url, LONG_TOKENS, started)
            except (httpx.HTTPError, AssertionError) as exc:
                if not started.is_set():
                    raise  # failed before its first event: not the cut this test expects
                failures.append(exc)

        async with anyio.create_task_group() as group:
            for started in starts:
                group.start_soon(one, started)
            with anyio.fail_after(START_S):
                for started in starts:
                    await started.wait()
            process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            assert await process.wait() == 0
        assert len(failures) == len(starts)
        with anyio.fail_after(5):  # the emulator notices each client leaving
            while engine.state.driver.metrics.aborted < len(starts):  # noqa: ASYNC110 - a counter
                await anyio.sleep(0.02)


async def test_livez_and_readyz_and_readiness_while_draining() -> None:
    apps: list[ControllerApp] = []
    async with serve_engine(EmulatorConfig()) as engine:
        config = ControllerConfig(
            port=0, backends=(BackendSpec(engine.base_url, kind="emulator"),), scrape_interval_s=0.2
        )
        async with (
            serve_controller(config, on_app=apps.append) as url,
            httpx.AsyncClient() as http,
        ):
            with anyio.fail_after(10):
                while (await http.get(url + "/readyz")).status_code != 200:  # noqa: ASYNC110 - over HTTP, no event to await
                    await anyio.sleep(0.05)
            assert (await http.get(url + "/health")).status_code == 200
            apps[0].draining = True
            for path in ("/readyz", "/health"):
                answer = await http.get(url + path)
                assert answer.status_code == 503
                assert answer.json()["status"] == "draining"
            assert (await http.get(url + "/livez")).json()["status"] == "ok"


async def test_the_emulator_answers_the_probes_too() -> None:
    async with serve_engine(EmulatorConfig()) as engine, httpx.AsyncClient() as http:
        for path in ("/livez", "/readyz", "/health"):
            assert (await http.get(engine.base_url + path)).status_code == 200


async def test_livez_answers_without_a_healthy_backend() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    config = ControllerConfig(port=0, backends=(BackendSpec(dead),), scrape_interval_s=0.2)
    async with serve_controller(config) as url, httpx.AsyncClient() as http:
        with anyio.fail_after(10):
            while (await http.get(url + "/readyz")).status_code != 503:  # noqa: ASYNC110 - over HTTP, no event to await
                await anyio.sleep(0.05)
        assert (await http.get(url + "/livez")).status_code == 200


def test_a_port_in_use_is_an_error_before_any_listening_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [*AGENTRT, "controller", "serve",
                   "--port", str(port), "--backend", "http://127.0.0.1:9"]  # fmt: skip
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "agentrt controller on" not in done.stderr + done.stdout
