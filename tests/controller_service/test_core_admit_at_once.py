"""A call that finds nothing queued is admitted at its arrival (``CallQueue.submit``), by the
same admission round the dispatch loop would run — without waking the loop or making an event
to wait on; a call behind a queued one, or one past its deadline, is left to the loop as
before. On a fake clock, through the facade as the HTTP layer calls it."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest

from agentrt_controller.backends.api import BackendRequest
from agentrt_controller.backends.fake import FakeBackend, FakeResponse
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core.calls import PendingCall
from agentrt_controller.service.core.clock import FakeClock
from agentrt_controller.service.core.facade import ControllerCore
from agentrt_controller.service.core.tenants import DEFAULT_TENANT, TenantDirectory
from agentrt_controller.service.errors import DeadlinePassed
from agentrt_controller.service.http.incoming import parse_call

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def _answer(request: BackendRequest) -> FakeResponse:
    return FakeResponse.json({"choices": [{"message": {"content": "ok"}}]})


@asynccontextmanager
async def _core(clock: FakeClock) -> AsyncIterator[ControllerCore]:
    """A running core with one fake backend and an admission window of one call."""
    config = ControllerConfig(
        policy="plas", admission_window=1, scrape_interval_s=3600.0, retention="off"
    )
    backend = FakeBackend("b0", _answer)
    core = ControllerCore(config, [backend], clock=clock, tenants=TenantDirectory.open_mode())
    async with anyio.create_task_group() as group:
        await group.start(core.run)
        for _ in range(20):  # let the dispatch loop reach its wait
            await anyio.lowlevel.checkpoint()
        yield core
        group.cancel_scope.cancel()
    await core.aclose()


def _pending(core: ControllerCore, call_id: str, *, timeout_ms: int | None = None) -> PendingCall:
    headers = {"x-agentrt-timeout-ms": str(timeout_ms)} if timeout_ms is not None else {}
    body = {"model": "fake-model", "messages": [{"role": "user", "content": call_id}]}
    parsed = parse_call(
        json.dumps(body).encode(),
        headers,
        call_id,
        core.now(),
        core.known_models(),
        tenant=DEFAULT_TENANT,
    )
    return core.accept(parsed.call, parsed.body, tagged=False)


async def test_a_call_finding_nothing_queued_is_admitted_at_its_arrival() -> None:
    async with _core(FakeClock(10.0)) as core:
        first = _pending(core, "first")
        core.calls.submit(first)
        # Decided inside submit: admitted, no event made, the dispatch loop not woken.
        assert first.admission is not None and first.admission.backend_id == "b0"
        assert first.waiter is None and not core._wake_event.is_set()
        assert core.calls.queued() == 0
        assert await core.calls.admitted(first) is first.admission

        # The window (one call) is full: the next call is queued and waits for the loop.
        second = _pending(core, "second")
        core.calls.submit(second)
        assert second.admission is None and core.calls.queued() == 1

        async def wait_second() -> None:
            await core.calls.admitted(second)

        async with anyio.create_task_group() as group:
            group.start_soon(wait_second)
            for _ in range(5):
                await anyio.lowlevel.checkpoint()
            assert second.waiter is not None and not second.waiter.is_set()
            # The first call's finish wakes the loop (a call is queued): it admits the second.
            core.calls.finish(first.admission.call, "b0", 0.1, ok=True)
        assert second.admission is not None and core.calls.queued() == 0
        core.calls.finish(second.admission.call, "b0", 0.1, ok=True)


async def test_a_finish_with_nothing_queued_does_not_wake_the_loop() -> None:
    async with _core(FakeClock(10.0)) as core:
        only = _pending(core, "only")
        core.calls.submit(only)
        assert only.admission is not None
        core.calls.finish(only.admission.call, "b0", 0.1, ok=True)
        assert not core._wake_event.is_set()  # no round: nothing is queued
        again = _pending(core, "again")
        core.calls.submit(again)  # the slot is free again: admitted at once
        assert again.admission is not None
        core.calls.finish(again.admission.call, "b0", 0.1, ok=True)


async def test_a_call_past_its_deadline_at_arrival_is_left_to_the_loop() -> None:
    clock = FakeClock(10.0)
    async with _core(clock) as core:
        late = _pending(core, "late", timeout_ms=1)
        assert late.call.deadline_s < math.inf
        clock.advance(1.0)  # its deadline passed before it was submitted
        core.calls.submit(late)
        assert late.admission is None  # not admitted at once: the loop drops it
        with anyio.fail_after(5), pytest.raises(DeadlinePassed):
            await core.calls.admitted(late)
        assert core.calls.queued() == 0
