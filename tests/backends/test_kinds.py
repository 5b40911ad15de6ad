"""The backend kinds against real loopback servers: vLLM-like fakes, our engine emulator, and
a fake that speaks SGLang's documented API (SGLang itself is not run: see fake_sglang.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import openai
import pytest

from agentrt_controller.backends import (
    BackendError,
    BackendRequest,
    BackendSpec,
    PinError,
    PinsUnsupported,
    SupportsPins,
    SupportsTokenize,
    build_backend,
    pins_of,
)
from agentrt_controller.backends.emulator import EmulatorBackend
from agentrt_controller.backends.http import VllmBackend
from agentrt_controller.backends.sglang import SGLangBackend
from agentrt_controller.backends.transport import HttpPool
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import (
    DEFAULT_MODEL_NAME,
    EmulatorConfig,
    RunningEmulator,
    serve_engine,
)

from .fake_sglang import FakeSGLang, build_sglang
from .fake_vllm import FakeVllm, build_app
from .servers import serve_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

MODEL = DEFAULT_MODEL_NAME
#: ~60 words: several 16-token KV blocks of a shared prefix.
LONG = " ".join(f"word{i} of the shared system prompt" for i in range(60))


@asynccontextmanager
async def _http() -> AsyncIterator[HttpPool]:
    pool = HttpPool.create(read_timeout_s=30)
    try:
        yield pool
    finally:
        await pool.aclose()


@asynccontextmanager
async def _emulator(policy: str = "fcfs") -> AsyncIterator[RunningEmulator]:
    engine = EngineConfig(num_gpu_blocks=2048, scheduling_policy=policy)  # type: ignore[arg-type]
    async with serve_engine(EmulatorConfig(engine=engine, time_scale=200.0)) as running:
        yield running


def _request(body: dict[str, Any], priority: int | None = None) -> BackendRequest:
    raw = json.dumps(body).encode()
    return BackendRequest("/v1/chat/completions", raw, body, False, priority=priority)


# --- vllm -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "expected"), [("fcfs", False), ("priority", True)])
async def test_priority_auto_asks_the_server(policy: str, expected: bool) -> None:
    async with _emulator(policy) as engine, _http() as http:
        backend = build_backend(BackendSpec(engine.base_url, priority="auto"), http)
        assert not backend.capabilities.supports_priority  # nothing sent before it is known
        assert isinstance(backend, VllmBackend)
        await backend.detect_features()
    assert backend.capabilities.supports_priority is expected


async def test_priority_auto_in_the_controller_never_sends_a_refused_priority() -> None:
    refusing, taking = FakeVllm(name="r", no_priority=True), FakeVllm(name="t")
    apps: list[ControllerApp] = []
    async with serve_app(build_app(refusing)) as r_url, serve_app(build_app(taking)) as t_url:
        specs = (
            BackendSpec(r_url, backend_id="r", priority="auto"),
            BackendSpec(t_url, backend_id="t", priority="auto"),
        )
        config = ControllerConfig(port=0, backends=specs, policy="plas", scrape_interval_s=0.2)
        async with (
            serve_controller(config, on_app=apps.append) as url,
            httpx.AsyncClient(base_url=url, timeout=10) as http,
        ):
            body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
            statuses = [(await http.post("/v1/chat/completions", json=body)).status_code
                        for _ in range(4)]  # fmt: skip
            listing = (await http.get("/agentrt/v1/backends")).json()["backends"]
    assert statuses == [200] * 4
    assert {b["backend_id"]: b["capabilities"]["supports_priority"] for b in listing} == {
        "r": False,
        "t": True,
    }
    assert all("priority" not in body for body in refusing.requests)
    assert all(isinstance(body["priority"], int) for body in taking.requests)


async def test_token_counts_are_exact_and_cached() -> None:
    messages = [{"role": "system", "content": LONG}, {"role": "user", "content": "hello there"}]
    async with _emulator() as engine, _http() as http:
        backend = build_backend(BackendSpec(engine.base_url), http)
        assert isinstance(backend, SupportsTokenize) and backend.capabilities.supports_tokenize
        counted = await backend.count_tokens(messages=messages)
        again = await backend.count_tokens(messages=messages)
        prompt = await backend.count_tokens(prompt="hello there")
        async with openai.AsyncOpenAI(
            base_url=engine.openai_base_url, api_key="unused", max_retries=0
        ) as client:
            answer = await client.chat.completions.create(
                model=MODEL,
                messages=messages,
                max_tokens=2,  # type: ignore[arg-type]
            )
        with pytest.raises(BackendError):
            await backend.count_tokens(messages=messages, prompt="both")
        assert isinstance(backend, VllmBackend)
        hits, misses = backend.tokens.hits, backend.tokens.misses
    assert answer.usage is not None and counted == again == answer.usage.prompt_tokens
    assert 0 < prompt < counted
    assert (hits, misses) == (1, 2)


async def test_cache_salt_reaches_the_engine_through_the_controller() -> None:
    async with _emulator() as engine:
        config = ControllerConfig(port=0, backends=(BackendSpec(engine.base_url, kind="emulator"),))
        async with (
            serve_controller(config) as url,
            openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client,
        ):

            async def cached(salt: str) -> int:
                answer = await client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": LONG}],
                    max_tokens=1,
                    extra_body={"cache_salt": salt},
                )
                assert answer.usage is not None and answer.usage.prompt_tokens_details
                return answer.usage.prompt_tokens_details.cached_tokens or 0

            first, same, other = await cached("tenant-a"), await cached("tenant-a"), 0
            other = await cached("tenant-b")
    assert first == 0 and same > 0 and other == 0


# --- emulator: native pins --------------------------------------------------------------------


async def test_emulator_pins_hold_cached_blocks_until_unpinned() -> None:
    messages = [{"role": "system", "content": LONG}, {"role": "user", "content": "go"}]
    async with _emulator() as engine, _http() as http, httpx.AsyncClient() as plain:
        backend = build_backend(BackendSpec(engine.base_url, kind="emulator"), http)
        assert isinstance(backend, EmulatorBackend) and isinstance(backend, SupportsPins)
        assert pins_of(backend) is backend
        cold = await backend.pin("cold", messages=messages, ttl_s=60)
        body = {"model": MODEL, "messages": messages, "max_tokens": 1}
        await plain.post(engine.base_url + "/v1/chat/completions", json=body)
        warm = await backend.pin("warm", messages=messages, ttl_s=60, cache_salt=None)
        listed = (await plain.get(engine.base_url + "/agentrt/engine/v1/pins")).json()
        load = await backend.scrape()
        removed, again = await backend.unpin("warm"), await backend.unpin("warm")
        after = (await plain.get(engine.base_url + "/agentrt/engine/v1/pins")).json()
        with pytest.raises(PinError):
            await backend.pin("x", messages=messages, prompt="and", ttl_s=1)
        with pytest.raises(PinError):
            await backend.pin("x", prompt="p", ttl_s=0)
    assert cold.blocks == 0  # nothing cached yet: a pin never computes
    assert warm.blocks is not None and warm.blocks > 0 and warm.ttl_s == 60
    assert {p["pin_id"] for p in listed["pins"]} == {"cold", "warm"}
    assert load.pinned_blocks == warm.blocks
    assert (removed, again) == (True, False)
    assert [p["pin_id"] for p in after["pins"]] == ["cold"]


async def test_emulator_pin_expires_after_its_ttl() -> None:
    async with _emulator() as engine, _http() as http, httpx.AsyncClient() as plain:
        backend = build_backend(BackendSpec(engine.base_url, kind="emulator"), http)
        assert isinstance(backend, EmulatorBackend)
        await plain.post(
            engine.base_url + "/v1/completions",
            json={"model": MODEL, "prompt": LONG, "max_tokens": 1},
        )
        pinned = await backend.pin("short", prompt=LONG, ttl_s=2.0)  # model s; time scale 200
        with anyio.fail_after(5):
            while (await plain.get(engine.base_url + "/agentrt/engine/v1/pins")).json()["pins"]:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        assert not await backend.unpin("short")  # the server forgot it by itself
    assert pinned.blocks is not None and pinned.blocks > 0


# --- sglang (documentation-built; fake server) ---------------------------------------------


async def test_sglang_metrics_are_read_by_their_documented_names() -> None:
    async with serve_app(build_sglang(FakeSGLang())) as url, _http() as http:
        backend = build_backend(BackendSpec(url, kind="sglang"), http)
        assert await backend.health()
        load = await backend.scrape()
    assert (load.num_running, load.num_waiting) == (5, 4)  # summed over ranks
    assert load.kv_cache_usage == 0.31  # the fullest rank
    assert load.prefix_cache_hit_rate == 0.0075
    assert load.prefix_cache_hits == 1234


@pytest.mark.parametrize(
    ("options", "level", "sent"),
    [({}, 0, 100), ({}, 3, 97), ({}, 250, 0), ({"priority_top": "10"}, 2, 8),
     ({"priority_order": "lower_first"}, 3, 3)],
)  # fmt: skip
async def test_sglang_priority_runs_higher_first_unless_configured(
    options: dict[str, str], level: int, sent: int
) -> None:
    fake = FakeSGLang()
    async with serve_app(build_sglang(fake)) as url, _http() as http:
        spec = BackendSpec(url, kind="sglang", priority=True, options=options)
        response = await build_backend(spec, http).send(_request({"model": "tiny"}, level))
        await response.aread()
    assert fake.requests[0]["priority"] == sent


async def test_sglang_pins_token_ids_with_a_ttl() -> None:
    fake = FakeSGLang(pin_budget_tokens=100)
    async with serve_app(build_sglang(fake)) as url, _http() as http:
        spec = BackendSpec(url, kind="sglang", options={"pins": "on"})
        backend = build_backend(spec, http)
        assert isinstance(backend, SGLangBackend) and pins_of(backend) is backend
        first = await backend.pin("p1", token_ids=list(range(10)), ttl_s=2.5)
        pinned_first = dict(fake.pinned)
        replaced = await backend.pin("p1", token_ids=list(range(20)), ttl_s=None)
        pinned_replaced = dict(fake.pinned)
        unpinned, unknown = await backend.unpin("p1"), await backend.unpin("never")
        with pytest.raises(PinsUnsupported):
            await backend.pin("m", messages=[{"role": "user", "content": "x"}], ttl_s=5)
        with pytest.raises(PinsUnsupported):
            await backend.pin("s", token_ids=[1, 2], ttl_s=5, cache_salt="tenant")
        with pytest.raises(PinError):
            await backend.pin("e", token_ids=[], ttl_s=5)
    assert first.tokens == 10 and first.ttl_s == 3.0 and not first.partial
    assert pinned_first == {tuple(range(10)): 3}  # whole seconds, rounded up
    assert pinned_replaced == {tuple(range(20)): 300}  # default TTL; the old pin is gone
    assert replaced.ttl_s == 300.0
    assert (unpinned, unknown) == (True, False) and fake.pinned == {}


async def test_sglang_pin_refusals_and_missing_endpoints() -> None:
    async with (
        serve_app(build_sglang(FakeSGLang(pin_budget_tokens=0))) as no_budget,
        serve_app(build_sglang(FakeSGLang(pin_budget_tokens=5))) as small,
        serve_app(build_sglang(FakeSGLang(with_pin_endpoints=False))) as missing,
        _http() as http,
    ):

        def sglang(url: str, pins: str = "on") -> SGLangBackend:
            spec = BackendSpec(url, kind="sglang", options={"pins": pins})
            backend = build_backend(spec, http)
            assert isinstance(backend, SGLangBackend)
            return backend

        with pytest.raises(PinError, match="SGLANG_HICACHE_MAX_PINNED_RATIO"):
            await sglang(no_budget).pin("a", token_ids=[1, 2, 3], ttl_s=5)
        partial = await sglang(small).pin("b", token_ids=list(range(10)), ttl_s=5)
        old = sglang(missing)
        with pytest.raises(PinsUnsupported):
            await old.pin("c", token_ids=[1], ttl_s=5)
        off = sglang(small, pins="off")
        with pytest.raises(PinsUnsupported):
            await off.pin("d", token_ids=[1], ttl_s=5)
    assert partial.partial and partial.blocks == 5
    assert not old.capabilities.supports_pins and pins_of(old) is None  # turned off after 404
    assert pins_of(off) is None


async def test_sglang_behind_the_controller_gets_inverted_priorities() -> None:
    fake = FakeSGLang()
    async with serve_app(build_sglang(fake)) as url:
        spec = BackendSpec(url, kind="sglang", priority=True)
        config = ControllerConfig(port=0, backends=(spec,), policy="plas")
        async with serve_controller(config) as controller_url, httpx.AsyncClient() as http:
            body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
            answer = await http.post(controller_url + "/v1/chat/completions", json=body)
    assert answer.status_code == 200
    assert fake.requests[0]["priority"] == 100  # a fresh program: level 0, the most urgent
