"""The OpenAI surface of the emulator, through the official ``openai`` client over HTTP."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import pytest

from .helpers import MODEL, serving

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "limit": {"type": "integer", "minimum": 1, "maximum": 10},
        "filters": {
            "type": "object",
            "properties": {"site": {"enum": ["docs", "blog"]}, "recent": {"type": "boolean"}},
            "required": ["site"],
        },
    },
    "required": ["query", "limit", "filters"],
    "additionalProperties": False,
}
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "search", "parameters": SEARCH_SCHEMA}},
    {"type": "function", "function": {"name": "calc", "parameters": {
        "type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}}},
]  # fmt: skip
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "Tell me about prefix caching."},
]


async def test_chat_non_streaming_with_usage_and_request_id() -> None:
    async with serving() as (_, openai):
        raw = await openai.chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, extra_headers={"X-Request-Id": "req-42"}
        )
        completion = raw.parse()
        assert raw.headers["x-request-id"] == "req-42"
        assert completion.id == "chatcmpl-req-42"
        choice = completion.choices[0]
        assert choice.finish_reason == "stop"
        assert choice.message.role == "assistant" and choice.message.content
        usage = completion.usage
        assert usage is not None and usage.prompt_tokens > 10
        assert usage.completion_tokens >= 1
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
        assert usage.prompt_tokens_details is not None
        assert usage.prompt_tokens_details.cached_tokens is not None


async def test_streaming_equals_non_streaming_and_reports_usage() -> None:
    async with serving() as (_, openai):
        whole = await openai.chat.completions.create(
            model=MODEL, messages=MESSAGES, extra_body={"agentrt_output_tokens": 40}
        )
        stream = await openai.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"agentrt_output_tokens": 40},
        )
        parts, finish, usage = [], None, None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
                assert chunk.choices == []
                continue
            delta = chunk.choices[0].delta
            parts.append(delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        assert "".join(parts) == whole.choices[0].message.content
        assert finish == "stop"
        assert usage is not None and usage.completion_tokens == 40
        assert whole.usage is not None and whole.usage.completion_tokens == 40


async def test_tool_calls_valid_against_schema_streamed_and_not() -> None:
    async with serving() as (_, openai):
        for index in range(4):
            messages = [*MESSAGES, {"role": "user", "content": f"question {index}"}]
            whole = await openai.chat.completions.create(
                model=MODEL, messages=messages, tools=TOOLS, tool_choice="required"
            )
            choice = whole.choices[0]
            assert choice.finish_reason == "tool_calls"
            calls = choice.message.tool_calls or []
            assert calls
            for call in calls:
                schema = (
                    SEARCH_SCHEMA
                    if call.function.name == "search"
                    else TOOLS[1]["function"]["parameters"]
                )
                jsonschema.validate(json.loads(call.function.arguments), schema)
            stream = await openai.chat.completions.create(
                model=MODEL, messages=messages, tools=TOOLS, tool_choice="required", stream=True
            )
            streamed: dict[int, dict[str, str]] = {}
            finish = None
            async for chunk in stream:
                for delta in chunk.choices[0].delta.tool_calls or []:
                    entry = streamed.setdefault(delta.index, {"id": "", "name": "", "args": ""})
                    entry["id"] += delta.id or ""
                    if delta.function is not None:
                        entry["name"] += delta.function.name or ""
                        entry["args"] += delta.function.arguments or ""
                finish = chunk.choices[0].finish_reason or finish
            assert finish == "tool_calls"
            assert [(e["id"], e["name"], e["args"]) for _, e in sorted(streamed.items())] == [
                (c.id, c.function.name, c.function.arguments) for c in calls
            ]


async def test_named_tool_choice_and_tool_result_round_trip() -> None:
    async with serving() as (_, openai):
        first = await openai.chat.completions.create(
            model=MODEL, messages=MESSAGES, tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "calc"}},
        )  # fmt: skip
        calls = first.choices[0].message.tool_calls or []
        assert [c.function.name for c in calls] == ["calc"]
        follow_up = [
            *MESSAGES,
            {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in calls]},
            {"role": "tool", "tool_call_id": calls[0].id, "content": "42"},
        ]
        second = await openai.chat.completions.create(
            model=MODEL, messages=follow_up, tools=TOOLS, extra_body={"agentrt_tool_call": False}
        )
        assert second.choices[0].finish_reason == "stop"
        assert second.choices[0].message.content


async def test_response_format_json_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "score": {"type": "number", "minimum": 0, "maximum": 10},
            "reason": {"type": "string"},
            "tags": {"type": "array", "items": {"enum": ["good", "bad"]}, "minItems": 1},
        },
        "required": ["score", "reason", "tags"],
    }
    async with serving() as (_, openai):
        completion = await openai.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "evaluation", "schema": schema}},
        )  # fmt: skip
        jsonschema.validate(json.loads(completion.choices[0].message.content or ""), schema)
        loose = await openai.chat.completions.create(
            model=MODEL, messages=MESSAGES, response_format={"type": "json_object"}
        )
        assert isinstance(json.loads(loose.choices[0].message.content or ""), dict)


async def test_n_choices_differ_and_count_in_usage() -> None:
    async with serving() as (_, openai):
        completion = await openai.chat.completions.create(model=MODEL, messages=MESSAGES, n=3)
        assert [c.index for c in completion.choices] == [0, 1, 2]
        texts = {c.message.content for c in completion.choices}
        assert len(texts) == 3
        usage = completion.usage
        assert usage is not None
        counted = [len(c.message.content or "") > 0 for c in completion.choices]
        assert all(counted) and usage.completion_tokens >= 3


async def test_max_tokens_and_ignore_eos() -> None:
    async with serving() as (_, openai):
        cut = await openai.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=5, extra_body={"agentrt_output_tokens": 50}
        )
        assert cut.choices[0].finish_reason == "length"
        assert cut.usage is not None and cut.usage.completion_tokens == 5
        filled = await openai.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=120, extra_body={"ignore_eos": True}
        )
        assert filled.usage is not None and filled.usage.completion_tokens == 120
        assert filled.choices[0].finish_reason == "length"
        hinted = await openai.chat.completions.create(
            model=MODEL, messages=MESSAGES, extra_headers={"X-Agentrt-Output-Tokens": "33"}
        )
        assert hinted.usage is not None and hinted.usage.completion_tokens == 33


async def test_completions_endpoint_single_batch_and_stream() -> None:
    async with serving() as (_, openai):
        single = await openai.completions.create(
            model=MODEL, prompt="Once upon a time", max_tokens=8
        )
        assert single.choices[0].text and single.usage is not None
        assert single.usage.completion_tokens <= 8
        batch = await openai.completions.create(
            model=MODEL, prompt=["first prompt", "second prompt"], max_tokens=8, n=2
        )
        assert [c.index for c in batch.choices] == [0, 1, 2, 3]
        tokens = await openai.completions.create(
            model=MODEL, prompt=[1, 500, 600, 700], max_tokens=4
        )
        assert tokens.usage is not None and tokens.usage.prompt_tokens == 4
        stream = await openai.completions.create(
            model=MODEL, prompt="Once upon a time", max_tokens=8, stream=True
        )
        text = "".join([chunk.choices[0].text async for chunk in stream if chunk.choices])
        assert text == single.choices[0].text


async def test_models_health_version_and_tokenize() -> None:
    async with serving() as (engine, openai):
        models = await openai.models.list()
        assert [m.id for m in models.data] == [MODEL]
        async with httpx.AsyncClient(base_url=engine.base_url) as http:
            assert (await http.get("/health")).status_code == 200
            assert "version" in (await http.get("/version")).json()
            by_prompt = (
                await http.post("/tokenize", json={"model": MODEL, "prompt": "hello world"})
            ).json()
            assert by_prompt["count"] == len(by_prompt["tokens"]) == 3  # BOS + 2 words
            assert by_prompt["max_model_len"] == 32768
            by_chat = (await http.post("/tokenize", json={"messages": MESSAGES})).json()
        completion = await openai.chat.completions.create(model=MODEL, messages=MESSAGES)
        assert completion.usage is not None
        assert by_chat["count"] == completion.usage.prompt_tokens


async def test_same_request_same_answer_across_servers() -> None:
    async with serving() as (_, first), serving() as (_, second):
        one = await first.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS)
        two = await second.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS)
        assert one.choices[0].message.model_dump() == two.choices[0].message.model_dump()
