"""The scripted model: deterministic plans, schema-valid tool arguments and JSON content."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt_emulator.schema_values import value_for_schema
from agentrt_emulator.scripted_model import GenerationSpec, ScriptedModel, ToolSpec, filler_text
from agentrt_emulator.tokenizer import ChatMessage, Special, Tokenizer

pytestmark = pytest.mark.timeout(60)

WEATHER = ToolSpec(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 2},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "unit": {"enum": ["c", "f"]},
            "detail": {
                "type": "object",
                "properties": {
                    "hourly": {"type": "boolean"},
                    "tags": {
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "maxItems": 3,
                    },
                },
                "required": ["hourly", "tags"],
            },
        },
        "required": ["city", "days", "unit", "detail"],
        "additionalProperties": False,
    },
)
SEARCH = ToolSpec(
    "search", {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
)
USER = [ChatMessage("system", "You help."), ChatMessage("user", "What is the weather?")]

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {"score": {"type": "number", "minimum": 0, "maximum": 10}},
        "required": ["score"],
    },
    {"type": "array", "items": {"type": "integer", "multipleOf": 5}, "minItems": 2},
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            }
        },
        "type": "object",
        "properties": {
            "root": {"$ref": "#/$defs/node"},
            "when": {"type": "string", "format": "date-time"},
        },
        "required": ["root", "when"],
    },
    {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 5}]},
    {
        "allOf": [
            {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"b": {"type": ["boolean", "null"]}}, "required": ["b"]},
        ]
    },
    {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 5},
    {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "mail": {"type": "string", "format": "email"},
        },
        "required": ["id", "mail"],
    },
]


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("seed", range(5))
def test_value_for_schema_is_valid(schema: dict[str, Any], seed: int) -> None:
    value = value_for_schema(schema, random.Random(seed))
    jsonschema.validate(value, schema)


def model() -> ScriptedModel:
    return ScriptedModel(Tokenizer(), seed=7)


def test_same_request_same_output_and_choices_differ() -> None:
    spec = GenerationSpec(messages=USER, max_tokens=100, fingerprint=b"req")
    first, again = model().generate(spec), model().generate(spec)
    assert first == again
    other = model().generate(
        GenerationSpec(messages=USER, max_tokens=100, fingerprint=b"req", choice_index=1)
    )
    assert other.token_ids != first.token_ids


def test_required_tool_choice_calls_with_valid_arguments() -> None:
    for index in range(20):
        out = model().generate(
            GenerationSpec(
                messages=USER,
                tools=[WEATHER, SEARCH],
                tool_choice="required",
                max_tokens=400,
                fingerprint=b"r",
                choice_index=index,
            )
        )
        assert out.finish_reason == "tool_calls"
        assert out.token_ids[-1] == Special.EOT
        content, calls = out.visible(len(out.token_ids))
        assert content == "" and calls == list(out.tool_calls)
        for call in calls:
            schema = WEATHER.parameters if call.name == "get_weather" else SEARCH.parameters
            jsonschema.validate(json.loads(call.arguments), schema)


def test_named_tool_choice_and_none() -> None:
    named = model().generate(
        GenerationSpec(messages=USER, tools=[WEATHER, SEARCH], tool_choice="search", max_tokens=200)
    )
    assert [c.name for c in named.tool_calls] == ["search"]
    none = model().generate(
        GenerationSpec(messages=USER, tools=[WEATHER], tool_choice="none", max_tokens=200)
    )
    assert none.tool_calls == () and none.finish_reason == "stop"


def test_auto_calls_tools_less_after_results() -> None:
    after_result = [
        *USER,
        ChatMessage("assistant", "", (("search", "{}"),)),
        ChatMessage("tool", "sunny"),
    ]

    def rate(messages: list[ChatMessage]) -> float:
        calls = sum(
            bool(
                model()
                .generate(
                    GenerationSpec(
                        messages=messages,
                        tools=[SEARCH],
                        max_tokens=100,
                        fingerprint=str(i).encode(),
                    )
                )
                .tool_calls
            )
            for i in range(200)
        )
        return calls / 200

    assert rate(USER) > 0.65
    assert rate(after_result) < rate(USER)


def test_tool_call_hint_wins_over_auto() -> None:
    for hint in (True, False):
        out = model().generate(
            GenerationSpec(messages=USER, tools=[SEARCH], max_tokens=100, tool_call_hint=hint)
        )
        assert bool(out.tool_calls) is hint


def test_output_tokens_hint_sets_length_including_end_of_turn() -> None:
    out = model().generate(GenerationSpec(messages=USER, max_tokens=500, output_tokens_hint=77))
    assert len(out.token_ids) == 77 and out.finish_reason == "stop"
    content, _ = out.visible(77)
    assert Tokenizer().count(content) == 76


def test_max_tokens_cuts_and_ignore_eos_fills() -> None:
    cut = model().generate(GenerationSpec(messages=USER, max_tokens=10, output_tokens_hint=50))
    assert len(cut.token_ids) == 10 and cut.finish_reason == "length"
    filled = model().generate(GenerationSpec(messages=USER, max_tokens=300, ignore_eos=True))
    assert len(filled.token_ids) == 300 and filled.finish_reason == "length"
    assert Special.EOT not in filled.token_ids
    json_filled = model().generate(
        GenerationSpec(messages=USER, max_tokens=60, ignore_eos=True, json_schema={})
    )
    assert len(json_filled.token_ids) == 60


@pytest.mark.parametrize("schema", SCHEMAS[:3])
def test_response_format_content_is_valid(schema: dict[str, Any]) -> None:
    out = model().generate(GenerationSpec(messages=USER, json_schema=schema, max_tokens=1000))
    content, _ = out.visible(len(out.token_ids))
    jsonschema.validate(json.loads(content), schema)


def test_output_tokens_match_the_text_retokenized() -> None:
    """Text first, then tokens: the client's next turn re-creates exactly the same tokens."""
    tokenizer = Tokenizer()
    out = model().generate(GenerationSpec(messages=USER, max_tokens=500, output_tokens_hint=40))
    content, _ = out.visible(len(out.token_ids))
    assert [*tokenizer.encode(content), Special.EOT] == list(out.token_ids)


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=10**6))
def test_filler_text_has_exact_token_count(count: int, seed: int) -> None:
    tokenizer = Tokenizer()
    assert tokenizer.count(filler_text(tokenizer, random.Random(seed), count)) == count
