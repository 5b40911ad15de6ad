"""Adding and removing backends while the controller runs; the circuit breaker in service."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from agentrt_controller.backends.api import BackendRequest
from agentrt_controller.backends.fake import FakeBackend, FakeResponse
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller

from .fake_vllm import FakeVllm, build_app
from .servers import serve_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

CHAT = "/v1/chat/completions"
ADMIN = "/agentrt/v1/backends"


def _body(stream: bool = False) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": stream}


@asynccontextmanager
async def _running(
    urls: list[str], **options: Any
) -> AsyncIterator[tuple[str, ControllerApp, httpx.AsyncClient]]:
    apps: list[ControllerApp] = []
    options.setdefault("scrape_interval_s", 0.2)
    # These tests count calls per backend: spread them (the default router is prefix-aware).
    options.setdefault("router", "round_robin")
    backends = tuple(BackendSpec(u, backend_id=f"b{i}") for i, u in enumerate(urls))
    config = ControllerConfig(port=0, backends=backends, **options)
    async with (
        serve_controller(config, on_app=apps.append) as url,
        httpx.AsyncClient(base_url=url, timeout=20) as http,
    ):
        yield url, apps[0], http


async def test_removal_drains_in_flight_calls_while_new_calls_go_to_an_added_backend() -> None:
    slow = FakeVllm(name="slow", tokens=20, chunk_delay_s=0.05)
    quick = FakeVllm(name="quick")
    async with (
        serve_app(build_app(slow)) as slow_url,
        serve_app(build_app(quick)) as quick_url,
        _running([slow_url]) as (_, app, http),
    ):
        pool = app.core.pool
        streamed: list[httpx.Response] = []

        async def stream_call() -> None:
            streamed.append(await http.post(CHAT, json=_body(stream=True)))

        async with anyio.create_task_group() as group:
            group.start_soon(stream_call)
            with anyio.fail_after(5):
                while pool.states["b0"].in_flight < 1:  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            added = await http.post(ADMIN, json={"url": quick_url, "id": "q"})
            removed = await http.delete(ADMIN + "/b0")
            during = [(await http.post(CHAT, json=_body())).json()["id"] for _ in range(3)]
            listing_during = (await http.get(ADMIN)).json()["backends"]
        with anyio.fail_after(5):
            while "b0" in pool.states:  # noqa: ASYNC110 - dropped with its last call
                await anyio.sleep(0.01)
        listing_after = (await http.get(ADMIN)).json()["backends"]
        metrics = (await http.get("/metrics")).text
        after = (await http.post(CHAT, json=_body())).json()["id"]
    assert added.status_code == 201 and added.json()["backend"]["state"] == "up"
    assert removed.status_code == 202 and removed.json()["backend"]["state"] == "draining"
    assert during == ["chatcmpl-quick"] * 3
    assert {b["backend_id"]: b["state"] for b in listing_during} == {"b0": "draining", "q": "up"}
    # The in-flight stream on the removed backend finished normally.
    events = [e for e in streamed[0].text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert sum('"content": "x"' in e for e in events) == 20
    assert [b["backend_id"] for b in listing_after] == ["q"]
    # Gauges forget a removed backend (counters keep its history).
    assert 'agentrt_controller_backend_up{backend="b0"}' not in metrics
    assert 'agentrt_controller_in_flight_calls{backend="b0"}' not in metrics
    assert 'agentrt_controller_backend_up{backend="q"} 1' in metrics
    assert after == "chatcmpl-quick"


async def test_admin_api_rejects_bad_requests() -> None:
    quick = FakeVllm(name="quick")
    async with serve_app(build_app(quick)) as quick_url, _running([quick_url]) as (_, app, http):
        answers = {
            "bad url": await http.post(ADMIN, json={"url": "ftp://x"}),
            "unknown kind": await http.post(ADMIN, json={"url": quick_url, "kind": "tgi"}),
            "unknown option": await http.post(ADMIN, json={"spec": f"{quick_url},colour=red"}),
            "unknown key": await http.post(ADMIN, json={"url": quick_url, "weight": 2}),
            "not an object": await http.post(ADMIN, content=b"[1]"),
            "not json": await http.post(ADMIN, content=b"{"),
            "duplicate id": await http.post(ADMIN, json={"url": quick_url, "id": "b0"}),
            "unknown id": await http.delete(ADMIN + "/nope"),
        }
        alive = await http.post(CHAT, json=_body())
        assert list(app.core.pool.states) == ["b0"]
    expected = {
        "bad url": 400, "unknown kind": 400, "unknown option": 400, "unknown key": 400,
        "not an object": 400, "not json": 400, "duplicate id": 409, "unknown id": 404,
    }  # fmt: skip
    assert {name: r.status_code for name, r in answers.items()} == expected
    for response in answers.values():
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert alive.status_code == 200


async def test_removing_an_idle_backend_drops_it_at_once_and_a_new_one_is_probed() -> None:
    quick = FakeVllm(name="quick")
    async with serve_app(build_app(quick)) as quick_url, _running([quick_url]) as (_, app, http):
        # A backend that is down when added is listed as such and gets no calls.
        dead = await http.post(ADMIN, json={"spec": "http://127.0.0.1:9,id=dead"})
        removed = await http.delete(ADMIN + "/dead")
        answer = await http.post(CHAT, json=_body())
    assert dead.status_code == 201
    assert dead.json()["backend"]["state"] in ("open", "down")
    assert dead.json()["backend"]["healthy"] is False
    assert removed.status_code == 200 and removed.json() == {"backend_id": "dead", "removed": True}
    assert answer.json()["id"] == "chatcmpl-quick"
    assert "dead" not in app.core.pool.states


async def test_admin_token_guards_changes_and_the_listing() -> None:
    quick = FakeVllm(name="quick")
    async with (
        serve_app(build_app(quick)) as quick_url,
        _running([quick_url], admin_token="s3cret-token") as (_, _app, http),
    ):
        spec = {"url": quick_url, "id": "second"}
        missing = await http.post(ADMIN, json=spec)
        wrong = await http.post(ADMIN, json=spec, headers={"authorization": "Bearer nope"})
        right = await http.post(ADMIN, json=spec, headers={"authorization": "Bearer s3cret-token"})
        delete = await http.delete(ADMIN + "/second")
        unlisted = await http.get(ADMIN)  # backend URLs are the admin's
        listing = await http.get(ADMIN, headers={"authorization": "Bearer s3cret-token"})
    assert (missing.status_code, wrong.status_code, right.status_code) == (403, 403, 201)
    assert delete.status_code == 403
    assert missing.json()["error"]["type"] == "permission_error"
    assert unlisted.status_code == 403
    assert len(listing.json()["backends"]) == 2


async def test_without_a_token_only_loopback_clients_may_change_backends() -> None:
    backend = FakeBackend("f", _ok)
    app = ControllerApp(ControllerConfig(port=0), backends=[backend])
    transport = httpx.ASGITransport(app=app, client=("10.1.2.3", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://controller") as http:
        post = await http.post(ADMIN, json={"url": "http://127.0.0.1:1"})
        delete = await http.delete(ADMIN + "/f")
    assert (post.status_code, delete.status_code) == (403, 403)
    assert "f" in app.core.pool.states


async def _ok(request: BackendRequest) -> FakeResponse:
    return FakeResponse.json({"id": "ok", "choices": [], "usage": {"prompt_tokens": 1}})


async def test_a_backend_answering_5xx_is_cut_off_then_probed_back_in() -> None:
    broken = {"on": True}

    async def flaky(request: BackendRequest) -> FakeResponse:
        if broken["on"]:
            return FakeResponse.json({"error": {"message": "engine dead"}}, status_code=500)
        return FakeResponse.json({"id": "flaky", "choices": [], "usage": {}})

    async def steady(request: BackendRequest) -> FakeResponse:
        return FakeResponse.json({"id": "steady", "choices": [], "usage": {}})

    apps: list[ControllerApp] = []
    config = ControllerConfig(
        port=0,
        scrape_interval_s=0.1,
        router="round_robin",  # the assertions count calls per backend
        breaker={"failure_threshold": 2, "cooldown_s": 0.3, "min_calls": 5},
    )
    backends = [FakeBackend("flaky", flaky), FakeBackend("steady", steady)]
    body = {**_body(), "model": "fake-model"}
    async with (
        serve_controller(config, backends=backends, on_app=apps.append) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):
        first = [await http.post(CHAT, json=body) for _ in range(6)]
        state = apps[0].core.pool.states["flaky"]
        opened = state.status()
        broken["on"] = False
        with anyio.fail_after(5):
            while not state.healthy:  # noqa: ASYNC110 - cool-down, then a trial probe
                await anyio.sleep(0.02)
        later = [(await http.post(CHAT, json=body)).json()["id"] for _ in range(4)]
        listing = (await http.get(ADMIN)).json()["backends"]
    ids = [r.json().get("id", "5xx") for r in first]
    # Round robin: flaky fails twice (each call retried on steady: no 5xx reaches the
    # caller), then is cut off.
    assert ids == ["steady"] * 6
    assert opened == "open"
    assert "flaky" in later and "steady" in later
    circuit = {b["backend_id"]: b["circuit"] for b in listing}["flaky"]
    assert circuit["state"] == "closed" and circuit["opened_total"] == 1
    assert json.dumps(listing)  # plain JSON


async def test_a_backend_that_starts_after_the_controller_joins_after_its_cool_down() -> None:
    late = FakeVllm(name="late")
    with socket.socket() as sock:  # a port nothing listens on yet
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    quick = FakeVllm(name="quick")
    async with serve_app(build_app(quick)) as quick_url:
        urls = [quick_url, f"http://127.0.0.1:{port}"]
        async with _running(urls, scrape_interval_s=0.1, breaker={"cooldown_s": 0.2}) as (
            _, app, http,
        ):  # fmt: skip
            state = app.core.pool.states["b1"]
            assert state.status() == "open" and not state.healthy
            async with serve_app(build_app(late), port=port):
                with anyio.fail_after(5):
                    while not state.healthy:  # noqa: ASYNC110 - cool-down, then a trial probe
                        await anyio.sleep(0.02)
                ids = {(await http.post(CHAT, json=_body())).json()["id"] for _ in range(4)}
    assert ids == {"chatcmpl-quick", "chatcmpl-late"}


async def test_a_recovered_backend_reads_up_only_once_it_takes_calls_again() -> None:
    # After the trial probe closes its circuit, the pool reads the backend's load and models
    # again before routing to it; meanwhile it must not read "up" (a client or operator
    # waiting for "up" would send calls that all go elsewhere).
    late = FakeVllm(name="late", metrics_delay_s=0.6)
    with socket.socket() as sock:  # a port nothing listens on yet
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with serve_app(build_app(FakeVllm(name="quick"))) as quick_url:
        urls = [quick_url, f"http://127.0.0.1:{port}"]
        async with _running(urls, scrape_interval_s=0.1, breaker={"cooldown_s": 0.2}) as (
            _, app, http,
        ):  # fmt: skip
            state = app.core.pool.states["b1"]
            seen: list[tuple[str, bool]] = []
            async with serve_app(build_app(late), port=port):
                with anyio.fail_after(10):
                    while not state.healthy:
                        seen.append((state.status(), state.breaker.allows_calls()))
                        await anyio.sleep(0.01)
                assert state.status() == "up"
                listing = (await http.get(ADMIN)).json()["backends"]
    assert ("up", True) not in seen
    # The window between the closed circuit and the first routed call was seen, as half_open.
    assert ("half_open", True) in seen
    assert {b["backend_id"]: b["state"] for b in listing}["b1"] == "up"
