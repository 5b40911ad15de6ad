"""benchmarks/decision_cost.py: the state it builds and the decisions it times (no timing is
asserted: only that the rounds do what the report says they measure)."""

from __future__ import annotations

import argparse
import random

import pytest

from agentrt_controller.routing.prefix_index import DEFAULT_CAPACITY_BLOCKS
from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(120)

bench = load_benchmark("decision_cost")


def test_a_programs_calls_extend_its_previous_prompt_and_share_the_kind_head() -> None:
    live = bench.LivePrograms(3, random.Random(1))
    last: dict[str, tuple[int, ...]] = {}
    ended = 0
    for _ in range(400):
        call, end, start = live.next_call(0.0)
        chain = call.block_hashes
        kind = next(k for k, s in enumerate(live.system) if list(chain[: len(s)]) == s)
        assert kind in range(bench.KINDS)
        assert call.prompt_tokens == 16 * len(chain)
        assert len(chain) <= bench.SYSTEM_BLOCKS + bench.MAX_HISTORY_BLOCKS + 8
        previous = last.get(call.program.program_id)
        if previous is not None:  # a later call extends the earlier prompt
            assert chain[: len(previous)] == previous and len(chain) > len(previous)
        last[call.program.program_id] = chain
        if end is not None:
            ended += 1
            assert start is not None and start.program_id == call.program.program_id
            assert end.program_id != call.program.program_id
    assert ended > 0  # histories reached their cap and programs were replaced


def test_drain_rounds_route_every_call_and_fill_the_index() -> None:
    b = bench.Bench(16, 50, 1)
    assert len(b.dispatcher.table.keys()) == 50
    for _ in range(20):
        elapsed, admitted = b.drain_round(8)
        assert admitted == 8 and elapsed >= 0
    assert b.dispatcher.queued() == 0
    index = b.index
    assert index.capacity_blocks == DEFAULT_CAPACITY_BLOCKS
    assert index.size() > bench.SYSTEM_BLOCKS
    assert sum(index.size(backend) > 0 for backend in b.ids) > 1  # spread over backends


def test_steady_rounds_admit_one_call_to_the_one_backend_with_room() -> None:
    b = bench.Bench(8, 40, 2)
    for _ in range(10):
        b.drain_round(8)
    admitted: list[str] = []
    finish = b.finish

    def recording(call: object, backend: str) -> None:
        admitted.append(backend)
        finish(call, backend)

    b.finish = recording
    times = b.steady_rounds(queue=30, rounds=12)
    assert len(times) == 12
    assert len(admitted) == 12 + 30  # one per round, then the standing queue drained
    assert b.dispatcher.queued() == 0


def test_measure_and_report() -> None:
    row = bench.measure(4, programs=30, warmup_rounds=5, batch=8, reps=5, queue=10, seed=3)
    assert row["backends"] == 4 and row["live_programs"] == 30
    assert row["drain_us"] > 0 and row["steady_us"] > 0
    assert row["index_elements"] > 0 and row["index_bytes"] > 0
    args = argparse.Namespace(
        date="2026-12-03", programs=30, warmup_rounds=5, batch=8, queue=10, reps=5
    )
    text = bench.markdown([row, {**row, "backends": 16, "drain_us": 2 * row["drain_us"]}], args)
    assert text.startswith(bench.HEADING)
    assert "| 16 |" in text and "| 2.00 |" in text
