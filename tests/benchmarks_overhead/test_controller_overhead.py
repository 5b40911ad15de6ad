"""``benchmarks/controller_overhead.py``'s parts that need no controller: its options, the
agent-like prompts, its streamed answer's framing and the report (the run itself starts a
controller and takes a minute: not in CI)."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from agentrt_controller.service.http.sse import SseScanner
from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(30)

overhead = load_benchmark("controller_overhead")


def test_prompt_sizes_are_parsed_and_bad_ones_named() -> None:
    assert overhead.word_counts("1000, 32000,128000") == [1000, 32000, 128000]
    assert overhead.word_counts("") == []
    for bad in ("1k", "0,10"):
        with pytest.raises(argparse.ArgumentTypeError, match=bad):
            overhead.word_counts(bad)


def test_long_prompts_are_histories_that_the_next_call_repeats() -> None:
    first, second = (json.loads(overhead.prompt_body(2500, n)) for n in (1, 2))
    history, last = first["messages"][:-1], first["messages"][-1]
    assert [len(m["content"].split()) for m in history] == [1000, 1000, 500]
    assert second["messages"][:-1] == history and second["messages"][-1] != last
    assert first["max_tokens"] == 1


def test_the_streamed_answer_counts_as_its_chunks_with_usage() -> None:
    scanner = SseScanner(strip_usage_chunk=False)
    out, counted = scanner.feed(b"".join(overhead.STREAM_EVENTS))
    assert counted == overhead.STREAM_CHUNKS
    assert scanner.usage is not None and scanner.usage["completion_tokens"] == counted
    assert out.endswith(b"data: [DONE]\n\n")


def _result() -> dict[str, Any]:
    median = {
        "direct_p50_ms": 0.03, "via_p50_ms": 0.6, "added_p50_ms": 0.57, "direct_p99_ms": 0.05,
        "via_p99_ms": 0.9, "added_p99_ms": 0.85, "direct_calls_per_s": 60000.0,
        "via_calls_per_s": 2000.0, "controller_cpu_us_per_call": 450.0,
        "calls_per_controller_cpu_s": 2222.0, "controller_cpu_us_per_chunk": 12.0,
        "controller_cpu_us_per_call_1000_words": 650.0,
        "controller_cpu_us_per_call_128000_words": 4200.0,
    }  # fmt: skip
    return {
        "admission_window": "32", "calls_per_rep": 300, "reps": 3, "concurrency": 32,
        "seconds_per_rate_run": 2.0, "seconds_per_stream_run": 2.0, "stream_chunks": 64,
        "prompt_words": [1000, 128000], "prompt_seconds": 2.0, "machine": "x86_64",
        "load_average": [1.0, 2.0], "policies": {"fcfs": {"median": median}},
    }  # fmt: skip


def test_the_report_has_the_cpu_per_chunk_and_against_the_prompt() -> None:
    text = overhead.markdown(_result())
    row = next(line for line in text.splitlines() if line.startswith("| `fcfs` | **12.0**"))
    assert row == "| `fcfs` | **12.0** | 83,333 | 650 | 4,200 | **6.46×** |"
    assert "128,000-word prompt" in text
    without = _result() | {"seconds_per_stream_run": 0, "prompt_words": []}
    assert "per streamed chunk" not in overhead.markdown(without)
