"""Must-show: the ``openai`` client's ``responses.create`` (streamed and not) through the
controller to the engine emulator — program tags reach the process table, tokens are charged
from the answer's usage, tool calls and their outputs round-trip (the OpenAI Agents SDK's
default model speaks this API)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentrt.protocol import CallTags
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_controller.service.http.responses_api import chat_view
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from tests.backends.servers import serve_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

MODEL = DEFAULT_MODEL_NAME
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "search",
        "description": "Search the web",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "additionalProperties": False,
        },
        "strict": True,
    }
]


def _cost(uncached_prompt_tokens: int, output_tokens: int) -> float:
    """A charge that shows both counts: one second per output token, a µs per prompt token."""
    return output_tokens + uncached_prompt_tokens * 1e-6


class Stack:
    def __init__(self, url: str, app: ControllerApp, http: httpx.AsyncClient) -> None:
        self.url = url
        self.app = app
        self.http = http
        self.client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)

    async def programs(self) -> dict[str, Any]:
        table: dict[str, Any] = (await self.http.get(self.url + "/agentrt/v1/programs")).json()
        return table


@contextlib.asynccontextmanager
async def stack() -> AsyncIterator[Stack]:
    apps: list[ControllerApp] = []
    async with serve_engine(EmulatorConfig(time_scale=50.0)) as engine:
        config = ControllerConfig(
            port=0, backends=(BackendSpec(engine.base_url, kind="emulator"),),
            scrape_interval_s=0.2,
        )  # fmt: skip
        async with (
            serve_controller(config, cost=_cost, on_app=apps.append) as url,
            httpx.AsyncClient(timeout=20) as http,
        ):
            running = Stack(url, apps[0], http)
            try:
                yield running
            finally:
                await running.client.close()


def _tags(program_id: str) -> dict[str, str]:
    return CallTags(
        session_id="s-resp", program_id=program_id, thread_id="main", node_id="main:0"
    ).to_headers()


def _charged(usage: Any) -> float:
    return _cost(usage.input_tokens - usage.input_tokens_details.cached_tokens, usage.output_tokens)


async def test_responses_create_through_the_controller_is_tagged_and_charged() -> None:
    async with stack() as s:
        response = await s.client.responses.create(
            model=MODEL,
            instructions="You are terse.",
            input="Say hello.",
            max_output_tokens=64,
            extra_headers=_tags("prog-resp"),
            extra_body={"agentrt_output_tokens": 9},
        )
        table = await s.programs()
    assert response.status == "completed"
    assert response.output_text and response.output[0].type == "message"
    assert response.usage is not None and response.usage.output_tokens == 9
    assert response.usage.input_tokens > 0
    assert table["programs"] == 1
    entry = table["entries"][0]
    assert (entry["session_id"], entry["program_id"]) == ("s-resp", "prog-resp")
    assert entry["calls_finished"] == 1
    assert entry["attained_service_s"] == pytest.approx(_charged(response.usage))


async def test_streamed_responses_have_the_real_event_sequence_and_are_charged() -> None:
    async with stack() as s:
        stream = await s.client.responses.create(
            model=MODEL,
            input=[{"role": "user", "content": [{"type": "input_text", "text": "Tell me."}]}],
            stream=True,
            extra_headers=_tags("prog-stream"),
            extra_body={"agentrt_output_tokens": 12},
        )
        events = [event async for event in stream]
        table = await s.programs()
    kinds = [event.type for event in events]
    assert kinds[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output_text == deltas and deltas
    assert final.usage is not None and final.usage.output_tokens == 12
    entry = table["entries"][0]
    assert entry["program_id"] == "prog-stream"
    assert entry["attained_service_s"] == pytest.approx(_charged(final.usage))


async def test_a_tool_call_and_its_output_round_trip_streamed_and_not() -> None:
    async with stack() as s:
        # The openai client's stream helper rebuilds the response from the events and checks
        # that they fit together (indexes, item ids, text and arguments).
        async with s.client.responses.stream(
            model=MODEL, input="Find agentrt.", tools=TOOLS, tool_choice="required"
        ) as stream:
            called = await stream.get_final_response()
        call = called.output[-1]
        assert call.type == "function_call" and call.name == "search"
        assert '"query"' in call.arguments
        answer = await s.client.responses.create(
            model=MODEL,
            tools=TOOLS,
            input=[
                {"role": "user", "content": "Find agentrt."},
                *[item.model_dump(exclude_none=True) for item in called.output],
                {"type": "function_call_output", "call_id": call.call_id, "output": "found"},
            ],
            tool_choice="none",
        )
    assert answer.status == "completed" and answer.output_text
    assert answer.usage is not None
    assert answer.usage.input_tokens > called.usage.input_tokens  # type: ignore[union-attr]


async def test_a_cut_answer_is_incomplete_and_an_unknown_model_is_404() -> None:
    async with stack() as s:
        cut = await s.client.responses.create(
            model=MODEL, input="Go on.", max_output_tokens=3,
            extra_body={"agentrt_output_tokens": 50},
        )  # fmt: skip
        with pytest.raises(openai.NotFoundError):
            await s.client.responses.create(model="no-such-model", input="hi")
    assert cut.status == "incomplete"
    assert cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"
    assert cut.usage is not None and cut.usage.output_tokens == 3


async def test_the_emulator_reads_agents_sdk_items_and_text_formats() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    # Items as the OpenAI Agents SDK sends them back: a user message without "type", the
    # previous turn's output items (an output_text message, a reasoning item), a tool result.
    history: list[Any] = [
        {"role": "user", "content": "Plan a trip."},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Where to?", "annotations": []}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Lyon"}]},
        {"type": "function_call", "call_id": "call_1", "name": "search", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "Lyon: 3 days"},
    ]  # fmt: skip
    text_format: Any = {"format": {"type": "json_schema", "name": "plan", "schema": schema,
                                   "strict": True}}  # fmt: skip
    async with serve_engine(EmulatorConfig(time_scale=50.0)) as engine:
        client = openai.AsyncOpenAI(base_url=engine.openai_base_url, api_key="-", max_retries=0)
        async with client:
            planned = await client.responses.create(
                model=MODEL, input=history, tools=TOOLS, tool_choice="none", text=text_format
            )
            with pytest.raises(openai.BadRequestError):
                await client.responses.create(
                    model=MODEL, input="hi", previous_response_id=planned.id
                )
            with pytest.raises(openai.BadRequestError):
                await client.responses.create(
                    model=MODEL, input="hi", tools=[{"type": "web_search"}]
                )
    plan = json.loads(planned.output_text)
    assert set(plan) == {"city", "days"} and isinstance(plan["days"], int)
    assert planned.usage is not None and planned.usage.input_tokens > 20


@contextlib.asynccontextmanager
async def recording_responses_backend() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A Responses API backend that records each body and answers with fixed usage."""
    bodies: list[dict[str, Any]] = []

    async def respond(request: Request) -> Response:
        bodies.append(await request.json())
        usage = {"input_tokens": 20, "output_tokens": 4, "total_tokens": 24,
                 "input_tokens_details": {"cached_tokens": 16}}  # fmt: skip
        return JSONResponse({"id": "resp_1", "object": "response", "status": "completed",
                             "output": [], "usage": usage})  # fmt: skip

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    app = Starlette(routes=[Route("/v1/responses", respond, methods=["POST"]),
                            Route("/health", health), Route("/metrics", health)])  # fmt: skip
    async with serve_app(app) as url:
        yield url, bodies


