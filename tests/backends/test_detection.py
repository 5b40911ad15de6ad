"""A backend configured without a kind: the controller asks the server once at start-up whether
it is our engine emulator (``GET /agentrt/engine/v1/pins``) and runs it as ``emulator`` (native
KV-retention pins) or ``vllm``; an explicit ``kind=`` always wins. Real servers on loopback:
our emulator, a vLLM-like stub without the pin listing, stubs that fail or hang on it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentrt.errors import ConfigError
from agentrt_controller.backends import BackendSpec, build_backend, pins_of
from agentrt_controller.backends.emulator import PINS_PATH, DetectedBackend, EmulatorBackend
from agentrt_controller.backends.transport import HttpPool
from agentrt_controller.service import load_config, serve_controller
from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import EmulatorConfig, RunningEmulator, serve_engine

from .fake_vllm import FakeVllm, build_app
from .servers import serve_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

LISTING = "/agentrt/v1/backends"


@asynccontextmanager
async def _emulator() -> AsyncIterator[RunningEmulator]:
    engine = EngineConfig(num_gpu_blocks=512, max_num_seqs=4)
    async with serve_engine(EmulatorConfig(engine=engine, time_scale=50.0)) as running:
        yield running


@asynccontextmanager
async def _listing(*backends: str) -> AsyncIterator[dict[str, dict[str, Any]]]:
    """A controller configured as the command line does (``--backend TEXT`` strings, nothing
    else); yields its backend listing by id once it has started."""
    overrides = {"backends": list(backends), "port": 0, "scrape_interval_s": 0.3}
    config = load_config(env={}, overrides=overrides)
    async with (
        serve_controller(config) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):
        listing = (await http.get(LISTING)).json()["backends"]
        yield {b["backend_id"]: b for b in listing}


def _stub(pins: Callable[[Request], Awaitable[Response]], seen: list[str]) -> Any:
    """A vLLM-like server (FakeVllm's routes) plus ``GET`` of the pin path answered by
    ``pins``; every path asked is recorded in ``seen``."""
    base = build_app(FakeVllm(name="stub"))

    app = Starlette(routes=[Route(PINS_PATH, pins), *base.routes])

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append(scope["path"])
        await app(scope, receive, send)

    return recording


async def _impostor(_: Request) -> Response:
    return JSONResponse({"pins": [], "pinned_blocks": 0, "model_time_s": 0.0})


def _detections(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "kind " in r.getMessage()]


def test_a_backend_without_kind_is_detected_an_explicit_kind_is_not() -> None:
    assert BackendSpec.parse("http://h:1").detect_kind
    assert BackendSpec.from_mapping({"url": "http://h:1"}).detect_kind
    for text in ("http://h:1,kind=vllm", "http://h:1,kind=emulator", "http://h:1,kind=openai"):
        assert not BackendSpec.parse(text).detect_kind
    assert not BackendSpec.from_mapping({"url": "http://h:1", "kind": "vllm"}).detect_kind
    assert not BackendSpec("http://h:1").detect_kind  # code that builds specs says what it means
    with pytest.raises(ConfigError, match="not detected"):
        BackendSpec("http://h:1", kind="sglang", detect_kind=True)


async def test_our_emulator_is_detected_and_gets_native_pins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "agentrt.controller")
    async with _emulator() as engine, _listing(engine.base_url) as backends:
        (backend,) = backends.values()
    assert backend["kind"] == "emulator"
    assert backend["capabilities"]["supports_pins"] is True
    assert backend["load"]["max_num_seqs"] == 4  # scraped as before: the window's bound
    (line,) = _detections(caplog)
    assert "kind emulator (detected" in line and backend["backend_id"] in line


async def test_a_plain_openai_compatible_server_is_vllm(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "agentrt.controller")
    async with serve_app(build_app(FakeVllm(name="plain"))) as url, _listing(url) as backends:
        (backend,) = backends.values()
    assert backend["kind"] == "vllm"
    assert backend["capabilities"]["supports_pins"] is False
    assert backend["state"] == "up"
    (line,) = _detections(caplog)
    assert "kind vllm (detected" in line and "HTTP 404" in line


async def test_an_explicit_kind_wins_and_nothing_is_probed() -> None:
    seen: list[str] = []
    async with (
        _emulator() as engine,
        serve_app(_stub(_impostor, seen)) as stub_url,
        serve_app(build_app(FakeVllm(name="plain"))) as plain_url,
        _listing(
            f"{engine.base_url},kind=vllm,id=emu-as-vllm",
            f"{stub_url},kind=vllm,id=impostor-as-vllm",
            f"{plain_url},kind=emulator,id=plain-as-emulator",
        ) as backends,
    ):
        pass
    kinds = {i: (b["kind"], b["capabilities"]["supports_pins"]) for i, b in backends.items()}
    assert kinds == {
        "emu-as-vllm": ("vllm", False),
        "impostor-as-vllm": ("vllm", False),
        "plain-as-emulator": ("emulator", True),
    }
    assert "/health" in seen and PINS_PATH not in seen


async def test_the_signal_is_the_pin_listing_itself() -> None:
    """A stub answering the pin listing is taken for the emulator (the probe asks for
    nothing else); one answering 200 with something else is not."""
    seen: list[str] = []

    async def not_a_listing(_: Request) -> Response:
        return JSONResponse({"pins": "none"})

    async with (
        serve_app(_stub(_impostor, seen)) as listing_url,
        serve_app(_stub(not_a_listing, [])) as other_url,
        _listing(f"{listing_url},id=listing", f"{other_url},id=other") as backends,
    ):
        pass
    assert {i: b["kind"] for i, b in backends.items()} == {"listing": "emulator", "other": "vllm"}
    assert seen.count(PINS_PATH) == 1  # once at start-up, not on every probe


@pytest.mark.parametrize("failure", ["hangs", "500"])
async def test_a_failed_probe_means_vllm_with_a_warning(
    failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "agentrt.controller")

    async def hang(_: Request) -> Response:
        await anyio.sleep(30)
        return await _impostor(_)

    async def fail(_: Request) -> Response:
        return Response("boom", status_code=500)

    async with serve_app(_stub(hang if failure == "hangs" else fail, [])) as url:
        started = anyio.current_time()
        async with _listing(f"{url},probe_timeout_s=0.5") as backends:
            startup_s = anyio.current_time() - started
    (backend,) = backends.values()
    assert (backend["kind"], backend["capabilities"]["supports_pins"]) == ("vllm", False)
    assert backend["state"] == "up"  # the server still serves, as vllm
    (line,) = _detections(caplog)
    assert "kind vllm (detection failed" in line and "kind=emulator or kind=vllm" in line
    assert startup_s < 10  # the hung probe is bounded by probe_timeout_s, not the 30 s hang


async def test_an_unreachable_server_stays_vllm_until_it_answers() -> None:
    pool = HttpPool.create(read_timeout_s=5)
    try:
        backend = build_backend(BackendSpec.parse("http://127.0.0.1:9,probe_timeout_s=0.5"), pool)
        assert isinstance(backend, DetectedBackend)
        assert (backend.kind, pins_of(backend)) == ("vllm", None)  # before any detection
        await backend.detect_features()  # nothing listens on port 9
        assert (backend.kind, pins_of(backend)) == ("vllm", None)
        assert backend.detection.startswith("kind vllm (detection failed")
        async with _emulator() as engine:
            again = build_backend(BackendSpec.parse(engine.base_url), pool)
            assert isinstance(again, EmulatorBackend)
            await again.detect_features()
            assert (again.kind, pins_of(again)) == ("emulator", again)
    finally:
        await pool.aclose()


async def test_a_backend_added_without_kind_is_detected() -> None:
    async with (
        _emulator() as engine,
        serve_app(build_app(FakeVllm(name="first"))) as first_url,
    ):
        config = load_config(env={}, overrides={"backends": [first_url], "port": 0})
        async with (
            serve_controller(config) as url,
            httpx.AsyncClient(base_url=url, timeout=10) as http,
        ):
            added = await http.post(LISTING, json={"url": engine.base_url, "id": "added"})
            listing = (await http.get(LISTING)).json()["backends"]
    assert added.status_code in (200, 201), added.text
    assert {b["backend_id"]: b["kind"] for b in listing}["added"] == "emulator"
