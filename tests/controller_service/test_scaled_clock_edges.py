"""A controller at ``--time-scale X`` takes a client's durations in wall seconds and tells its
own in wall seconds: the core turns them into its model seconds at the edge (facade module
docstring, "Clients count wall seconds"). At scale 1 nothing changes."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import httpx
import pytest

from agentrt.protocol import (
    HEADER_QUEUE_MS,
    HEADER_TIMEOUT_MS,
    ProgramStart,
    SessionStart,
    ToolWaitEnd,
    ToolWaitStart,
)
from agentrt_controller.keys import ProgramKey
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core.clock import FakeClock
from agentrt_controller.service.core.quotas import TenantQuotas
from agentrt_controller.service.core.tenants import DEFAULT_TENANT, Tenant, TenantQuota
from agentrt_controller.service.errors import QuotaExceeded
from agentrt_controller.service.http.incoming import parse_call
from tests.controller_service.conftest import running
from tests.controller_service.fake_core import running_core
from tests.controller_service.fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

SCALES = pytest.mark.parametrize("scale", [1.0, 10.0])


@SCALES
def test_a_calls_timeout_header_counts_wall_milliseconds(scale: float) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    headers = {HEADER_TIMEOUT_MS.lower(): "2500"}
    parsed = parse_call(body, headers, "c1", 100.0, None, time_scale=scale)
    assert parsed.call.deadline_s == pytest.approx(100.0 + 2.5 * scale)


@SCALES
async def test_program_and_wait_durations_are_wall_seconds(
    scale: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ControllerConfig(scrape_interval_s=3600.0, retention="on", time_scale=scale)
    async with running_core(config) as core:
        tenant = core.tenants.tenants.get(DEFAULT_TENANT) or Tenant(DEFAULT_TENANT)
        started = core.start_session(tenant, SessionStart(session_id="s1"))
        assert started.idle_timeout_s == pytest.approx(config.program_idle_timeout_s / scale)

        now = core.now()
        core.start_program(tenant, "p1", ProgramStart(session_id="s1", timeout_ms=30_000))
        key = ProgramKey(tenant=tenant.name, session_id="s1", program_id="p1")
        entry = core.dispatcher.table.get(key)
        assert entry is not None and entry.deadline_s == pytest.approx(now + 30.0 * scale)

        retention = core.retention
        assert retention is not None
        learned: list[float] = []

        def on_tool_end(program: ProgramKey, **wait: Any) -> None:
            learned.append(wait["duration_s"])

        monkeypatch.setattr(retention, "on_tool_end", on_tool_end)
        ids = {"session_id": "s1", "thread_id": "t1", "node_id": "n1", "tool_name": "search"}
        core.start_tool_wait(tenant, "p1", ToolWaitStart(**ids, predicted_duration_s=2.0))
        (wait,) = entry.tool_waits.values()
        assert wait.predicted_duration_s == pytest.approx(2.0 * scale)
        # The wait follows no finished call of its thread, so retention learns nothing of it.
        wait.honoured = True
        core.end_tool_wait(tenant, "p1", ToolWaitEnd(**ids, duration_s=1.5, ok=True))
        assert learned == [pytest.approx(1.5 * scale)]

        # A predicted wait is clamped in the core's seconds, after the conversion.
        clamp = core.max_predicted_wait_s()
        ids["node_id"] = "n2"
        long_wait = ToolWaitStart(**ids, predicted_duration_s=clamp / scale * 2)
        core.start_tool_wait(tenant, "p1", long_wait)
        assert entry.tool_waits[("t1", "n2")].predicted_duration_s == pytest.approx(clamp)


@SCALES
async def test_a_quotas_retry_after_is_in_wall_seconds(scale: float) -> None:
    clock = FakeClock(0.0)
    quotas = TenantQuotas(clock, time_scale=scale)
    tenant = Tenant("a", quota=TenantQuota(tokens_per_minute=600, over_quota="reject"))
    await quotas.enter(tenant)
    quotas.charge_tokens(tenant, 600 + 590)  # 590 tokens under: 60 s of the clock to refill
    quotas.leave(tenant)
    with pytest.raises(QuotaExceeded) as refused:
        await quotas.enter(tenant)
    assert refused.value.retry_after_s == max(1, round(60.0 / scale))


@pytest.mark.parametrize("stream", [False, True])
async def test_the_queue_time_header_is_in_wall_milliseconds(stream: bool) -> None:
    """At scale 10 a call queued ~0.3 wall seconds waited ~3 of the core's seconds; its
    ``X-Agentrt-Queue-Ms`` tells the client's 300, which its own clock can check: never more
    than the call took on it."""
    state = FakeState(gate=anyio.Event())
    answers: dict[str, tuple[httpx.Response, float]] = {}
    async with running(state, admission_window=1, policy="fcfs", time_scale=10.0) as svc:
        core = svc.app.core

        async def call(name: str) -> None:
            started = time.monotonic()
            response = await svc.chat(messages=[{"role": "user", "content": name}], stream=stream)
            answers[name] = (response, time.monotonic() - started)

        async with anyio.create_task_group() as group:
            group.start_soon(call, "first")
            while state.active < 1:  # noqa: ASYNC110 - polling a fake's counter
                await anyio.sleep(0.01)
            group.start_soon(call, "second")
            while core.calls.queued() < 1:  # noqa: ASYNC110 - until it is queued
                await anyio.sleep(0.01)
            await anyio.sleep(0.3)
            state.gate.set()  # type: ignore[union-attr]
    response, took_s = answers["second"]
    assert response.status_code == 200
    queue_ms = float(response.headers[HEADER_QUEUE_MS])
    assert 0.3 * 1000 <= queue_ms <= took_s * 1000
