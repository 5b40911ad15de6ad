"""What the service counts and shows, over real HTTP: ``client_disconnects_total`` counts
clients that went away (not the 503s and 504s they were answered); ``/health`` and ``/livez``
say only healthy or not, ``/readyz`` adds backend details and ``/metrics`` answers for the
admin token or loopback callers only (unless ``metrics_public``); a program's open tool waits
are capped (409 beyond)."""

from __future__ import annotations

import anyio
import httpx
import pytest

from .conftest import Running, chat_body, running
from .fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

EV = "/agentrt/v1"
CHAT = "/v1/chat/completions"
ADMIN = "admin-secret"
#: A client from outside the host (the ASGI scope's client address).
REMOTE = ("203.0.113.7", 40000)


def _disconnects(svc: Running) -> float:
    return svc.app.metrics.client_disconnects.value()


async def test_a_504_by_deadline_and_a_503_are_no_disconnects() -> None:
    state = FakeState(gate=anyio.Event())
    async with (
        running(state, admission_window=1, max_queued_calls=1) as svc,
        anyio.create_task_group() as group,
    ):
        group.start_soon(svc.chat)  # holds the one slot until the gate opens
        while state.active < 1:  # noqa: ASYNC110 - the fake's state, no event to await
            await anyio.sleep(0.01)
        timeout = {"X-Agentrt-Program-Id": "p", "X-Agentrt-Timeout-Ms": "200"}
        late = await svc.chat(headers=timeout)  # queued, then 504 at its deadline
        group.start_soon(svc.chat)  # queued: the queues are full
        while svc.app.core.calls.queued() < 1:  # noqa: ASYNC110
            await anyio.sleep(0.01)
        full = await svc.chat()
        state.gate.set()  # type: ignore[union-attr]
    assert late.status_code == 504
    assert full.status_code == 503 and full.json()["error"]["code"] == "overloaded"
    assert _disconnects(svc) == 0


async def test_a_client_closing_mid_stream_is_a_disconnect() -> None:
    state = FakeState(tokens=200, chunk_delay_s=0.02)
    async with running(state) as svc:
        async with svc.http.stream("POST", svc.url + CHAT, json=chat_body(True)) as answer:
            assert answer.status_code == 200
            async for _ in answer.aiter_raw():
                break  # the client leaves after its first chunk
        with anyio.fail_after(10):
            while _disconnects(svc) < 1:  # noqa: ASYNC110 - the watcher counts it soon
                await anyio.sleep(0.02)
        complete = await svc.chat()  # a whole answer is no disconnect
        await anyio.sleep(0.1)
    assert complete.status_code == 200
    assert _disconnects(svc) == 1


async def test_probes_show_backends_to_the_admin_and_loopback_only() -> None:
    async with running(FakeState(), admin_token=ADMIN) as svc:
        with anyio.fail_after(10):
            while (await svc.http.get(svc.url + "/readyz")).status_code != 200:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        local = {path: await svc.http.get(svc.url + path) for path in ("/readyz", "/metrics")}
        transport = httpx.ASGITransport(app=svc.app, client=REMOTE)
        async with httpx.AsyncClient(transport=transport, base_url="http://controller") as remote:
            outside = {p: await remote.get(p) for p in ("/health", "/livez", "/readyz", "/metrics")}
            admin = {
                p: await remote.get(p, headers={"authorization": f"Bearer {ADMIN}"})
                for p in ("/readyz", "/metrics")
            }
            wrong = await remote.get("/metrics", headers={"authorization": "Bearer nope"})
    backend_id = next(iter(svc.app.core.backend_health()))
    for path in ("/health", "/livez", "/readyz"):
        assert outside[path].status_code == 200
        assert outside[path].json() == {"status": "ok"}, path
    assert outside["/metrics"].status_code == 403 and wrong.status_code == 403
    assert backend_id not in outside["/metrics"].text
    for seen in (local, admin):
        assert backend_id in seen["/readyz"].json()["backends"]
        assert seen["/metrics"].status_code == 200
        assert "agentrt_controller_client_disconnects_total" in seen["/metrics"].text


async def test_metrics_public_opens_metrics_and_nothing_else() -> None:
    async with running(FakeState(), metrics_public=True) as svc:
        transport = httpx.ASGITransport(app=svc.app, client=REMOTE)
        async with httpx.AsyncClient(transport=transport, base_url="http://controller") as remote:
            metrics = await remote.get("/metrics")
            ready = await remote.get("/readyz")
    assert metrics.status_code == 200
    assert "backends" not in ready.json()


async def test_open_tool_waits_beyond_the_cap_are_409() -> None:
    async with running(FakeState(), max_tool_waits_per_program=3) as svc:
        post = svc.http.post
        sid = (await post(svc.url + EV + "/sessions", json={})).json()["session_id"]
        await post(svc.url + EV + "/programs/p1/start", json={"session_id": sid})

        async def wait(event: str, node: str) -> httpx.Response:
            body = {"session_id": sid, "thread_id": "t1", "node_id": node, "tool_name": "search"}
            if event == "tool-end":
                body["duration_s"] = 0.1
            return await post(svc.url + EV + f"/programs/p1/{event}", json=body)

        opened = [(await wait("tool-start", f"n{i}")).status_code for i in range(3)]
        refused = await wait("tool-start", "n3")
        repeated = await wait("tool-start", "n0")  # replaces its own open wait
        await wait("tool-end", "n0")
        after_end = await wait("tool-start", "n3")
        programs = (await svc.http.get(svc.url + EV + "/programs")).json()
    assert opened == [200, 200, 200]
    assert refused.status_code == 409
    assert "3 open tool waits" in refused.json()["error"]["message"]
    assert repeated.status_code == 200 and after_end.status_code == 200
    assert len(programs["entries"][0]["tool_waits"]) == 3
