"""The retention rule with no retention options, over real HTTP: the controller learns each
backend's KV capacity and CPU tier from its ``/metrics`` (``vllm:cache_config_info``, the
emulator's reload cost) and the rule acts on them (docs/routing.md, "Where M and the tier
come from").

An emulator of 2,048 blocks (32,768 tokens) is filled to ~85 % by another client's long
request; a tagged program with a ~2 K-token context then waits on a tool. Without a CPU
tier, the context's eviction costs its recompute: the rule pins it, and the emulator holds
its blocks. With ``--kv-offloading-size`` the eviction costs the reload from the tier, twenty
times cheaper: the rule lets it go to the tier (a window, no pin). Before this, with no
``retention_options.kv_capacity_tokens`` the controller placed no pin at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from agentrt.protocol import EVENTS_PREFIX, CallTags
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SESSION = "s1"
BLOCKS = 2048
CAPACITY = BLOCKS * 16
#: The other client's prompt: ~85 % of the KV (the rule pins a 1 s wait from ~80 %).
FILLER_TOKENS = 28_000


def _messages() -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are a careful coding agent. " * 150},
        {"role": "user", "content": "Fix the failing test in the repository. " * 100},
    ]


def _tags(node: str) -> dict[str, str]:
    return CallTags(
        session_id=SESSION, program_id="agent-1", thread_id="main", node_id=node
    ).to_headers()


async def _fill(engine_url: str) -> None:
    """Another client's long request holding most of the engine's KV until cancelled."""
    prompt = [10 + i % 5000 for i in range(FILLER_TOKENS)]
    body = {"model": DEFAULT_MODEL_NAME, "prompt": prompt, "max_tokens": 3000,
            "ignore_eos": True, "stream": True}  # fmt: skip
    async with (
        httpx.AsyncClient(timeout=60) as http,
        http.stream("POST", engine_url + "/v1/completions", json=body) as response,
    ):
        async for _ in response.aiter_bytes():
            pass


@asynccontextmanager
async def _setup(offload_gib: float) -> AsyncIterator[tuple[str, str, ControllerApp]]:
    engine_config = EngineConfig(num_gpu_blocks=BLOCKS, kv_offloading_size=offload_gib)
    async with serve_engine(EmulatorConfig(engine=engine_config)) as engine:
        config = ControllerConfig(
            port=0,
            backends=(BackendSpec(engine.base_url, kind="emulator"),),
            retention="on",  # the default, no retention_options
            scrape_interval_s=0.1,
        )
        apps: list[ControllerApp] = []
        async with serve_controller(config, on_app=apps.append) as url:
            yield url, engine.base_url, apps[0]


async def _snapshot(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    queues = (await http.get(url + EVENTS_PREFIX + "/queues")).json()
    retention: dict[str, Any] = queues["retention"]
    return retention


async def _pins(http: httpx.AsyncClient, engine_url: str) -> list[dict[str, Any]]:
    pins: list[dict[str, Any]] = (await http.get(engine_url + "/agentrt/engine/v1/pins")).json()[
        "pins"
    ]
    return pins


async def _wait_under_pressure(
    http: httpx.AsyncClient, url: str, engine_url: str, app: ControllerApp
) -> dict[str, Any]:
    """With the filler running (~85 % KV usage), one tagged call of a ~2 K-token context,
    then a 1 s tool wait: the retention snapshot once the decision was made."""
    state = app.core.pool.states[next(iter(app.core.pool.states))]
    with anyio.fail_after(20):
        while (state.load.kv_cache_usage or 0.0) < 0.84:  # noqa: ASYNC110 - the scrape
            await anyio.sleep(0.05)
    events = url + EVENTS_PREFIX + "/programs/agent-1"
    start = {"session_id": SESSION, "name": "coding"}
    assert (await http.post(events + "/start", json=start)).status_code == 200
    body = {"model": DEFAULT_MODEL_NAME, "messages": _messages(), "max_tokens": 4}
    answer = await http.post(url + "/v1/chat/completions", json=body, headers=_tags("c0"))
    assert answer.status_code == 200
    assert answer.json()["usage"]["prompt_tokens"] >= 1500
    wait = {"session_id": SESSION, "thread_id": "main", "node_id": "t1",
            "tool_name": "run_tests", "predicted_duration_s": 1.0}  # fmt: skip
    assert (await http.post(events + "/tool-start", json=wait)).status_code == 200
    with anyio.fail_after(10):
        while True:
            snapshot = await _snapshot(http, url)
            if snapshot["retained"] == 1:
                return snapshot
            await anyio.sleep(0.02)


async def test_a_controller_without_options_learns_the_capacity_and_pins_under_pressure() -> None:
    async with (
        _setup(0.0) as (url, engine_url, app),
        httpx.AsyncClient(timeout=30) as http,
        anyio.create_task_group() as tg,
    ):
        backends = (await http.get(url + EVENTS_PREFIX + "/backends")).json()
        rows = backends["backends"] if isinstance(backends, dict) else backends
        assert rows[0]["kv_capacity"]["gpu_tokens"] == CAPACITY
        assert not (await _snapshot(http, url))["backends"][rows[0]["backend_id"]][
            "cpu_kv_capacity_tokens"
        ]
        tg.start_soon(_fill, engine_url)
        snapshot = await _wait_under_pressure(http, url, engine_url, app)
        facts = next(iter(snapshot["backends"].values()))
        assert facts == {"kv_capacity_tokens": CAPACITY, "cpu_kv_capacity_tokens": 0,
                         "reload_s_per_token": None, "published": True}  # fmt: skip
        assert snapshot["counts"].get("pin") == 1, snapshot["counts"]
        with anyio.fail_after(10):
            while not await _pins(http, engine_url):  # noqa: ASYNC110 - another server
                await anyio.sleep(0.02)
        (pin,) = await _pins(http, engine_url)
        assert pin["blocks"] > 0  # the context is held in GPU memory
        tg.cancel_scope.cancel()


async def test_with_a_cpu_tier_the_rule_lets_the_context_go_to_the_tier() -> None:
    async with (
        _setup(2.0) as (url, engine_url, app),
        httpx.AsyncClient(timeout=30) as http,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(_fill, engine_url)
        snapshot = await _wait_under_pressure(http, url, engine_url, app)
        facts = next(iter(snapshot["backends"].values()))
        # 2 GiB of Llama-3-8B KV (128 KiB a token): 16,384 tokens; its exact reload cost
        assert facts["kv_capacity_tokens"] == CAPACITY
        assert facts["cpu_kv_capacity_tokens"] == 16_384
        assert facts["reload_s_per_token"] == pytest.approx(131_072 / 25e9)
        # the dispatcher's view has the tier too: memory admission counts it as room
        (view,) = app.core.pool.views()
        assert (view.kv_capacity_tokens, view.cpu_kv_capacity_tokens) == (CAPACITY, 16_384)
        assert snapshot["counts"].get("pin") is None, snapshot["counts"]
        assert snapshot["counts"].get("retain") == 1, snapshot["counts"]
        assert await _pins(http, engine_url) == []
        tg.cancel_scope.cancel()
