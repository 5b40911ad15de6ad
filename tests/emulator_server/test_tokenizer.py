"""The emulator's deterministic tokenizer and chat template."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt_emulator.tokenizer import NUM_SPECIAL, ChatMessage, Special, Tokenizer

pytestmark = pytest.mark.timeout(60)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_pieces_are_lossless_and_ids_in_range(text: str) -> None:
    tokenizer = Tokenizer()
    tokenized = tokenizer.tokenize(text)
    assert "".join(tokenized.pieces) == text
    assert all(NUM_SPECIAL <= token < tokenizer.vocab_size for token in tokenized.ids)


def test_english_prose_is_about_four_characters_per_token() -> None:
    text = (
        "Agent programs make many dependent calls to a language model, interleaved with tool "
        "calls and human input. Their shape is decided at run time by the model's output, and "
        "nobody knows in advance when they end. Serving engines see independent requests."
    )
    ratio = len(text) / Tokenizer().count(text)
    assert 3.3 <= ratio <= 5.5


def test_ids_are_stable_across_processes() -> None:
    text = 'The same text gives the same ids, 12345 times {"a": 1}.'
    code = f"from agentrt_emulator.tokenizer import Tokenizer; print(Tokenizer().encode({text!r}))"
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert other.stdout.strip() == str(Tokenizer().encode(text))


def test_different_text_gives_different_ids() -> None:
    tokenizer = Tokenizer()
    assert tokenizer.encode(" apple") != tokenizer.encode(" apples")
    assert tokenizer.encode("x", add_bos=True)[0] == Special.BOS


def test_long_words_are_split() -> None:
    assert Tokenizer().pieces(" internationalization") == [
        " int",
        "erna",
        "tion",
        "aliz",
        "atio",
        "n",
    ]


def test_chat_prefix_gives_token_prefix() -> None:
    """Turn k+1's prompt starts with turn k's prompt followed by turn k's output tokens."""
    tokenizer = Tokenizer()
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    turn1 = [ChatMessage("system", "Be brief."), ChatMessage("user", "Find the weather.")]
    prompt1 = tokenizer.render_chat(turn1, tools)
    output1 = [*tokenizer.assistant_body("", [("search", '{"city":"Paris"}')]).ids, Special.EOT]
    turn2 = [
        *turn1,
        ChatMessage("assistant", "", (("search", '{"city": "Paris"}'),)),
        ChatMessage("tool", "sunny"),
    ]
    prompt2 = tokenizer.render_chat(turn2, tools)
    assert prompt2[: len(prompt1) + len(output1)] == [*prompt1, *output1]
    assert prompt2[-1] != Special.EOT  # ends with the generation prompt


def test_generation_prompt_is_optional() -> None:
    tokenizer = Tokenizer()
    messages = [ChatMessage("user", "hi")]
    without = tokenizer.render_chat(messages, add_generation_prompt=False)
    with_prompt = tokenizer.render_chat(messages)
    assert with_prompt[: len(without)] == without
    assert without[-1] == Special.EOT


def test_long_texts_are_remembered_without_changing_tokens() -> None:
    from agentrt_emulator import tokenizer as module

    text = "The quick brown fox, 12345 times! " * 40  # longer than the memo's threshold
    fresh = Tokenizer()
    expected_pieces = fresh._cut(text)
    expected_ids = [fresh.piece_id(p) for p in expected_pieces]
    tok = Tokenizer()
    for _ in range(2):  # the second time from the memo
        assert tok.pieces(text) == expected_pieces
        assert tok.encode(text) == expected_ids
        assert list(tok.tokenize(text).ids) == expected_ids
        assert tok.count(text) == len(expected_ids)
    for i in range(module._MEMO_LIMIT + 10):
        tok.encode(f"{i} " + text)
    assert len(tok._memo) == module._MEMO_LIMIT
