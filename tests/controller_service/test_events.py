"""Program events, introspection, /metrics and OpenTelemetry spans."""

from __future__ import annotations

import functools

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentrt.protocol import CallTags
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller

from .conftest import chat_body, fake_backends, running
from .fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]
EV = "/agentrt/v1"


@pytest.mark.parametrize("http_path", ["direct", "asgi"])
async def test_session_program_and_tool_events_show_in_the_process_table(http_path: str) -> None:
    async with running(FakeState(), http_path=http_path) as svc:
        post = svc.http.post
        session = (await post(svc.url + EV + "/sessions", json={"client": "test"})).json()
        sid = session["session_id"]
        assert session["idle_timeout_s"] == 600.0
        started = await post(
            svc.url + EV + "/programs/p1/start",
            json={"session_id": sid, "name": "react", "timeout_ms": 60000},
        )
        assert started.status_code == 200
        tags = CallTags(session_id=sid, program_id="p1", thread_id="t1", node_id="n1")
        assert (await svc.chat(headers=tags.to_headers())).status_code == 200
        await post(
            svc.url + EV + "/programs/p1/tool-start",
            json={"session_id": sid, "thread_id": "t1", "node_id": "n2", "tool_name": "search",
                  "predicted_duration_s": 1.5},
        )  # fmt: skip
        during = (await svc.http.get(svc.url + EV + "/programs")).json()
        await post(
            svc.url + EV + "/programs/p1/tool-end",
            json={"session_id": sid, "thread_id": "t1", "node_id": "n2", "tool_name": "search",
                  "duration_s": 0.1},
        )  # fmt: skip
        after_tool = (await svc.http.get(svc.url + EV + "/programs")).json()
        await post(svc.url + EV + "/programs/p1/end", json={"session_id": sid})
        ended = (await svc.http.get(svc.url + EV + "/programs")).json()
    entry = during["entries"][0]
    assert entry["name"] == "react" and entry["deadline_at"] is not None
    assert entry["threads"] == {"t1": 1}
    assert entry["tool_waits"][0]["tool_name"] == "search"
    assert entry["tool_waits"][0]["predicted_duration_s"] == 1.5
    assert after_tool["entries"][0]["tool_waits"] == []
    assert ended["programs"] == 0


@pytest.mark.parametrize("http_path", ["direct", "asgi"])
async def test_deleting_a_session_ends_its_programs_only(http_path: str) -> None:
    async with running(FakeState(), http_path=http_path) as svc:
        for sid, pid in (("s1", "a"), ("s1", "b"), ("s2", "a")):
            await svc.http.post(svc.url + EV + f"/programs/{pid}/start", json={"session_id": sid})
        gone = (await svc.http.delete(svc.url + EV + "/sessions/s1")).json()
        table = (await svc.http.get(svc.url + EV + "/programs")).json()
    assert gone["programs_ended"] == 2
    assert [(e["session_id"], e["program_id"]) for e in table["entries"]] == [("s2", "a")]


async def test_programs_show_active_calls_and_queues_while_they_wait() -> None:
    state = FakeState(gate=anyio.Event())
    async with (
        running(state, admission_window=1, policy="atlas") as svc,
        anyio.create_task_group() as group,
    ):
        for thread in ("t1", "t2", "t3"):
            tags = CallTags(session_id="s", program_id="mcts", thread_id=thread,
                            node_id=f"n-{thread}")  # fmt: skip
            group.start_soon(functools.partial(svc.chat, headers=tags.to_headers()))
        table: dict[str, object] = {}
        for _ in range(1000):
            table = (await svc.http.get(svc.url + EV + "/programs")).json()
            entries = table["entries"]
            if entries and len(entries[0]["active_calls"]) == 3:  # type: ignore[index]
                break
            await anyio.sleep(0.01)
        queues = (await svc.http.get(svc.url + EV + "/queues")).json()
        metrics = (await svc.http.get(svc.url + "/metrics")).text
        state.gate.set()  # type: ignore[union-attr]
    entry = table["entries"][0]  # type: ignore[index]
    assert entry["threads"] == {"t1": 1, "t2": 1, "t3": 1}
    states = sorted(c["state"] for c in entry["active_calls"])
    assert states == ["queued", "queued", "running"]
    assert queues["policy"] == "atlas" and queues["queued"] == 2
    assert 'agentrt_controller_queue_length{level="0"} 2' in metrics
    assert 'agentrt_controller_in_flight_calls{backend="' in metrics
    assert "agentrt_controller_live_programs 1.0" in metrics


async def test_each_call_gets_a_span_joined_to_the_client_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    state = FakeState()
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    parent = f"00-{trace_id}-b7ad6b7169203331-01"
    async with fake_backends(state) as urls:
        config = ControllerConfig(port=0, backends=(BackendSpec(urls[0], priority=True),))
        async with serve_controller(config, tracer_provider=provider) as url:
            import httpx

            async with httpx.AsyncClient() as http:
                tags = CallTags(session_id="s", program_id="p", thread_id="main", node_id="n1")
                headers = {**tags.to_headers(), "traceparent": parent}
                response = await http.post(
                    url + "/v1/chat/completions", json=chat_body(), headers=headers
                )
    assert response.status_code == 200
    (span,) = exporter.get_finished_spans()
    assert span.name == "chat tiny"
    assert format(span.context.trace_id, "032x") == trace_id
    assert span.parent is not None and format(span.parent.span_id, "016x") == "b7ad6b7169203331"
    attributes = dict(span.attributes or {})
    assert attributes["agentrt.backend"] == config.backends[0].backend_id
    assert attributes["agentrt.retries"] == 0
    assert attributes["agentrt.priority"] == 0
    assert "agentrt.queue_wait_s" in attributes
    assert attributes["gen_ai.usage.output_tokens"] == 5
    # The backend sees our span as the parent of its work.
    forwarded = state.headers[0]["traceparent"]
    assert forwarded.split("-")[1] == trace_id
    assert forwarded.split("-")[2] == format(span.context.span_id, "016x")
    provider.shutdown()


async def test_gittins_learns_program_sizes_from_the_program_events() -> None:
    """``--policy gittins``: each program that ends through its end event teaches the
    scheduler its size, under its kind (the start event's name) and under all kinds."""
    async with running(FakeState(), policy="gittins") as svc:
        post = svc.http.post
        for index in range(3):
            pid = f"p{index}"
            await post(svc.url + EV + f"/programs/{pid}/start",
                       json={"session_id": "s", "name": "coding"})  # fmt: skip
            tags = CallTags(session_id="s", program_id=pid, thread_id="t", node_id="n")
            assert (await svc.chat(headers=tags.to_headers())).status_code == 200
            await post(svc.url + EV + f"/programs/{pid}/end", json={"session_id": "s"})
        queues = (await svc.http.get(svc.url + EV + "/queues")).json()
    assert queues["policy"] == "gittins"
    assert queues["learned_programs"] == {"*": 3, "coding": 3}
