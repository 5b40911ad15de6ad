"""The SSE scanner counts chunks as tokens, finds usage, and keeps bytes faithful."""

from __future__ import annotations

import json

import pytest

from agentrt_controller.service.sse import SseScanner

pytestmark = pytest.mark.timeout(10)


def _event(data: object) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


STREAM = (
    _event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"}}]})
    + _event({"choices": [{"index": 0, "delta": {"content": "b"}}], "usage": None})
    + _event({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}}]})
    + _event({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}})
    + b"data: [DONE]\n\n"
)


@pytest.mark.parametrize("piece", [1, 7, 64, len(STREAM)])
def test_counts_chunks_whatever_the_network_splits(piece: int) -> None:
    scanner = SseScanner(strip_usage_chunk=False)
    out, counted = b"", 0
    for start in range(0, len(STREAM), piece):
        forwarded, new = scanner.feed(STREAM[start : start + piece])
        out += forwarded
        counted += new
    out += scanner.flush()
    assert out == STREAM
    assert counted == scanner.chunks == 3
    assert scanner.usage == {"prompt_tokens": 9, "completion_tokens": 3}


def test_strips_only_the_usage_chunk_it_asked_for() -> None:
    scanner = SseScanner(strip_usage_chunk=True)
    out, _ = scanner.feed(STREAM)
    assert b'"usage": {"prompt' not in out
    assert out.endswith(b"data: [DONE]\n\n")
    assert out.count(b"data:") == 4


def test_garbage_is_passed_on_not_raised() -> None:
    scanner = SseScanner(strip_usage_chunk=True)
    junk = b'data: {"usage": broken\n\n: comment\n\ndata: \xff\n\nno terminator'
    out, counted = scanner.feed(junk)
    assert out + scanner.flush() == junk
    assert counted == 2
