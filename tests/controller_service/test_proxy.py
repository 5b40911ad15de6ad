"""The OpenAI-compatible path end to end: real openai client → controller → fake servers."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from agentrt.protocol import CallTags
from agentrt_controller import defaults

from .conftest import chat_body, controller, fake_backends, running
from .fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def test_non_streaming_chat_passes_through_tool_calls_and_usage() -> None:
    state = FakeState(tool_call=True, cached_tokens=3)
    async with fake_backends(state) as urls, controller(urls) as (url, _app):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused")
        answer = await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}]
        )
        await client.close()
    assert answer.choices[0].message.content == "xxxxx"
    tool_calls = answer.choices[0].message.tool_calls
    assert tool_calls is not None and tool_calls[0].function.name == "search"
    assert answer.usage is not None and answer.usage.completion_tokens == 5
    assert answer.usage.prompt_tokens_details is not None
    assert answer.usage.prompt_tokens_details.cached_tokens == 3
    # No priority for a backend that was not switched to priority scheduling.
    assert "priority" not in state.requests[0]


async def test_streaming_chat_is_faithful_and_usage_chunk_stays_hidden() -> None:
    state = FakeState(tokens=7)
    async with fake_backends(state) as urls, controller(urls) as (url, app):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused")
        stream = await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        chunks = [chunk async for chunk in stream]
        await client.close()
        metrics = app.metrics
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "x" * 7
    assert all(c.choices for c in chunks)  # the usage chunk we asked for is not shown
    # The controller asked for usage to charge the call exactly...
    assert state.requests[0]["stream_options"] == {"include_usage": True}
    assert metrics.output_tokens.value() == 7


async def test_streaming_with_client_usage_keeps_the_usage_chunk() -> None:
    state = FakeState(tokens=3)
    async with fake_backends(state) as urls, controller(urls) as (url, _app):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused")
        stream = await client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        await client.close()
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
    assert chunks[-1].choices == []


async def test_completions_endpoint_and_raw_body_forwarded_unchanged() -> None:
    state = FakeState()
    async with fake_backends(state) as urls, controller(urls) as (url, _app):
        raw = b'{"model": "tiny",   "prompt": "say \\u00e9", "max_tokens": 4}'
        async with httpx.AsyncClient() as http:
            response = await http.post(
                url + "/v1/completions", content=raw, headers={"content-type": "application/json"}
            )
    assert response.status_code == 200
    assert response.json()["choices"][0]["text"] == "xxxxx"
    assert state.requests[0] == json.loads(raw)


async def test_priority_only_to_backends_that_support_it() -> None:
    with_priority, without = FakeState(), FakeState()
    async with fake_backends(with_priority) as first, fake_backends(without) as second:
        from agentrt_controller.backends.spec import BackendSpec
        from agentrt_controller.service import ControllerConfig, serve_controller

        config = ControllerConfig(
            port=0,
            policy="plas",
            router="round_robin",  # an even split; the prefix router would keep one backend
            backends=(BackendSpec(first[0], priority=True), BackendSpec(second[0])),
        )
        async with serve_controller(config) as url, httpx.AsyncClient() as http:
            for _ in range(4):
                response = await http.post(url + "/v1/chat/completions", json=chat_body())
                assert response.status_code == 200
    assert len(with_priority.requests) == 2 and len(without.requests) == 2
    assert all(isinstance(r.get("priority"), int) for r in with_priority.requests)
    assert all("priority" not in r for r in without.requests)


async def test_models_are_aggregated_and_unknown_model_is_404() -> None:
    first, second = FakeState(model="a"), FakeState(model="b")
    async with running(first, second) as svc:
        models = (await svc.http.get(svc.url + "/v1/models")).json()
        missing = await svc.chat(model="nope")
    assert sorted(m["id"] for m in models["data"]) == ["a", "b"]
    assert missing.status_code == 404
    assert missing.json()["error"]["param"] == "model"


async def test_tagged_calls_build_the_process_table_and_untagged_calls_leave_none() -> None:
    state = FakeState()
    tags = CallTags(session_id="s1", program_id="prog-1", thread_id="t2", node_id="n1")
    async with running(state) as svc:
        await svc.chat()
        await svc.chat(headers=tags.to_headers())
        table = (await svc.http.get(svc.url + "/agentrt/v1/programs")).json()
        queues = (await svc.http.get(svc.url + "/agentrt/v1/queues")).json()
    assert table["programs"] == 1
    entry = table["entries"][0]
    assert (entry["session_id"], entry["program_id"]) == ("s1", "prog-1")
    assert entry["threads"] == {"t2": 1}
    assert entry["calls_finished"] == 1 and entry["attained_service_s"] > 0
    assert queues["policy"] == defaults.POLICY and queues["backends"][0]["in_flight"] == 0


async def test_response_reports_queue_time_header() -> None:
    state = FakeState()
    async with running(state) as svc:
        response = await svc.chat()
    assert float(response.headers["x-agentrt-queue-ms"]) >= 0


async def test_one_users_cookies_never_reach_the_next_users_request() -> None:
    state = FakeState(set_cookie="session=alice; Path=/")
    async with running(state) as svc:
        first = await svc.chat()
        await svc.chat()
    assert "set-cookie" not in first.headers  # not passed back either
    assert all("cookie" not in headers for headers in state.headers)


@pytest.mark.parametrize("transport", ["fast", "httpx"])
async def test_both_http_transports_pass_answers_and_streams_through(transport: str) -> None:
    state = FakeState(tokens=4)
    async with running(state, http_transport=transport) as svc:
        whole = await svc.chat()
        streamed = await svc.chat(stream=True)
        table = (await svc.http.get(svc.url + "/agentrt/v1/queues")).json()
    assert whole.json()["choices"][0]["message"]["content"] == "xxxx"
    assert streamed.text.count("data: {") == 4 and streamed.text.endswith("data: [DONE]\n\n")
    assert table["backends"][0]["in_flight"] == 0
