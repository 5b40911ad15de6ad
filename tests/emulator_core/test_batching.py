"""Continuous batching: chunked prefill, first-token step, decode counts, limits."""

from __future__ import annotations

import pytest

from .helpers import engine, request, run

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("prompt", "output", "budget", "chunks", "ttft_step"),
    [
        # prompt fits in one step: the first token comes with the prefill
        (10, 3, 64, [10, 1, 1], 1),
        # 20 tokens with a budget of 8: chunks of 8, 8, 4; first token in step 3
        (20, 3, 8, [8, 8, 4, 1, 1], 3),
        # exactly two chunks
        (16, 2, 8, [8, 8, 1], 2),
        # one-token prompt (worked examples): prefill and first token in step 1
        (1, 4, 8, [1, 1, 1, 1], 1),
    ],
)
def test_chunked_prefill_and_first_token_step(
    prompt: int, output: int, budget: int, chunks: list[int], ttft_step: int
) -> None:
    core = engine(max_num_batched_tokens=budget)
    core.add_request(request("r", prompt, output))
    trace = run(core)
    computed = [p.num_computed_tokens for s in trace.steps for p in s.progress]
    assert computed == chunks
    assert trace.first_token_step["r"] == ttft_step
    assert trace.tokens["r"] == output
    assert trace.finish_step["r"] == len(chunks)
    new_tokens = [p.new_tokens for s in trace.steps for p in s.progress]
    assert new_tokens == [0] * (ttft_step - 1) + [1] * output


@pytest.mark.parametrize("outputs", [[1], [5, 2, 9], [3, 3, 3, 3]])
def test_each_request_decodes_exactly_its_output(outputs: list[int]) -> None:
    core = engine()
    for i, n in enumerate(outputs):
        core.add_request(request(f"r{i}", 5, n))
    trace = run(core)
    assert trace.tokens == {f"r{i}": n for i, n in enumerate(outputs)}
    # all admitted together: each finishes after its own number of steps
    assert trace.finish_step == {f"r{i}": n for i, n in enumerate(outputs)}
    stats = core.stats()
    assert stats.generation_tokens == sum(outputs)
    assert stats.prompt_tokens == 5 * len(outputs)
    assert stats.num_steps == max(outputs)
    assert not core.has_unfinished()
    assert core.step(trace.now_s) is None


def test_finished_requests_free_their_blocks() -> None:
    core = engine(num_gpu_blocks=20)
    core.add_request(request("a", 40, 10))
    result = core.step(0.0)
    assert result is not None
    assert core.num_free_blocks == 20 - 3  # 40 tokens in blocks of 16
    run(core)
    assert core.num_free_blocks == 20
    assert core.stats().kv_cache_usage == 0.0
    assert core.num_running == core.num_waiting == 0


@pytest.mark.parametrize(("max_num_seqs", "n_requests"), [(1, 3), (2, 5), (4, 4)])
def test_max_num_seqs_bounds_the_batch(max_num_seqs: int, n_requests: int) -> None:
    core = engine(max_num_seqs=max_num_seqs)
    for i in range(n_requests):
        core.add_request(request(f"r{i}", 4, 3))
    first = core.step(0.0)
    assert first is not None
    assert [p.request_id for p in first.progress] == [f"r{i}" for i in range(max_num_seqs)]
    assert core.num_running == max_num_seqs
    assert core.num_waiting == n_requests - max_num_seqs
    trace = run(core)
    assert all(len(s.progress) <= max_num_seqs for s in trace.steps)


def test_token_budget_decodes_first_then_prefill_chunks() -> None:
    core = engine(max_num_batched_tokens=10)
    core.add_request(request("d1", 3, 5))
    core.add_request(request("d2", 3, 5))
    assert core.step(0.0) is not None  # both prefill (6 tokens) and sample their first token
    core.add_request(request("long", 30, 2, first_token=100))
    result = core.step(1.0)
    assert result is not None
    computed = {p.request_id: p.num_computed_tokens for p in result.progress}
    # decodes first (1 token each), the long prompt gets the remaining 8
    assert computed == {"d1": 1, "d2": 1, "long": 8}
    assert [p.request_id for p in result.progress] == ["d1", "d2", "long"]
    assert sum(computed.values()) <= 10


def test_fig2_helper_unit_steps_map_to_output_tokens() -> None:
    """Autellix (arXiv 2502.13965) Fig. 2 building block: 2 slots, calls of 4, 3, 1 and 4
    decode steps at t=0.

    A (4) and B (3) run first; C (1) takes B's slot at t=3 and finishes at t=4 with A; D (4)
    starts at t=4 and finishes at t=8. Every step costs 1.0 s on the unit-step profile."""
    core = engine("unit-step", max_num_seqs=2)
    for name, steps in [("A", 4), ("B", 3), ("C", 1), ("D", 4)]:
        core.add_request(request(name, 1, steps))
    trace = run(core)
    assert trace.finish_s == {"A": 4.0, "B": 3.0, "C": 4.0, "D": 8.0}
    assert all(s.duration_s == 1.0 for s in trace.steps)


def test_durations_follow_the_profile() -> None:
    core = engine("a100-llama3-8b")
    core.add_request(request("r", 2000, 3))
    prefill = core.step(0.0)
    decode = core.step(1.0)
    assert prefill is not None and decode is not None
    assert prefill.duration_s > 10 * decode.duration_s  # 2,000 tokens of prefill vs 1 decode
    assert 0.008 <= decode.duration_s <= 0.01
