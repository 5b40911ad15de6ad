"""Backends that die mid-run (real processes, SIGKILL) behind a running controller.

docs/backends.md, "When backends fail": routing stops sending to a dead backend within one
health interval; calls that had not started streaming are retried elsewhere; calls in flight
fail with a clear OpenAI-style error; garbage metrics mean unknown load, not a crash.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import openai
import pytest

from agentrt_controller.backends.breaker import BreakerConfig
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_controller.service.core.pool import BackendState

from .fake_vllm import FakeVllm, build_app
from .servers import serve_app, spawn_emulator, spawn_fake

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

CHAT = "/v1/chat/completions"
INTERVAL_S = 0.5


def _body(stream: bool = False, model: str = "tiny") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}


@asynccontextmanager
async def _controller(*urls: str, kind: str = "vllm", **options: Any) -> AsyncIterator[
    tuple[str, ControllerApp]
]:  # fmt: skip
    apps: list[ControllerApp] = []
    options.setdefault("scrape_interval_s", INTERVAL_S)
    # These tests count calls per backend: spread them (the default router is prefix-aware).
    options.setdefault("router", "round_robin")
    options.setdefault("breaker", {"cooldown_s": 30.0})
    config = ControllerConfig(
        port=0,
        backends=tuple(BackendSpec(u, kind=kind, backend_id=f"b{i}") for i, u in enumerate(urls)),
        **options,
    )
    async with serve_controller(config, on_app=apps.append) as url:
        yield url, apps[0]


@dataclass
class _Probe:
    started_s: float
    #: The backend was in routing when the probe started.
    in_routing: bool
    #: True / False: its verdict; None: cancelled (the pool's time limit ran out); not yet
    #: set while it runs.
    ok: bool | None = None
    ended_s: float | None = None


class _Probes:
    """Every health probe the pool sends ``state``'s backend, in order: the facts "within one
    health interval" rests on (which probe took the backend out, and whether a pause came
    between two), recorded as the pool's own loop makes them, so that a loaded host's late
    timers change how long a test takes, not what it finds."""

    def __init__(self, state: BackendState) -> None:
        self.list: list[_Probe] = []
        backend = state.backend
        health = backend.health

        async def recorded() -> bool:
            probe = _Probe(time.monotonic(), state.healthy)
            self.list.append(probe)
            try:
                probe.ok = await health()
            finally:
                probe.ended_s = time.monotonic()
            return probe.ok

        backend.health = recorded  # type: ignore[method-assign]

    def assert_the_first_probe_after_took_it_out(self, mark: int) -> None:
        """The backend left routing by the verdict of a probe (the last one sent while it was
        in routing failed), and at most one probe started after ``mark`` (its death) while it
        was in routing: one probe period, not a second probe nor a breaker's wait. (A probe
        already under way at the death may have found it: none after it then.)"""
        in_routing = [p for p in self.list if p.in_routing]
        assert in_routing and in_routing[-1].ok is False, self.list
        assert len([p for p in self.list[mark:] if p.in_routing]) <= 1, self.list


def _sse_events(text: str) -> list[Any]:
    events = []
    for block in text.split("\n\n"):
        if block.startswith("data: ") and block != "data: [DONE]":
            events.append(json.loads(block.removeprefix("data: ")))
    return events


async def test_a_dead_backend_leaves_routing_within_one_health_interval() -> None:
    async with (
        spawn_fake("--name", "a") as a,
        spawn_fake("--name", "b") as b,
        _controller(a.url, b.url) as (_, app),
    ):
        pool = app.core.pool
        assert pool.states["b0"].healthy and pool.states["b1"].healthy
        probes = _Probes(pool.states["b0"])
        a.kill()
        await a.process.wait()  # dead, not dying
        mark = len(probes.list)
        with anyio.fail_after(20):  # a hang guard, not a measurement
            while pool.states["b0"].healthy:  # noqa: ASYNC110 - watching the pool's own loop
                await anyio.sleep(0.01)
        assert pool.states["b0"].status() == "open"
        assert pool.states["b0"].last_error == "health probe failed"
        assert pool.states["b1"].healthy
    # No call was needed: the first probe after the death found it (one probe period, which
    # is the interval: a failed probe is not retried first, nor waits for the breaker).
    probes.assert_the_first_probe_after_took_it_out(mark)


async def test_a_hung_backend_leaves_routing_after_probe_timeouts_probes_ran_out_of_time() -> None:
    hung = FakeVllm(name="h")
    async with serve_app(build_app(hung)) as url, _controller(url) as (_, app):
        state = app.core.pool.states["b0"]
        assert state.healthy
        probes = _Probes(state)
        hung.health_delay_s = 3600.0
        mark = len(probes.list)
        with anyio.fail_after(30):  # a hang guard, not a measurement
            while state.healthy:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert state.last_error == "health probe timed out"
    # BreakerConfig.probe_timeouts probes in a row that each ran out of time (an interval,
    # the probe's limit) took it out; a single slow probe is not enough (a busy host), and no
    # further one was needed. (A probe that timed out on the loaded host before the hang
    # counts into the run, as it does in the breaker.)
    timeouts = BreakerConfig().probe_timeouts
    in_routing = [p for p in probes.list if p.in_routing]
    run = in_routing[-timeouts:]
    assert [p.ok for p in run] == [None] * timeouts, probes.list
    assert all(p.ok is None for p in probes.list[mark:] if p.in_routing), probes.list
    # (The limit's deadline is set a few microseconds before the probe starts.)
    assert all(p.ended_s is not None and p.ended_s - p.started_s > INTERVAL_S - 0.01 for p in run)
    # After a time-out the next probe follows at once (it already waited an interval): the
    # pool starts it in the same step that ends the last one, so the gap is CPU time, where
    # a pause would be a whole interval.
    for before, after in itertools.pairwise(run):
        assert before.ended_s is not None and after.started_s - before.ended_s < INTERVAL_S / 2


async def test_calls_not_yet_streaming_move_to_another_backend_when_theirs_dies() -> None:
    # "a" holds every answer for 30 s before its first byte of body; "b" answers at once.
    async with (
        spawn_fake("--name", "a", "--first-token-delay", "30") as a,
        spawn_fake("--name", "b") as b,
        _controller(a.url, b.url) as (url, app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        results: list[httpx.Response] = []

        async def call(stream: bool) -> None:
            results.append(await http.post(url + CHAT, json=_body(stream)))

        async with anyio.create_task_group() as group:
            for i in range(8):  # round robin: half of them wait on "a"
                group.start_soon(call, i % 2 == 0)
            with anyio.fail_after(10):
                while app.core.pool.states["b0"].in_flight < 4:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            a.kill()
        metrics = (await http.get(url + "/metrics")).text
        after = [(await http.post(url + CHAT, json=_body())).json()["id"] for _ in range(4)]
    assert [r.status_code for r in results] == [200] * 8
    for response in results:
        if response.headers["content-type"].startswith("text/event-stream"):
            events = _sse_events(response.text)
            assert {e["id"] for e in events} == {"chatcmpl-b"}
            assert events[-1]["choices"][0]["finish_reason"] == "stop"
        else:
            assert response.json()["id"] == "chatcmpl-b"
    assert 'agentrt_controller_retries_total{backend="b0"} 4' in metrics, [
        line for line in metrics.splitlines() if "retries" in line
    ]
    assert after == ["chatcmpl-b"] * 4  # the dead backend is out of routing


async def test_a_stream_in_flight_when_its_backend_dies_ends_with_a_clear_error() -> None:
    async with (
        spawn_fake("--name", "a", "--tokens", "200", "--chunk-delay", "0.05") as a,
        _controller(a.url) as (url, app),
    ):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        state = app.core.pool.states["b0"]
        probes = _Probes(state)
        received, mark = 0, 0
        with pytest.raises(openai.APIError) as caught:
            stream = await client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            async for _chunk in stream:
                received += 1
                if received == 3:
                    a.kill()
                    await a.process.wait()  # dead, not dying
                    mark = len(probes.list)
        await client.close()
        assert state.in_flight == 0
        with anyio.fail_after(20):  # a hang guard, not a measurement
            while state.healthy:  # noqa: ASYNC110
                await anyio.sleep(0.01)
    # Its next health probe took it out (the failed stream alone did not).
    probes.assert_the_first_probe_after_took_it_out(mark)
    assert 3 <= received < 200
    assert "b0 failed mid-answer" in caught.value.message
    assert caught.value.body is not None and caught.value.body["type"] == "upstream_error"


async def test_with_every_backend_dead_callers_get_503_not_a_hang() -> None:
    async with (
        spawn_fake("--name", "a") as a,
        _controller(a.url) as (url, _app),
        httpx.AsyncClient(timeout=10) as http,
    ):
        a.kill()
        response = await http.post(url + CHAT, json=_body())
        health = await http.get(url + "/health")
    assert response.status_code in (502, 503)
    assert response.json()["error"]["type"] in ("service_unavailable", "upstream_error")
    assert health.status_code == 503


async def test_garbage_metrics_mean_unknown_load_and_the_backend_still_serves() -> None:
    async with (
        spawn_fake("--name", "g", "--garbage-metrics") as g,
        _controller(g.url) as (url, app),
        httpx.AsyncClient(timeout=10) as http,
    ):
        probes = _Probes(app.core.pool.states["b0"])
        with anyio.fail_after(20):  # a few scrapes of garbage (each after a health probe)
            while len([p for p in probes.list if p.ok is not None]) < 3:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        listing = (await http.get(url + "/agentrt/v1/backends")).json()["backends"]
        answer = await http.post(url + CHAT, json=_body())
    load = listing[0]["load"]
    assert listing[0]["state"] == "up"
    assert (load["num_running"], load["num_waiting"], load["kv_cache_usage"]) == (None,) * 3
    assert answer.status_code == 200
    assert app.core.metrics.internal_errors.value() == 0  # no probe round raised


async def test_a_dying_emulator_fails_over_to_a_live_one() -> None:
    fast = ("--time-scale", "50")
    async with (
        spawn_emulator(*fast) as first,
        spawn_emulator(*fast) as second,
        _controller(first.url, second.url, kind="emulator") as (url, app),
    ):
        model = app.core.pool.model_list()[0]["id"]
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)

        async def ask() -> str:
            answer = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=4
            )
            return answer.choices[0].message.content or ""

        assert all([await ask() for _ in range(4)])
        first.kill()
        answers = [await ask() for _ in range(6)]
        await client.close()
        admitted_to_first = app.core.pool.states["b0"].admitted_total
        assert not app.core.pool.states["b0"].healthy
    assert all(answers)
    # At most one call reached the dead one (and was retried) before it left routing.
    assert admitted_to_first <= 3
