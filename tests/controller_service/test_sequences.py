"""Sequences, not calls: a call's ``n`` (``best_of``) over real HTTP on loopback.

A call with ``n`` = 8 holds 8 slots of the admission window and of its tenant's
``max_in_flight``; an ``n`` above the cap (``max_sequences_per_call``, else the batch size a
backend reports) is refused with 400 naming the cap (docs/controller.md, "Sequences, not
calls"; docs/security.md, "Sequences per call").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt_controller.service.core.tenants import hash_key
from tests.controller_service.conftest import chat_body, controller, fake_backends
from tests.controller_service.fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ALICE = {"authorization": "Bearer key-alice-0001"}
#: A backend that reports its batch size, as the emulator does.
BATCH_16 = (
    "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nagentrt_engine_max_num_seqs 16\n"
)


async def _wait_active(state: FakeState, count: int) -> None:
    with anyio.fail_after(10):
        while state.active < count:  # noqa: ASYNC110 (the fake server offers no event)
            await anyio.sleep(0.01)


@pytest.mark.parametrize(
    ("options", "body", "cap"),
    [
        ({}, {"n": 17}, 16),  # the backend's batch
        ({"max_sequences_per_call": 4}, {"n": 5}, 4),  # the option overrides it
    ],
)
async def test_n_above_the_cap_is_refused_naming_the_cap(
    options: dict[str, Any], body: dict[str, Any], cap: int
) -> None:
    state = FakeState(metrics_text=BATCH_16)
    async with (
        fake_backends(state) as urls,
        controller(urls, **options) as (url, app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        refused = await http.post(url + "/v1/chat/completions", json=chat_body(**body))
        at_cap = await http.post(url + "/v1/chat/completions", json=chat_body(n=cap))
        assert app.core.calls.sequence_cap() == cap
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["param"] == "n"
    assert f"cap is {cap} per call" in error["message"]
    assert at_cap.status_code == 200
    assert len(state.requests) == 1  # the refused call never reached the backend


async def test_best_of_counts_for_completions_and_bad_n_is_a_400() -> None:
    state = FakeState(metrics_text=BATCH_16)
    async with (
        fake_backends(state) as urls,
        controller(urls) as (url, _app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        completion = {"model": "tiny", "prompt": "hello", "n": 2, "best_of": 32}
        best_of = await http.post(url + "/v1/completions", json=completion)
        bad = [
            await http.post(url + "/v1/chat/completions", json=chat_body(n=value))
            for value in (0, -3, "8", True, 2.5)
        ]
    assert best_of.status_code == 400
    assert "32 sequences" in best_of.json()["error"]["message"]
    assert [b.status_code for b in bad] == [400] * 5
    assert {b.json()["error"]["param"] for b in bad} == {"n"}
    assert state.requests == []


async def test_a_call_with_n_8_fills_a_window_of_8_and_the_next_waits() -> None:
    state = FakeState(gate=anyio.Event())
    async with (
        fake_backends(state) as urls,
        controller(urls, admission_window=8) as (url, app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        answers: dict[str, httpx.Response] = {}

        async def call(name: str, n: int) -> None:
            body = chat_body(n=n)
            answers[name] = await http.post(url + "/v1/chat/completions", json=body)

        async with anyio.create_task_group() as group:
            group.start_soon(call, "eight", 8)
            await _wait_active(state, 1)
            group.start_soon(call, "one", 1)
            with anyio.fail_after(10):
                while app.core.calls.queued() < 1:  # noqa: ASYNC110 (no event to wait on)
                    await anyio.sleep(0.01)
            await anyio.sleep(0.2)  # a few dispatch rounds: the window stays full
            backend = next(iter(app.core.pool.states.values()))
            assert (state.active, app.core.calls.queued()) == (1, 1)
            assert (backend.in_flight, backend.sequences_in_flight) == (1, 8)
            assert state.gate is not None
            state.gate.set()
    assert [answers[n].status_code for n in ("eight", "one")] == [200, 200]


async def test_a_call_larger_than_the_window_runs_alone_when_the_backend_is_idle() -> None:
    state = FakeState(gate=anyio.Event())
    async with (
        fake_backends(state) as urls,
        controller(urls, admission_window=4) as (url, app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        answers: dict[str, httpx.Response] = {}

        async def call(name: str, n: int) -> None:
            answers[name] = await http.post(url + "/v1/chat/completions", json=chat_body(n=n))

        async with anyio.create_task_group() as group:
            group.start_soon(call, "one", 1)
            await _wait_active(state, 1)
            group.start_soon(call, "eight", 8)  # 1 + 8 > 4: waits for the backend to be idle
            group.start_soon(call, "two", 2)  # behind it: does not overtake it
            with anyio.fail_after(10):
                while app.core.calls.queued() < 2:  # noqa: ASYNC110 (no event to wait on)
                    await anyio.sleep(0.01)
            await anyio.sleep(0.2)
            assert state.active == 1
            assert state.gate is not None
            state.gate.set()
    assert {name: a.status_code for name, a in answers.items()} == {
        "one": 200, "eight": 200, "two": 200,
    }  # fmt: skip
    order = [r.get("n", 1) for r in state.requests]
    assert order == [1, 8, 2]


async def test_a_tenants_max_in_flight_counts_sequences(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(
        f'[tenants.alice]\nkeys = ["{hash_key("key-alice-0001")}"]\nmax_in_flight = 8\n',
        encoding="utf-8",
    )
    state = FakeState(gate=anyio.Event())
    async with (
        fake_backends(state) as urls,
        controller(urls, api_key_file=str(path)) as (url, app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        answers: dict[str, httpx.Response] = {}

        async def call(name: str, n: int) -> None:
            answers[name] = await http.post(url + "/v1/chat/completions",
                                            json=chat_body(n=n), headers=ALICE)  # fmt: skip

        async with anyio.create_task_group() as group:
            group.start_soon(call, "six", 6)
            await _wait_active(state, 1)
            await call("three", 3)  # 6 + 3 > 8: over quota at once
            await call("nine", 9)  # more than the quota can ever hold
            group.start_soon(call, "two", 2)  # 6 + 2 = 8: enters
            await _wait_active(state, 2)
            tenant = app.core.tenants.tenants["alice"]
            assert app.core.quotas.in_flight(tenant) == 8
            assert state.gate is not None
            state.gate.set()
        assert app.core.quotas.in_flight(tenant) == 0
    assert answers["three"].status_code == 429
    assert answers["three"].json()["error"]["code"] == "in_flight_quota"
    assert "6 sequences in flight" in answers["three"].json()["error"]["message"]
    assert answers["nine"].status_code == 400
    assert answers["nine"].json()["error"]["param"] == "n"
    assert "max_in_flight quota is 8" in answers["nine"].json()["error"]["message"]
    assert answers["six"].status_code == answers["two"].status_code == 200
