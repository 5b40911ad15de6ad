"""An untagged call's one-call program ends without retention's fan-out while nothing is
retained anywhere (``RetentionDriver.retains()``), and through it while something is: the
program leaves the process table either way. On a fake clock, through the facade as the HTTP
layer calls it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest

from agentrt_controller.backends.api import BackendRequest
from agentrt_controller.backends.fake import FakeBackend, FakeResponse
from agentrt_controller.keys import ProgramKey
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core.calls import PendingCall
from agentrt_controller.service.core.clock import FakeClock
from agentrt_controller.service.core.facade import ControllerCore
from agentrt_controller.service.core.tenants import DEFAULT_TENANT, TenantDirectory
from agentrt_controller.service.http.incoming import parse_call

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def _answer(request: BackendRequest) -> FakeResponse:
    return FakeResponse.json({"choices": [{"message": {"content": "ok"}}]})


@asynccontextmanager
async def _core() -> AsyncIterator[ControllerCore]:
    """A running core with one fake backend and retention on."""
    config = ControllerConfig(policy="plas", scrape_interval_s=3600.0, retention="on")
    core = ControllerCore(
        config,
        [FakeBackend("b0", _answer)],
        clock=FakeClock(10.0),
        tenants=TenantDirectory.open_mode(),
    )
    async with anyio.create_task_group() as group:
        await group.start(core.run)
        for _ in range(20):
            await anyio.lowlevel.checkpoint()
        yield core
        group.cancel_scope.cancel()
    await core.aclose()


def _untagged(core: ControllerCore, call_id: str) -> PendingCall:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": call_id}]}
    parsed = parse_call(
        json.dumps(body).encode(), {}, call_id, core.now(), core.known_models(),
        tenant=DEFAULT_TENANT,
    )  # fmt: skip
    return core.accept(parsed.call, parsed.body, tagged=False)


async def _run_one_call(core: ControllerCore, call_id: str) -> ProgramKey:
    pending = _untagged(core, call_id)
    core.calls.submit(pending)
    admission = await core.calls.admitted(pending)
    assert pending.call.program in core.dispatcher.table
    core.calls.finish(admission.call, admission.backend_id, 0.1, ok=True)
    core.call_ended(pending)
    return pending.call.program


async def test_nothing_retained_the_one_call_program_ends_without_retention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with _core() as core:
        retention = core.retention
        assert retention is not None
        told: list[ProgramKey] = []
        monkeypatch.setattr(retention, "on_program_end", told.append)
        key = await _run_one_call(core, "c1")
        assert not retention.driver.retains()
        assert key not in core.dispatcher.table  # it ended all the same
        assert told == []


async def test_something_retained_the_one_call_program_end_reaches_retention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with _core() as core:
        retention = core.retention
        assert retention is not None
        told: list[ProgramKey] = []
        monkeypatch.setattr(retention, "on_program_end", told.append)
        monkeypatch.setattr(retention.driver, "retains", lambda: True)
        key = await _run_one_call(core, "c2")
        assert key not in core.dispatcher.table
        assert told == [key]
