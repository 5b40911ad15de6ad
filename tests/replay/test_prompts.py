"""The prompt builder and the template calibration, offline: the emulator's tokenizer behind
an ``httpx.MockTransport`` stands in for a server's ``/tokenize``."""

from __future__ import annotations

import json

import httpx
import pytest

from agentrt_emulator.server.prepare import chat_messages
from agentrt_emulator.server.wire import ChatMessageIn
from agentrt_emulator.tokenizer import Tokenizer
from agentrt_sim.replay.prompts import FILLER_WORDS, PromptBuilder, TemplateCosts, filler
from agentrt_sim.replay.server import ReplayError, calibrate, check_base_url
from agentrt_sim.workloads.program import LLMNode, Program, WaitNode

pytestmark = pytest.mark.timeout(30)

TOKENIZER = Tokenizer()


def _count(messages: list[dict[str, str]]) -> int:
    parsed = chat_messages([ChatMessageIn.model_validate(m) for m in messages])
    return len(TOKENIZER.render_chat(parsed, [], add_generation_prompt=True))


def _tokenize(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if "prompt" in body:
        tokens = TOKENIZER.encode(body["prompt"], add_bos=body.get("add_special_tokens", True))
    else:
        parsed = chat_messages([ChatMessageIn.model_validate(m) for m in body["messages"]])
        tokens = TOKENIZER.render_chat(
            parsed, [], add_generation_prompt=body.get("add_generation_prompt", True)
        )
    return httpx.Response(200, json={"count": len(tokens), "tokens": tokens})


async def _costs() -> TemplateCosts:
    async with httpx.AsyncClient(transport=httpx.MockTransport(_tokenize)) as http:
        return await calibrate(http, "http://server", "model")


def _react(program_id: str, root: int = 40) -> Program:
    return Program(
        program_id,
        "react",
        0.0,
        "react",
        300,
        root,
        (
            LLMNode("c0", (), "main", None, 0, 20),
            WaitNode("t1", ("c0",), "main", "tool", "search", 1.0, "c0", 60),
            LLMNode("c2", ("t1",), "main", "t1", 25, 15),
        ),
    )


def test_filler_words_are_single_tokens_and_the_stream_is_prefix_consistent() -> None:
    assert len(FILLER_WORDS) == len(set(FILLER_WORDS)) == 256
    assert all(w.isalpha() and len(w) <= 6 for w in FILLER_WORDS)
    text = filler(500, "a", "b")
    assert len(TOKENIZER.encode(text, add_bos=False)) == 500
    assert text.startswith(filler(120, "a", "b"))
    assert filler(50, "a", "c") != filler(50, "a", "b")


@pytest.mark.anyio
async def test_calibration_measures_the_template() -> None:
    costs = await _costs()
    assert costs.measured and costs.tokens_per_word == 1.0
    system = [{"role": "system", "content": "x"}]
    bare = len(TOKENIZER.render_chat(chat_messages([]), [], add_generation_prompt=True))
    assert _count(system) == costs.system_overhead + 1 + costs.generation_prompt
    assert bare == 1 + costs.generation_prompt  # BOS + the assistant header


@pytest.mark.anyio
async def test_calibration_falls_back_to_llama3_defaults_without_tokenize() -> None:
    async with httpx.AsyncClient(
        transport=httpx.MockTransport(lambda request: httpx.Response(404))
    ) as http:
        costs = await calibrate(http, "http://server", "model")
    assert costs == TemplateCosts() and not costs.measured


@pytest.mark.anyio
async def test_prompts_have_the_trace_token_counts_and_extend_their_context() -> None:
    costs = await _costs()
    builder = PromptBuilder(_react("p1"), costs)
    c0 = builder.prompt("c0")
    assert _count(c0.messages) == c0.expected_prompt_tokens == c0.trace_prompt_tokens == 340
    answer = filler(20, "answer")
    builder.record_output("c0", answer, 20)
    builder.record_wait("t1")
    c2 = builder.prompt("c2")
    assert c2.trace_prompt_tokens == 340 + 20 + 60 + 25
    assert _count(c2.messages) == c2.expected_prompt_tokens == c2.trace_prompt_tokens
    assert c2.messages[: len(c0.messages)] == c0.messages
    assert c2.messages[len(c0.messages)] == {"role": "assistant", "content": answer}
    assert "messages" not in repr(c2) and answer not in repr(c2)


def _lats(program_id: str) -> Program:
    return Program(
        program_id,
        "mcts",
        0.0,
        "mcts",
        30,
        40,
        (
            LLMNode("e0", (), "b0", None, 10, 20, template="mcts-expand", template_tokens=120),
            WaitNode("t0", ("e0",), "b0", "tool", "environment", 1.0, "e0", 60),
            LLMNode("v0", ("t0",), "b0", "t0", 15, 30, template="mcts-value", template_tokens=90),
            LLMNode(
                "r0", ("v0",), "main", "t0", 5, 25, template="mcts-reflect", template_tokens=70
            ),
            LLMNode(
                "e1",
                ("r0",),
                "b0",
                "t0",
                10,
                20,
                template="mcts-expand",
                template_tokens=120,
                memory=("r0",),
            ),
        ),
    )


@pytest.mark.anyio
async def test_templates_and_memory_have_the_trace_token_counts_and_layout() -> None:
    costs = await _costs()
    builder = PromptBuilder(_lats("m1"), costs)
    e0 = builder.prompt("e0")
    assert _count(e0.messages) == e0.expected_prompt_tokens == e0.trace_prompt_tokens == 200
    builder.record_output("e0", filler(20, "a"), 20)
    builder.record_wait("t0")
    v0 = builder.prompt("v0")
    assert v0.trace_prompt_tokens == 30 + 90 + 40 + 10 + 20 + 60 + 15
    assert _count(v0.messages) == v0.expected_prompt_tokens == v0.trace_prompt_tokens
    # same system message, then each call type's own template; the value prompt carries the
    # expansion's question, instruction and answer after its template, not the expand template
    assert v0.messages[0] == e0.messages[0]
    assert v0.messages[1] != e0.messages[1] and v0.messages[1]["role"] == "user"
    assert v0.messages[2:4] == e0.messages[2:4]
    builder.record_output("v0", filler(30, "b"), 30)
    builder.prompt("r0")
    reflection = filler(25, "c")
    builder.record_output("r0", reflection, 25)
    e1 = builder.prompt("e1")
    assert e1.trace_prompt_tokens == 30 + 120 + 25 + 40 + 10 + 20 + 60 + 10
    assert _count(e1.messages) == e1.expected_prompt_tokens == e1.trace_prompt_tokens
    # the expand template, shared; with a memory message it gives up that message's own tokens
    # and is then a prefix of the full one
    template = e1.messages[1]["content"]
    assert e0.messages[1]["content"].startswith(template)
    assert len(e0.messages[1]["content"].split()) - len(template.split()) == (
        costs.words_for(costs.assistant_overhead)
    )
    assert e1.messages[2] == {"role": "assistant", "content": reflection}
    # another program sends the same templates
    other = PromptBuilder(_lats("m2"), costs).prompt("e0").messages
    assert other[:2] == e0.messages[:2] and other[2] != e0.messages[2]


@pytest.mark.anyio
async def test_system_prompt_is_shared_by_kind_and_nothing_else_is() -> None:
    costs = await _costs()
    first = PromptBuilder(_react("p1"), costs).prompt("c0").messages
    second = PromptBuilder(_react("p2", root=80), costs).prompt("c0").messages
    assert first[0] == second[0] and first[0]["role"] == "system"
    assert first[1] != second[1]
    other = Program("m1", "mapreduce", 0.0, "mapreduce", 300, 40, _react("x").nodes)
    assert PromptBuilder(other, costs).prompt("c0").messages[0] != first[0]


@pytest.mark.anyio
async def test_short_segments_stay_within_the_template_overhead() -> None:
    costs = await _costs()
    program = Program(
        "tiny",
        "react",
        0.0,
        "react",
        3,  # shorter than the system message's own overhead
        2,
        (
            LLMNode("c0", (), "main", None, 0, 5),
            WaitNode("t1", ("c0",), "main", "tool", "search", 1.0, "c0", 1),
            LLMNode("c2", ("t1",), "main", "t1", 2, 5),
        ),
    )
    builder = PromptBuilder(program, costs)
    c0 = builder.prompt("c0")
    assert _count(c0.messages) == c0.expected_prompt_tokens
    builder.record_output("c0", filler(5, "o"), 5)
    builder.record_wait("t1")
    c2 = builder.prompt("c2")
    assert _count(c2.messages) == c2.expected_prompt_tokens
    limit = costs.system_overhead + costs.generation_prompt + 2 * costs.assistant_overhead
    assert 0 <= c2.expected_prompt_tokens - c2.trace_prompt_tokens <= limit


def test_base_url_must_end_in_v1() -> None:
    assert check_base_url("http://h:8000/v1/") == "http://h:8000"
    with pytest.raises(ReplayError, match="ending in /v1"):
        check_base_url("http://h:8000")
    with pytest.raises(ReplayError, match="http"):
        check_base_url("h:8000/v1")


@pytest.mark.anyio
async def test_no_message_is_ever_empty() -> None:
    # Segments too short for the template's overhead, no system prompt, an empty answer:
    # each would otherwise be a message with empty content (sglang-router refuses it).
    costs = await _costs()
    program = Program(
        "tiny",
        "react",
        0.0,
        "react",
        0,
        1,
        (
            LLMNode("c0", (), "main", None, 1, 1),
            WaitNode("t1", ("c0",), "main", "tool", "search", 1.0, "c0", 1),
            LLMNode("c2", ("t1",), "main", "t1", 1, 1, template="tpl", template_tokens=1),
        ),
    )
    builder = PromptBuilder(program, costs)
    c0 = builder.prompt("c0")
    builder.record_output("c0", "", 0)
    builder.record_wait("t1")
    c2 = builder.prompt("c2")
    for prompt in (c0, c2):
        assert prompt.messages and all(m["content"].strip() for m in prompt.messages), prompt
        assert _count(prompt.messages) == prompt.expected_prompt_tokens
    assert c2.messages[len(c0.messages) + 1]["role"] == "assistant"
