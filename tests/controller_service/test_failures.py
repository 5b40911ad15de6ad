"""Bad input and failure: nothing a client sends crashes the service; backends that fail are
worked around; deadlines and disconnects free the queues."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from agentrt_controller.backends.api import BackendError, BackendRequest
from agentrt_controller.backends.fake import FakeBackend, FakeResponse
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller

from .conftest import chat_body, running
from .fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

CHAT = "/v1/chat/completions"
GOOD = json.dumps(chat_body()).encode()

BAD_INPUTS: list[tuple[str, str, str, bytes, dict[str, str], int]] = [
    # (case, method, path, body, headers, expected status)
    ("truncated json", "POST", CHAT, b'{"model":', {}, 400),
    ("json array", "POST", CHAT, b"[1, 2]", {}, 400),
    ("json string", "POST", CHAT, b'"hello"', {}, 400),
    ("empty body", "POST", CHAT, b"", {}, 400),
    ("invalid utf-8", "POST", CHAT, b'{"model": "\xff\xfe"}', {}, 400),
    ("deep nesting", "POST", CHAT, b"[" * 4000, {}, 400),
    ("model not a string", "POST", CHAT, b'{"model": 7}', {}, 400),
    ("stream not a bool", "POST", CHAT, b'{"model": "tiny", "stream": "yes"}', {}, 400),
    ("max_tokens a string", "POST", CHAT, b'{"model": "tiny", "max_tokens": "9"}', {}, 400),
    ("unknown model", "POST", CHAT, b'{"model": "gpt-9"}', {}, 404),
    ("bad program id", "POST", CHAT, GOOD, {"X-Agentrt-Program-Id": "a b"}, 400),
    (
        "bad attempt",
        "POST",
        CHAT,
        GOOD,
        {"X-Agentrt-Program-Id": "p", "X-Agentrt-Attempt": "x"},
        400,
    ),
    (
        "negative timeout",
        "POST",
        CHAT,
        GOOD,
        {"X-Agentrt-Program-Id": "p", "X-Agentrt-Timeout-Ms": "-5"},
        400,
    ),
    (
        "bad objective",
        "POST",
        CHAT,
        GOOD,
        {"X-Agentrt-Program-Id": "p", "X-Agentrt-Objective": "fast"},
        400,
    ),
    (
        "no time left",
        "POST",
        CHAT,
        GOOD,
        {"X-Agentrt-Program-Id": "p", "X-Agentrt-Timeout-Ms": "0"},
        504,
    ),
    ("too large", "POST", CHAT, b'{"model": "tiny", "pad": "' + b"x" * 5000 + b'"}', {}, 413),
    ("wrong method", "GET", CHAT, b"", {}, 405),
    ("event not json", "POST", "/agentrt/v1/programs/p/start", b"{", {}, 400),
    (
        "event extra field",
        "POST",
        "/agentrt/v1/programs/p/end",
        b'{"session_id": "s", "x": 1}',
        {},
        400,
    ),
    ("event bad id", "POST", "/agentrt/v1/programs/p%20q/end", b'{"session_id": "s"}', {}, 400),
    (
        "event unknown kind",
        "POST",
        "/agentrt/v1/programs/p/explode",
        b'{"session_id": "s"}',
        {},
        404,
    ),
    (
        "tool-start missing fields",
        "POST",
        "/agentrt/v1/programs/p/tool-start",
        b'{"session_id": "s"}',
        {},
        400,
    ),
    ("session bad id", "POST", "/agentrt/v1/sessions", b'{"session_id": "no spaces"}', {}, 400),
    ("programs bad limit", "GET", "/agentrt/v1/programs?limit=x", b"", {}, 400),
]


@pytest.mark.timeout(60)
async def test_a_table_of_bad_inputs_gets_clean_errors_and_the_service_lives_on() -> None:
    state = FakeState()
    async with running(state, max_body_bytes=4096) as svc:
        for case, method, path, body, headers, status in BAD_INPUTS:
            response = await svc.http.request(
                method,
                svc.url + path,
                content=body,
                headers={"content-type": "application/json", **headers},
            )
            assert response.status_code == status, (case, response.text)
            if status != 404 or path == CHAT:
                error = response.json()["error"]
                assert error["message"] and error["type"], case
        assert (await svc.chat()).status_code == 200
        health = await svc.http.get(svc.url + "/health")
    assert health.status_code == 200
    assert len(state.requests) == 1  # no bad input reached the backend


async def test_declared_oversized_body_is_refused_before_reading() -> None:
    async with running(FakeState(), max_body_bytes=1000) as svc:
        response = await svc.http.post(
            svc.url + CHAT, content=b"[]", headers={"content-length": "2"}
        )
        assert response.status_code == 400
        big = await svc.http.post(svc.url + CHAT, content=b"x" * 2000)
    assert big.status_code == 413


def _fake(name: str) -> FakeBackend:
    async def answer(request: BackendRequest) -> FakeResponse:
        return FakeResponse.json(
            {"id": name, "object": "chat.completion", "model": "fake-model",
             "choices": [{"index": 0, "message": {"role": "assistant", "content": name},
                          "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}}
        )  # fmt: skip

    return FakeBackend(name, answer)


def _config(**options: Any) -> ControllerConfig:
    return ControllerConfig(port=0, scrape_interval_s=30, **options)


async def test_unreachable_backend_is_skipped_and_the_call_retried_elsewhere() -> None:
    first, second = _fake("first"), _fake("second")
    apps: list[ControllerApp] = []
    async with (
        serve_controller(_config(), backends=[first, second], on_app=apps.append) as url,
        httpx.AsyncClient() as http,
    ):
        first.down = True  # after the start-up probe: the controller still thinks it is up
        answers = [
            (await http.post(url + CHAT, json={**chat_body(), "model": "fake-model"})).json()
            for _ in range(4)
        ]
        metrics = (await http.get(url + "/metrics")).text
    assert [a["id"] for a in answers] == ["second"] * 4
    assert apps[0].core.pool.states["first"].healthy is False
    assert 'agentrt_controller_retries_total{backend="first"} 1' in metrics
    assert apps[0].core.pool.states["second"].in_flight == 0


async def test_no_healthy_backend_is_503_with_retry_after() -> None:
    only = _fake("only")
    only.down = True
    async with (
        serve_controller(_config(retry_after_s=7), backends=[only]) as url,
        httpx.AsyncClient() as http,
    ):
        response = await http.post(url + CHAT, json={**chat_body(), "model": "x"})
        health = await http.get(url + "/health")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "7"
    assert response.json()["error"]["code"] == "no_backend"
    assert health.status_code == 503


async def test_backend_failing_mid_stream_ends_the_stream_with_an_error_event() -> None:
    class Broken(FakeResponse):
        async def aiter_bytes(self):  # type: ignore[no-untyped-def,override]
            yield b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n'
            raise BackendError("connection reset")

    async def answer(request: BackendRequest) -> FakeResponse:
        return Broken(headers={"content-type": "text/event-stream"})

    apps: list[ControllerApp] = []
    backend = FakeBackend("b", answer)
    async with (
        serve_controller(_config(), backends=[backend], on_app=apps.append) as url,
        httpx.AsyncClient() as http,
    ):
        body = {**chat_body(stream=True), "model": "fake-model"}
        response = await http.post(url + CHAT, json=body)
    assert response.status_code == 200
    events = [e for e in response.text.split("\n\n") if e]
    assert '"content": "a"' in events[0]
    assert json.loads(events[-1].removeprefix("data: "))["error"]["type"] == "upstream_error"
    assert apps[0].core.pool.states["b"].in_flight == 0


async def test_queued_call_past_its_deadline_gets_504_and_leaves_the_queue() -> None:
    state = FakeState(gate=anyio.Event())
    async with running(state, admission_window=1) as svc, anyio.create_task_group() as group:
        first: list[httpx.Response] = []

        async def blocker() -> None:
            first.append(await svc.chat())

        group.start_soon(blocker)
        while state.active < 1:  # noqa: ASYNC110 - polling a fake's counter
            await anyio.sleep(0.01)
        late = await svc.chat(headers={"X-Agentrt-Program-Id": "p", "X-Agentrt-Timeout-Ms": "150"})
        queues = (await svc.http.get(svc.url + "/agentrt/v1/queues")).json()
        state.gate.set()  # type: ignore[union-attr]
    assert late.status_code == 504
    assert late.json()["error"]["type"] == "timeout"
    assert queues["queued"] == 0
    assert first[0].status_code == 200
    assert len(state.requests) == 1  # the late call never reached the backend


async def test_client_leaving_a_queued_call_removes_it() -> None:
    state = FakeState(gate=anyio.Event())
    async with running(state, admission_window=1) as svc:
        async with anyio.create_task_group() as group:
            group.start_soon(svc.chat)
            while state.active < 1:  # noqa: ASYNC110
                await anyio.sleep(0.01)
            impatient_scope = anyio.CancelScope()

            async def impatient() -> None:
                with impatient_scope:
                    async with httpx.AsyncClient() as client:
                        await client.post(svc.url + CHAT, json=chat_body())

            group.start_soon(impatient)
            while svc.app.core.calls.queued() < 1:  # noqa: ASYNC110 - until it is queued
                await anyio.sleep(0.01)
            impatient_scope.cancel()  # the client gives up: its connection closes
            for _ in range(1000):
                queues = (await svc.http.get(svc.url + "/agentrt/v1/queues")).json()
                if queues["queued"] == 0:
                    break
                await anyio.sleep(0.02)
            state.gate.set()  # type: ignore[union-attr]
        metrics = (await svc.http.get(svc.url + "/metrics")).text
    assert queues["queued"] == 0
    assert len(state.requests) == 1
    assert "agentrt_controller_client_disconnects_total 1" in metrics


async def test_client_leaving_a_stream_aborts_the_upstream_request() -> None:
    state = FakeState(tokens=200, chunk_delay_s=0.02)
    async with running(state) as svc:
        async with svc.http.stream("POST", svc.url + CHAT, json=chat_body(stream=True)) as r:
            seen = 0
            async for _ in r.aiter_lines():
                seen += 1
                if seen >= 3:
                    break
        for _ in range(1000):
            if state.aborted:
                break
            await anyio.sleep(0.02)
        in_flight = svc.app.core.pool.states
    assert state.aborted == 1
    assert all(s.in_flight == 0 for s in in_flight.values())


async def test_admitted_call_past_its_deadline_is_aborted_upstream_with_504() -> None:
    state = FakeState(tokens=100, chunk_delay_s=0.05, delay_s=2.0)
    async with running(state) as svc:
        headers = {"X-Agentrt-Program-Id": "p", "X-Agentrt-Timeout-Ms": "200"}
        whole = await svc.chat(headers=headers)
        streamed = await svc.chat(headers=headers, stream=True)
        for _ in range(500):
            if state.aborted and all(s.in_flight == 0 for s in svc.app.core.pool.states.values()):
                break
            await anyio.sleep(0.02)
    assert whole.status_code == 504
    assert streamed.status_code == 200  # the stream had started: it ends with an error event
    last = [e for e in streamed.text.split("\n\n") if e][-1]
    assert json.loads(last.removeprefix("data: "))["error"]["type"] == "timeout"
    assert state.aborted == 1


async def test_a_failing_dispatch_round_is_logged_and_the_loop_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with running(FakeState()) as svc:
        dispatcher = svc.app.core.dispatcher
        real_admit = dispatcher.admit
        failures = [1]

        def flaky_admit(now_s: float, backends: Any) -> Any:
            if failures:
                failures.pop()
                raise RuntimeError("policy bug")
            return real_admit(now_s, backends)

        monkeypatch.setattr(dispatcher, "admit", flaky_admit)
        async with anyio.create_task_group() as group:
            answers: list[httpx.Response] = []

            async def call() -> None:
                answers.append(await svc.chat())

            group.start_soon(call)
            while failures:  # noqa: ASYNC110 - wait for the failing round
                await anyio.sleep(0.01)
            svc.app.core.wake()  # the next arrival, finish or scrape would do the same
        metrics = (await svc.http.get(svc.url + "/metrics")).text
    assert answers[0].status_code == 200
    assert "agentrt_controller_internal_errors_total 1" in metrics


async def test_full_queues_answer_503_overloaded() -> None:
    state = FakeState(gate=anyio.Event())
    async with (
        running(state, admission_window=1, max_queued_calls=1) as svc,
        anyio.create_task_group() as group,
    ):
        group.start_soon(svc.chat)  # admitted, held by the gate
        while state.active < 1:  # noqa: ASYNC110
            await anyio.sleep(0.01)
        group.start_soon(svc.chat)  # queued
        while svc.app.core.calls.queued() < 1:  # noqa: ASYNC110
            await anyio.sleep(0.01)
        refused = await svc.chat()
        state.gate.set()  # type: ignore[union-attr]
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "overloaded"
    assert refused.headers["retry-after"] == "1"
