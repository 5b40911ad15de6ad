"""Over real HTTP, on both server paths: a call at an idle controller is admitted in its own
task, and once the admission window is full the calls that queue behind it are admitted by
the dispatch loop in the policy's order (FCFS here), each when the one before it finished;
no call is left counted in flight (docs/controller.md, "Performance notes")."""

from __future__ import annotations

import anyio
import httpx
import pytest

from .conftest import running
from .fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.mark.parametrize("http_path", ["direct", "asgi"])
async def test_calls_queued_behind_a_full_window_are_admitted_in_arrival_order(
    http_path: str,
) -> None:
    state = FakeState(gate=anyio.Event())
    answers: dict[str, httpx.Response] = {}
    async with running(state, admission_window=1, policy="fcfs", http_path=http_path) as svc:
        core = svc.app.core

        async def call(name: str) -> None:
            body = {"messages": [{"role": "user", "content": name}]}
            answers[name] = await svc.chat(**body)

        async with anyio.create_task_group() as group:
            group.start_soon(call, "first")  # an idle controller: admitted at once
            while state.active < 1:  # noqa: ASYNC110 - polling a fake's counter
                await anyio.sleep(0.01)
            assert core.calls.queued() == 0 and core.pool.calls_in_flight == 1
            for queued, name in enumerate(["second", "third", "fourth"], start=1):
                group.start_soon(call, name)
                while core.calls.queued() < queued:  # noqa: ASYNC110 - until it is queued
                    await anyio.sleep(0.01)
            assert state.active == 1  # the window holds one call: the others wait
            state.gate.set()  # type: ignore[union-attr]
        assert core.calls.queued() == 0 and core.pool.calls_in_flight == 0
        again = await svc.chat(messages=[{"role": "user", "content": "fifth"}])  # idle again
        assert core.pool.calls_in_flight == 0
    assert all(answer.status_code == 200 for answer in answers.values()), answers
    assert again.status_code == 200
    received = [request["messages"][-1]["content"] for request in state.requests]
    assert received == ["first", "second", "third", "fourth", "fifth"]