async def test_cache_salt_per_tenant_and_charge_from_usage_on_the_responses_path() -> None:
    keys = {"alice": "key-alice-0001", "bob": "key-bob-0002"}
    body = {"model": "m", "input": "hello", "cache_salt": "mine",
            "vllm_xargs": {"agentic_context": {"program_id": "p"}}}  # fmt: skip
    async with recording_responses_backend() as (backend_url, bodies):
        config = ControllerConfig(
            port=0, backends=(BackendSpec(backend_url, kind="vllm"),),
            api_keys=",".join(f"{k}={v}" for k, v in keys.items()), scrape_interval_s=0.2,
        )  # fmt: skip
        async with serve_controller(config, cost=_cost) as url, httpx.AsyncClient() as http:
            for key in keys.values():
                auth = {"authorization": f"Bearer {key}"}
                answer = await http.post(url + "/v1/responses", json=body, headers=auth)
                assert answer.status_code == 200
            table = await http.get(
                url + "/agentrt/v1/programs", headers={"authorization": f"Bearer {keys['bob']}"}
            )
    salts = [sent["cache_salt"] for sent in bodies]
    assert all(s.startswith("agentrt-") for s in salts) and salts[0] != salts[1]
    assert all("vllm_xargs" not in sent for sent in bodies)
    (entry,) = table.json()["entries"]  # bob's own program, named by the agentic context
    assert entry["program_id"] == "p"
    assert entry["attained_service_s"] == pytest.approx(_cost(20 - 16, 4))


async def test_the_controllers_chat_view_is_the_prompt_the_engine_renders() -> None:
    """Prefix hashes and retention's pins read a Responses request as chat messages: the
    engine's chat template must turn that view into exactly the prompt it ran."""
    body: dict[str, Any] = {
        "model": MODEL,
        "instructions": "Be brief.",
        "tools": TOOLS,
        "input": [
            {"role": "user", "content": "Find agentrt."},
            {"type": "function_call", "call_id": "c1", "name": "search", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "search", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "function_call_output", "call_id": "c2", "output": "two"},
        ],
    }
    view = chat_view(body)
    async with (
        serve_engine(EmulatorConfig(time_scale=50.0)) as engine,
        httpx.AsyncClient(timeout=10) as http,
    ):
        answer = (await http.post(engine.base_url + "/v1/responses", json=body)).json()
        tokens = await http.post(
            engine.base_url + "/tokenize",
            json={"messages": view["messages"], "tools": view["tools"]},
        )
    assert tokens.json()["count"] == answer["usage"]["input_tokens"]
