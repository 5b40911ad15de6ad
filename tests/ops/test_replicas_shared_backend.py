"""Several controller replicas in front of the same backends (docs/replicas.md, "Shared
backends").

* Each replica's adaptive window is steered by the backend's own waiting queue, which every
  replica scrapes: two replicas flooding one emulator (a batch of 8) keep its waiting queue
  near ``target_waiting`` whether the batch size is known (the emulator's metric bounds each
  window) or not (a stock vLLM: the metric hidden by a filtering proxy, AIMD alone). Without
  a window the same load leaves ~40 calls waiting in the engine on average (docs/replicas.md).
* A backend ``priority`` means the same on every replica: a program's level comes from its
  own attained service against the same boundaries (PLAS), and a program lives on one
  replica, so two programs with the same history get the same priorities on two replicas
  however differently loaded those are.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import httpx
import pytest

from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import (
    DEFAULT_MODEL_NAME,
    EmulatorConfig,
    RunningEmulator,
    serve_engine,
)
from tests.backends.fake_vllm import FakeVllm, build_app
from tests.backends.servers import request_body, serve_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

BATCH = 8
TARGET_WAITING = 2  # the adaptive window's default target (AdaptiveWindowConfig)
CALLS_PER_REPLICA = 60


def stock_vllm_view(upstream: str, http: httpx.AsyncClient) -> Any:
    """An ASGI app passing every request to ``upstream`` whole, with the emulator's
    ``agentrt_engine_max_num_seqs`` taken out of ``/metrics``: the controller then sees what
    a stock vLLM shows (no batch size) and its window has only the waiting queue to go by."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await request_body(receive)
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"]
                   if k.lower() not in (b"host", b"content-length")]  # fmt: skip
        answer = await http.request(
            scope["method"],
            upstream + scope["path"],
            content=body,
            headers=headers,
            params=scope["query_string"].decode(),
        )
        content = answer.content
        if scope["path"] == "/metrics":
            lines = content.split(b"\n")
            content = b"\n".join(line for line in lines if b"max_num_seqs" not in line)
        kind = answer.headers.get("content-type", "application/json").encode()
        await send({"type": "http.response.start", "status": answer.status_code,
                    "headers": [(b"content-type", kind)]})  # fmt: skip
        await send({"type": "http.response.body", "body": content})

    return app


@contextlib.asynccontextmanager
async def replicas(
    count: int, backend: BackendSpec, apps: list[ControllerApp] | None = None, **options: Any
) -> AsyncIterator[list[str]]:
    """``count`` in-process controllers sharing ``backend``; yields their URLs (their apps
    appended to ``apps``)."""
    config = ControllerConfig(port=0, backends=(backend,), scrape_interval_s=0.2, **options)
    on_app = (apps if apps is not None else []).append
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(serve_controller(config, on_app=on_app))
            for _ in range(count)
        ]


