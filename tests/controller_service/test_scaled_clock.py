"""The controller in front of engine emulators run faster than real time (``controller serve
--time-scale X``): its core runs on the engines' model seconds."""

from __future__ import annotations

import logging
import time

import anyio
import pytest

from agentrt.errors import ConfigError
from agentrt_controller.backends.api import BackendCapabilities, BackendLoad
from agentrt_controller.backends.fake import FakeBackend, FakeResponse
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, load_config
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core.clock import MONOTONIC, ScaledClock, clock_for, sleep_until
from agentrt_controller.service.core.pool import BackendPool

pytestmark = pytest.mark.timeout(30)


def test_a_scaled_clock_reads_the_wall_clock_times_its_scale() -> None:
    clock = ScaledClock(10.0)
    before = time.monotonic()
    now = clock()
    after = time.monotonic()
    assert 10.0 * before <= now <= 10.0 * after
    assert clock_for(1.0) is MONOTONIC
    scaled = clock_for(4.0)
    assert isinstance(scaled, ScaledClock) and scaled.scale == 4.0
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="scale must be a number > 0"):
            ScaledClock(bad)


@pytest.mark.anyio
async def test_waiting_on_a_scaled_clock_takes_a_scaleth_of_its_seconds() -> None:
    clock = ScaledClock(100.0)
    deadline = clock() + 20.0  # 0.2 s of real time
    # 20 model seconds slept as 20 wall seconds would run out of this limit.
    with anyio.fail_after(10.0):
        await sleep_until(clock, deadline)
    assert clock() >= deadline


def test_the_time_scale_is_checked_and_reaches_the_core() -> None:
    assert load_config(None, {}).time_scale == 1.0
    assert load_config(None, {}, {"time_scale": 10.0}).time_scale == 10.0
    assert load_config(None, {"AGENTRT_CONTROLLER_TIME_SCALE": "5"}).time_scale == 5.0
    for bad in (0, -2, float("inf")):
        with pytest.raises(ConfigError, match="time_scale"):
            load_config(None, {}, {"time_scale": bad})
    backends = (BackendSpec("http://127.0.0.1:9"),)
    assert ControllerApp(ControllerConfig(backends=backends)).core.clock is MONOTONIC
    core = ControllerApp(ControllerConfig(backends=backends, time_scale=10.0)).core
    assert isinstance(core.clock, ScaledClock) and core.clock.scale == 10.0


@pytest.mark.anyio
async def test_a_backend_on_another_time_scale_is_logged_once_per_scale(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def answer(request: object) -> FakeResponse:
        raise AssertionError("no call is sent here")

    scraped = BackendCapabilities(scrapes_metrics=True)
    fast = FakeBackend("fast", answer, capabilities=scraped, load=BackendLoad(time_scale=10.0))
    same = FakeBackend("same", answer, capabilities=scraped, load=BackendLoad(time_scale=2.0))
    real = FakeBackend("real", answer, capabilities=scraped)  # publishes none: a real engine
    pool = BackendPool([fast, same, real], on_change=lambda: None, clock=MONOTONIC, time_scale=2.0)
    with caplog.at_level(logging.WARNING, logger="agentrt.controller"):
        await pool.refresh()
        await pool.refresh()
        fast.load = BackendLoad(time_scale=4.0)  # restarted at another scale
        await pool.refresh()
    warned = [r.getMessage() for r in caplog.records if "time scale" in r.getMessage()]
    assert warned == [
        "backend fast runs at time scale 10 and this controller at 2: the tool waits, retention "
        "TTLs and idle releases it measures are 5 times off against the engine's; start the "
        'controller with --time-scale 10 (docs/engine-emulator.md, "Time")',
        "backend fast runs at time scale 4 and this controller at 2: the tool waits, retention "
        "TTLs and idle releases it measures are 2 times off against the engine's; start the "
        'controller with --time-scale 4 (docs/engine-emulator.md, "Time")',
    ]
    assert pool.states["fast"].describe(0.0)["load"]["time_scale"] == 4.0
