"""``X-Agentrt-Timeout-Ms`` holds whether or not the call names a program (docs/protocol.md,
"Deadlines"): a bad value is refused with 400 naming the header, 0 is 504 at once, and a
deadline that passes while the call is queued or running ends it with 504, over real HTTP."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from .conftest import running
from .fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

TIMEOUT = "X-Agentrt-Timeout-Ms"
TAGGED = {"X-Agentrt-Program-Id": "p"}


@pytest.mark.parametrize("tags", [{}, TAGGED], ids=["untagged", "tagged"])
@pytest.mark.parametrize("value", ["-5", "soon", "1.5", "9" * 30 + "x"])
async def test_a_bad_timeout_is_refused_with_400_naming_the_header(
    tags: dict[str, str], value: str
) -> None:
    state = FakeState()
    async with running(state) as svc:
        response = await svc.chat(headers={**tags, TIMEOUT: value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == TIMEOUT.lower()
    assert TIMEOUT in error["message"]
    assert state.requests == []  # nothing reached the backend


@pytest.mark.parametrize("tags", [{}, TAGGED], ids=["untagged", "tagged"])
async def test_no_time_left_is_504_at_once(tags: dict[str, str]) -> None:
    state = FakeState()
    async with running(state) as svc:
        response = await svc.chat(headers={**tags, TIMEOUT: "0"})
    assert response.status_code == 504
    assert response.json()["error"]["type"] == "timeout"
    assert state.requests == []


async def test_an_untagged_stream_past_its_deadline_is_aborted_upstream() -> None:
    state = FakeState(tokens=100, chunk_delay_s=0.05)
    async with running(state) as svc:
        streamed = await svc.chat(headers={TIMEOUT: "300"}, stream=True)
        for _ in range(500):
            if state.aborted and all(s.in_flight == 0 for s in svc.app.core.pool.states.values()):
                break
            await anyio.sleep(0.02)
    assert streamed.status_code == 200  # the stream had started: it ends with an error event
    last = [e for e in streamed.text.split("\n\n") if e][-1]
    assert json.loads(last.removeprefix("data: "))["error"]["type"] == "timeout"
    assert state.aborted == 1  # the upstream stream was cut, not read to its end


async def test_one_millisecond_without_a_program_id_is_504_not_an_answer() -> None:
    state = FakeState(delay_s=0.5)  # the answer takes 500 ms
    async with running(state) as svc:
        response = await svc.chat(headers={TIMEOUT: "1"})
    assert response.status_code == 504
    assert response.json()["error"]["type"] == "timeout"


async def test_an_untagged_queued_call_past_its_deadline_leaves_the_queue() -> None:
    state = FakeState(gate=anyio.Event())
    async with running(state, admission_window=1) as svc, anyio.create_task_group() as group:
        first: list[httpx.Response] = []

        async def blocker() -> None:
            first.append(await svc.chat())

        group.start_soon(blocker)
        while state.active < 1:  # noqa: ASYNC110 - polling a fake's counter
            await anyio.sleep(0.01)
        late = await svc.chat(headers={TIMEOUT: "150"})
        queues = (await svc.http.get(svc.url + "/agentrt/v1/queues")).json()
        state.gate.set()  # type: ignore[union-attr]
    assert late.status_code == 504
    assert queues["queued"] == 0
    assert first[0].status_code == 200
    assert len(state.requests) == 1  # the late call never reached the backend


async def test_an_untagged_call_within_its_deadline_is_answered() -> None:
    state = FakeState()
    async with running(state) as svc:
        response = await svc.chat(headers={TIMEOUT: "20000"})
    assert response.status_code == 200
    assert len(state.requests) == 1
