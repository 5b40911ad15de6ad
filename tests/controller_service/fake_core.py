"""A running :class:`ControllerCore` on a fake clock with one fake backend, and untagged calls
accepted as the HTTP layer accepts them, for the tests that drive the facade directly
(``test_core_wake.py``, ``test_core_one_call_end.py``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel

from agentrt_controller.backends.api import BackendRequest
from agentrt_controller.backends.fake import FakeBackend, FakeResponse
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core.calls import PendingCall
from agentrt_controller.service.core.clock import FakeClock
from agentrt_controller.service.core.facade import ControllerCore
from agentrt_controller.service.core.tenants import DEFAULT_TENANT, TenantDirectory
from agentrt_controller.service.http.incoming import parse_call


async def _answer(request: BackendRequest) -> FakeResponse:
    return FakeResponse.json({"choices": [{"message": {"content": "ok"}}]})


async def settle() -> None:
    """Let the core's tasks run until they wait (20 turns of the loop)."""
    for _ in range(20):
        await anyio.lowlevel.checkpoint()


@asynccontextmanager
async def running_core(config: ControllerConfig) -> AsyncIterator[ControllerCore]:
    """A core of ``config`` with one fake backend ``b0`` answering at once, running (its
    dispatch loop at its wait) while the block runs; open tenancy, a fake clock at 10 s."""
    core = ControllerCore(
        config,
        [FakeBackend("b0", _answer)],
        clock=FakeClock(10.0),
        tenants=TenantDirectory.open_mode(),
    )
    async with anyio.create_task_group() as group:
        await group.start(core.run)
        await settle()
        yield core
        group.cancel_scope.cancel()
    await core.aclose()


def untagged(core: ControllerCore, call_id: str) -> PendingCall:
    """An untagged call (a program of its own) whose one message is ``call_id``, accepted."""
    body = {"model": "fake-model", "messages": [{"role": "user", "content": call_id}]}
    parsed = parse_call(
        json.dumps(body).encode(), {}, call_id, core.now(), core.known_models(),
        tenant=DEFAULT_TENANT,
    )  # fmt: skip
    return core.accept(parsed.call, parsed.body, tagged=False)
