"""Prefix hash chains: sharing, partial blocks, salts, incremental extension, determinism."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentrt_controller.routing import hashing
from agentrt_controller.routing.hashing import (
    MessageChains,
    extend_token_block_hashes,
    message_block_hashes,
    request_block_hashes,
    token_block_hashes,
)

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("length", "block", "expected"),
    [(0, 16, 0), (15, 16, 0), (16, 16, 1), (47, 16, 2), (48, 16, 3), (5, 1, 5)],
)
def test_one_element_per_full_block(length: int, block: int, expected: int) -> None:
    assert len(token_block_hashes(list(range(length)), block)) == expected


def test_prompts_share_exactly_their_common_full_blocks() -> None:
    base = list(range(100))
    other = [*base[:40], 999, *base[41:]]  # differs inside block 2 (tokens 32..47)
    a, b = token_block_hashes(base, 16), token_block_hashes(other, 16)
    assert a[:2] == b[:2]
    assert all(x != y for x, y in zip(a[2:], b[2:], strict=True))  # chained: all later differ


def test_extension_equals_hashing_the_whole_sequence() -> None:
    prompt = list(range(50))
    longer = prompt + list(range(1000, 1070))
    head = token_block_hashes(prompt, 16)
    assert tuple(extend_token_block_hashes(head, longer, 16)) == token_block_hashes(longer, 16)
    with pytest.raises(ValueError):
        extend_token_block_hashes(head, prompt[:10], 16)
    with pytest.raises(ValueError):
        token_block_hashes(prompt, 0)


def test_salt_separates_tenants() -> None:
    tokens = list(range(64))
    plain = token_block_hashes(tokens, 16)
    assert token_block_hashes(tokens, 16, salt="tenant-a") != plain
    assert token_block_hashes(tokens, 16, salt="tenant-a") != token_block_hashes(
        tokens, 16, salt="tenant-b"
    )
    assert token_block_hashes(tokens, 16, salt="") == plain  # empty salt = none


def test_chains_do_not_depend_on_the_process_hash_seed() -> None:
    code = (
        "from agentrt_controller.routing.hashing import token_block_hashes, message_block_hashes;"
        "print(token_block_hashes(list(range(40)), 8, salt='s')[-1],"
        "message_block_hashes([{'role': 'user', 'content': 'hello'}], salt='s')[-1])"
    )
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(result.stdout)
    assert len(outputs) == 1


def _chat(*contents: str) -> list[dict[str, str]]:
    """System prompt first, then alternating user / assistant messages."""
    roles = ["system"] + ["user" if i % 2 else "assistant" for i in range(1, len(contents))]
    return [{"role": r, "content": c} for r, c in zip(roles, contents, strict=True)]


def test_message_chains_align_at_message_boundaries() -> None:
    system = "You are a helpful agent. " * 40  # ~1,000 characters: several chunks
    first = message_block_hashes(_chat(system, "What is the weather?"))
    second = message_block_hashes(_chat(system, "What is the weather?", "Sunny.", "And tomorrow?"))
    assert second[: len(first)] == first
    assert len(second) > len(first)
    # A conversation that diverges in its second message shares only the system prompt.
    other = message_block_hashes(_chat(system, "Tell me a joke."))
    shared = sum(1 for x, y in zip(first, other, strict=False) if x == y)
    assert shared == len(message_block_hashes(_chat(system)))


def test_message_boundaries_matter_and_parts_and_tools_count() -> None:
    ab = message_block_hashes([{"role": "user", "content": "ab"}, {"role": "user", "content": "c"}])
    a_bc = message_block_hashes(
        [{"role": "user", "content": "a"}, {"role": "user", "content": "bc"}]
    )
    assert ab[-1] != a_bc[-1]
    parts = message_block_hashes([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert parts == message_block_hashes([{"role": "user", "content": "hi"}])
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {}}]}
    assert message_block_hashes([call]) != message_block_hashes([{"role": "assistant"}])
    assert len(message_block_hashes([{"role": "user", "content": "x" * 200}], block_tokens=16)) == 4
    with pytest.raises(ValueError):
        message_block_hashes([], block_tokens=0)


def test_the_message_memo_changes_nothing_but_the_work_and_stays_bounded() -> None:
    memo = MessageChains(max_bytes=40_000, min_bytes=1024)
    history: list[dict[str, object]] = [{"role": "system", "content": "be brief " * 200}]
    for turn in range(12):  # an agent's conversation, each call repeating the one before
        history.append({"role": "user", "content": f"step {turn} " + "data " * 700})
        for salt, blocks in (("tenant-a", 8192), ("tenant-b", 8192), ("tenant-a", 300)):
            plain = message_block_hashes(history, salt=salt, max_blocks=blocks)
            assert message_block_hashes(history, salt=salt, max_blocks=blocks, memo=memo) == plain
        body = {"model": "m", "messages": history}
        assert request_block_hashes(body, memo) == request_block_hashes(body)
        history.append({"role": "assistant", "content": "ok " + "x" * turn})  # short: not kept
    assert len(memo) > 0 and memo.held_bytes <= 40_000  # the oldest dropped
    roomy = MessageChains()
    first = message_block_hashes(history, salt="tenant-a", memo=roomy)
    held = len(roomy)
    assert message_block_hashes(history, salt="tenant-a", memo=roomy) == first
    assert len(roomy) == held == 13  # the second time every long message was looked up


def test_short_messages_held_by_their_strings_answer_as_hashing_does() -> None:
    """A usual ASCII message of one chain element (16 tokens of 4 bytes: its role, two
    separators and its content in 64 bytes) before the call's last is held by (chain before,
    role, content): a repeat is looked up, after another chain, under another role or with
    another text it is hashed; the memo of them is emptied when full. Every chain is the one
    hashing gives."""
    memo = MessageChains()
    system = {"role": "system", "content": "You are a helpful assistant."}
    texts = ("Say hello.", "Say hello!", "", "x" * 58, "x" * 59)  # 4 + 2 + 58 = 64 bytes
    for repeat in range(3):
        for text in texts:
            for role in ("user", "tool"):
                for messages in ([system, {"role": role, "content": text}],
                                 [{"role": role, "content": text}, system]):  # fmt: skip
                    for salt in (None, "m"):
                        plain = message_block_hashes(messages, salt=salt)
                        assert message_block_hashes(messages, salt=salt, memo=memo) == plain
                        body = {"model": salt, "messages": messages}
                        assert request_block_hashes(body, memo) == request_block_hashes(body)
        if repeat == 0:
            held = dict(memo._short)
    assert memo._short == held  # the repeats were looked up: nothing new, nothing changed
    contents = {content for _, _, content in held}
    assert "x" * 58 in contents and "x" * 59 not in contents  # two pieces: hashed each time
    # "Say hello." held first in the call (after each salt's seed), never last (after system)
    assert len({parent for parent, _, content in held if content == "Say hello."}) == 2
    assert len(memo) == 0  # no long message: the sampled memo holds none
    for number in range(hashing._SHORT_MESSAGES + 10):  # more than it holds: emptied once
        messages = [{"role": "user", "content": f"step {number}"}, system]
        assert message_block_hashes(messages, memo=memo) == message_block_hashes(messages)
    # len(held) + _SHORT_MESSAGES + 10 held in all: emptied once, full, then the rest held
    assert len(memo._short) == len(held) + 10


def test_the_memo_tells_apart_messages_alike_at_both_ends() -> None:
    """The memo is keyed by a message's length and ends; one that differs only in the middle
    is hashed, never taken for the one held."""
    memo = MessageChains(min_bytes=16)
    middle_a, middle_b = "a" * 2000, "b" * 2000
    for content in (middle_a, middle_b, middle_a, middle_b):
        messages = [{"role": "user", "content": "h" * 100 + content + "t" * 100}]
        assert message_block_hashes(messages, memo=memo) == message_block_hashes(messages)
    assert len(memo) == 1  # one key: the latest message held under it


def test_the_memo_keyed_by_parsed_text_answers_as_hashing_does() -> None:
    """The usual ASCII message is looked up by its strings (no canonical text built); every
    other shape by its bytes. Either way the chain is the one hashing gives: a message the
    chain ends in (at several rooms), the same text under another role, non-ASCII text, a
    message with a name, and a held message followed by the same text with one byte changed."""
    long_text = "tool output " * 400
    shapes: list[dict[str, object]] = [
        {"role": "system", "content": long_text},
        {"role": "critic", "content": long_text},  # same text, another role of its length
        {"role": "user", "content": "é " + long_text},  # not ASCII
        {"role": "user", "name": "bot", "content": long_text},  # not the usual message
        {"role": "assistant", "content": long_text[:-1] + "!"},  # differs at the end only
        {"content": long_text},  # no role
    ]
    memo = MessageChains(min_bytes=1024)
    conversations = [shapes[:cut] for cut in range(1, len(shapes) + 1)]
    conversations += [[shape] for shape in shapes]  # each first, after the same seed
    for repeat in range(2):
        for messages in conversations:
            for max_blocks in (8192, 150, 90, 75, 1):
                plain = message_block_hashes(messages, salt="s", max_blocks=max_blocks)
                kept = message_block_hashes(messages, salt="s", max_blocks=max_blocks, memo=memo)
                assert kept == plain, (repeat, len(messages), max_blocks)
    assert len(memo) > 0


def test_a_conversation_held_in_the_memo_answers_as_hashing_does() -> None:
    """A conversation that repeats one held (its messages compared whole) continues from the
    held chain: growing, cut by the chain's end, diverging in the middle after the same first
    two messages, with a short next step, a tool message, and a message dict changed by its
    caller after it was hashed."""
    memo = MessageChains(min_bytes=256)
    system = {"role": "system", "content": "rules " * 100}
    task = {"role": "user", "content": "task " * 100}
    history: list[dict[str, object]] = [system, task]
    for turn in range(8):
        history.append({"role": "assistant", "content": f"answer {turn} " * 60})
        if turn == 3:
            history.append({"role": "tool", "tool_call_id": "t1", "content": "out " * 80})
        for max_blocks in (8192, 40):
            for last in ("next step", f"other step {turn} " * 30):
                messages = [*history, {"role": "user", "content": last}]
                expected = message_block_hashes(messages, salt="s", max_blocks=max_blocks)
                kept = message_block_hashes(messages, salt="s", max_blocks=max_blocks, memo=memo)
                assert kept == expected, (turn, max_blocks, last[:10])
        diverged = [system, task, {"role": "assistant", "content": "elsewhere " * 50}]
        assert message_block_hashes(diverged, memo=memo, salt="s") == message_block_hashes(
            diverged, salt="s"
        )
    message_block_hashes(history, salt="s", memo=memo)  # held last
    history[2]["content"] = "changed after it was hashed " * 20  # the caller's own dict
    messages = [*history, {"role": "user", "content": "next step"}]
    assert message_block_hashes(messages, salt="s", memo=memo) == message_block_hashes(
        messages, salt="s"
    )


def test_a_held_conversation_ends_before_a_message_of_another_shape() -> None:
    """Messages equal under ``==`` may serialise differently when they hold numbers (``1 ==
    True``): a conversation is held only up to its first message of another shape than role
    and text, the rest is looked up message by message."""
    memo = MessageChains(min_bytes=256)
    head = [{"role": "system", "content": "rules " * 100}, {"role": "user", "content": "x " * 200}]
    for call_id in (1, True, 1.0):
        tool = {"role": "tool", "tool_call_id": call_id, "content": "out " * 80}
        messages = [*head, tool, {"role": "assistant", "content": "ok " * 100}]
        kept = message_block_hashes(messages, memo=memo)
        assert kept == message_block_hashes(messages), call_id


def test_programs_sharing_a_system_prompt_each_answer_as_hashing_does() -> None:
    """Several conversations under one first message (a shared system prompt), more of them
    than the memo holds per first message, each growing in turn."""
    memo = MessageChains(min_bytes=128)
    system = {"role": "system", "content": "shared rules " * 40}
    histories = [[system, {"role": "user", "content": f"task {n} " * 50}] for n in range(6)]
    for turn in range(4):
        for history in histories:
            history.append({"role": "assistant", "content": f"turn {turn} " * 40})
            messages = [*history, {"role": "user", "content": "go on"}]
            assert message_block_hashes(messages, memo=memo) == message_block_hashes(messages)