def chat(tokens: int) -> dict[str, Any]:
    return {"model": DEFAULT_MODEL_NAME, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": tokens, "ignore_eos": True}  # fmt: skip


async def flood(http: httpx.AsyncClient, urls: Sequence[str], calls_each: int) -> None:
    """``calls_each`` concurrent calls to each replica, one program each."""

    async def call(url: str, program_id: str) -> None:
        headers = {"X-Agentrt-Program-Id": program_id, "X-Agentrt-Session-Id": "s-flood"}
        answer = await http.post(url + "/v1/chat/completions", json=chat(40), headers=headers)
        assert answer.status_code == 200, answer.text

    async with anyio.create_task_group() as group:
        for r, url in enumerate(urls):
            for i in range(calls_each):
                group.start_soon(call, url, f"r{r}-p{i}")


#: Connections of the clients flooding the replicas and of the stock-vLLM view's upstream.
LIMITS = httpx.Limits(max_connections=400)


@contextlib.asynccontextmanager
async def shared_engine(
    batch_size_known: bool,
) -> AsyncIterator[tuple[RunningEmulator, BackendSpec]]:
    """An emulator with a batch of ``BATCH`` and the backend ``shared`` the replicas see it
    as: the emulator itself when ``batch_size_known``, else :func:`stock_vllm_view` of it
    (kind ``vllm``, its batch size hidden)."""
    async with (
        serve_engine(EmulatorConfig(engine=EngineConfig(max_num_seqs=BATCH))) as engine,
        httpx.AsyncClient(timeout=120, limits=LIMITS) as upstream,
        serve_app(stock_vllm_view(engine.base_url, upstream)) as stock_url,
    ):
        backend = (
            BackendSpec(engine.base_url, kind="emulator", backend_id="shared")
            if batch_size_known
            else BackendSpec(stock_url, kind="vllm", backend_id="shared")
        )
        yield engine, backend


async def flood_sampling_waiting(
    http: httpx.AsyncClient, urls: Sequence[str], calls_each: int, engine: RunningEmulator
) -> list[int]:
    """:func:`flood` the replicas while sampling the engine's waiting queue every 50 ms;
    returns the samples (calls), in order."""
    waiting: list[int] = []
    done = anyio.Event()

    async def sample() -> None:
        while not done.is_set():
            waiting.append(engine.state.core.num_waiting)
            await anyio.sleep(0.05)

    async with anyio.create_task_group() as group:
        group.start_soon(sample)
        await flood(http, urls, calls_each)
        done.set()
    return waiting


@pytest.mark.parametrize("batch_size_known", [True, False], ids=["emulator", "stock-vllm"])
async def test_two_replicas_keep_a_shared_engine_s_queue_near_the_target(
    batch_size_known: bool,
) -> None:
    async with shared_engine(batch_size_known) as (engine, backend):
        apps: list[ControllerApp] = []
        async with (
            replicas(2, backend, apps, admission_window="adaptive") as urls,
            httpx.AsyncClient(timeout=120, limits=LIMITS) as http,
        ):
            waiting = await flood_sampling_waiting(http, urls, CALLS_PER_REPLICA, engine)
            in_flight_after = []
            for url in urls:
                snapshot = (await http.get(url + "/agentrt/v1/queues")).json()
                in_flight_after.append(snapshot["backends"][0]["in_flight"])
            batch_sizes = {app.core.pool.states["shared"].load.max_num_seqs for app in apps}
    assert batch_sizes == ({BATCH} if batch_size_known else {None})
    steady = waiting[len(waiting) // 5 :]  # past the first scrapes
    assert len(steady) >= 20, "the run was too short to say anything"
    # Both windows react to the same queue: it stays near the target (a window of 2 x 60
    # unlimited calls would leave ~40 waiting on average and up to 112).
    assert statistics.mean(steady) <= TARGET_WAITING + 3, steady
    assert max(steady) <= 3 * BATCH, steady
    assert in_flight_after == [0, 0]  # every call settled on both replicas


async def test_a_backend_priority_means_the_same_on_every_replica() -> None:
    fake = FakeVllm(name="shared", tokens=50)
    scheduling = {"boundaries_s": [0.001, 0.002, 0.004, 0.008]}
    async with (
        serve_app(build_app(fake)) as url,
        replicas(
            2,
            BackendSpec(url, kind="vllm", backend_id="shared", priority=True),
            policy="plas",
            scheduling=scheduling,
            admission_window=None,
        ) as (quiet, busy),
        httpx.AsyncClient(timeout=30) as http,
    ):

        async def program(replica: str, program_id: str, calls: int) -> None:
            headers = {"X-Agentrt-Program-Id": program_id, "X-Agentrt-Session-Id": "s-prio"}
            body = {**chat(50), "model": fake.model,
                    "messages": [{"role": "user", "content": program_id}]}  # fmt: skip
            for _ in range(calls):
                answer = await http.post(
                    replica + "/v1/chat/completions", json=body, headers=headers
                )
                assert answer.status_code == 200, answer.text

        async with anyio.create_task_group() as group:
            group.start_soon(program, quiet, "alone", 6)
            group.start_soon(program, busy, "crowded", 6)
            for i in range(10):  # other programs on the busy replica only
                group.start_soon(program, busy, f"other-{i}", 3)
    priorities: dict[str, list[int]] = {}
    for sent in fake.requests:
        priorities.setdefault(sent["messages"][0]["content"], []).append(sent["priority"])
    assert priorities["alone"] == priorities["crowded"]
    # The check can fail: the priorities change as the programs attain service.
    assert len(set(priorities["alone"])) > 1, priorities["alone"]
