"""The Responses API request as chat messages and tools (agentrt_serving.responses_chat): the one
mapping the emulator serves by and the controller hashes by, read strictly and leniently."""

from __future__ import annotations

from typing import Any

import pytest

from agentrt_serving.responses_chat import chat_messages, chat_tools

pytestmark = pytest.mark.timeout(10)


class Refused(Exception):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}"}


def test_a_conversation_reads_the_same_strictly_and_leniently() -> None:
    body = {
        "instructions": "be brief",
        "input": [
            {"role": "user", "content": "weather?"},
            {"type": "reasoning", "summary": []},
            _call("c1", "lookup"),
            _call("c2", "clock"),
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "c2", "output": [
                {"type": "input_text", "text": "noon"}]},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": "Sunny"}, {"type": "refusal", "refusal": "!"}]},
        ],
        "tools": [{"type": "function", "name": "lookup", "parameters": {}, "strict": True}],
    }  # fmt: skip
    expected = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "noon"},
        {"role": "assistant", "content": "Sunny!"},
    ]
    assert chat_messages(body, Refused) == expected
    assert chat_messages(body) == expected
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    assert chat_tools(body, Refused) == chat_tools(body) == tools
    assert chat_messages({"input": "hi"}, Refused) == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "param", "lenient"),
    [
        ({}, "input", []),
        ({"input": []}, "input", []),
        ({"input": ["x"]}, "input.0", []),
        ({"input": [{"role": "user", "content": 3}]}, "input.0", [{"role": "user", "content": ""}]),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input.0",
            [{"role": "user", "content": ""}],
        ),
        ({"input": [{"type": "item_reference", "id": "r"}]}, "input.0", []),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": {"t": 1}}]},
            "input.0",
            [{"role": "tool", "tool_call_id": "c", "content": '{"t": 1}'}],
        ),
    ],
)
def test_input_outside_the_mapping_is_refused_or_left_out(
    body: dict[str, Any], param: str, lenient: list[dict[str, Any]]
) -> None:
    with pytest.raises(Refused) as caught:
        chat_messages(body, Refused)
    assert caught.value.param == param
    assert chat_messages(body) == lenient


@pytest.mark.parametrize("tools", [{"type": "function"}, [{"type": "web_search"}], ["lookup"]])
def test_tools_other_than_functions_are_refused_or_left_out(tools: Any) -> None:
    with pytest.raises(Refused) as caught:
        chat_tools({"tools": tools}, Refused)
    assert caught.value.param == "tools"
    assert chat_tools({"tools": tools}) == []
    assert chat_tools({}, Refused) == []
