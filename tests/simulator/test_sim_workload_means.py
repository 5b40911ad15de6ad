"""Sampled workload statistics match the Autellix workload means (docs/simulator.md §3) within
5 % over a large sample.

"Prompt tokens per call" is the fresh prompt tokens a program sends (system prompt and first
input once, then every new message / observation), divided by its calls — see
docs/simulator.md for why the engine-visible prompt (which grows with the context) cannot be.
"""

from __future__ import annotations

import random

import pytest

from agentrt_sim.workloads.generate import build_generator, generate_programs
from agentrt_sim.workloads.program import LLMNode, Program, WaitNode

pytestmark = pytest.mark.timeout(120)

# (workload, programs to draw, calls/program, fresh prompt tokens/call, output tokens/call)
WORKLOAD_MEANS = [
    ("chatbot", 20_000, 6.66, 256.0, 277.0),
    ("react", 10_000, 10.75, 735.0, 34.1),
    ("mcts", 1_000, 159.7, 467.0, 72.6),
]


def _draw(workload: str, count: int, seed: int = 7) -> list[Program]:
    generator = build_generator(workload)
    rng = random.Random(seed)
    return [generator.draw(rng, f"{workload}-{i}", 0.0) for i in range(count)]


@pytest.mark.parametrize(("workload", "count", "calls", "prompt", "output"), WORKLOAD_MEANS)
def test_means_match_the_brief_within_5_percent(
    workload: str, count: int, calls: float, prompt: float, output: float
) -> None:
    programs = _draw(workload, count)
    total_calls = sum(p.llm_calls() for p in programs)
    calls_mean = total_calls / len(programs)
    prompt_mean = sum(p.fresh_prompt_tokens() for p in programs) / total_calls
    output_mean = sum(p.output_tokens() for p in programs) / total_calls
    assert calls_mean == pytest.approx(calls, rel=0.05)
    assert prompt_mean == pytest.approx(prompt, rel=0.05)
    assert output_mean == pytest.approx(output, rel=0.05)


def test_lengths_are_heavy_tailed_and_bounded() -> None:
    chats = _draw("chatbot", 20_000)
    turns = sorted(p.llm_calls() for p in chats)
    assert turns[-1] <= 80  # the documented maximum
    assert turns[len(turns) // 2] < 6.66  # median below the mean: a long right tail
    reacts = _draw("react", 5_000)
    assert max(p.llm_calls() for p in reacts) <= 70


def test_mapreduce_chunks_match_parrot() -> None:
    programs = _draw("mapreduce", 2_000)
    maps = [
        (p, n)
        for p in programs
        for n in p.nodes
        if isinstance(n, LLMNode) and n.node_id.startswith("m")
    ]
    prompt = sum(
        p.system_prompt_tokens + p.root_prompt_tokens + n.new_prompt_tokens for p, n in maps
    )
    assert prompt / len(maps) == pytest.approx(1084, rel=0.05)
    assert sum(n.output_tokens for _, n in maps) / len(maps) == pytest.approx(50, rel=0.05)
    assert len(maps) / len(programs) == pytest.approx(16, rel=0.05)
    for program in programs[:50]:  # the reduce call depends on every map call
        reduce = program.nodes[-1]
        assert isinstance(reduce, LLMNode) and len(reduce.parents) == len(program.nodes) - 1


def test_mcts_has_the_lats_shape() -> None:
    (program,) = _draw("mcts", 1)
    program.validate()
    kinds = {type(n).__name__ for n in program.nodes}
    assert kinds == {"LLMNode", "WaitNode"}
    first = [n for n in program.nodes if not n.parents]
    assert len(first) == 5  # the first iteration expands 5 children in parallel
    assert len({n.thread_id for n in first}) == 5
    tools = [n for n in program.nodes if isinstance(n, WaitNode)]
    assert all(n.kind == "tool" and 0.05 <= n.duration_s <= 10 for n in tools)


def test_poisson_arrivals_rate_and_mixed_shares() -> None:
    programs = generate_programs("mixed", rate_per_s=1.0, duration_s=2000.0, seed=3)
    assert len(programs) / 2000.0 == pytest.approx(1.0, rel=0.05)
    arrivals = [p.arrival_s for p in programs]
    assert arrivals == sorted(arrivals) and arrivals[0] >= 0 and arrivals[-1] < 2000.0
    shares = {
        k: sum(p.kind == k for p in programs) / len(programs) for k in ("chatbot", "react", "mcts")
    }
    assert all(share == pytest.approx(1 / 3, abs=0.04) for share in shares.values()), shares


def test_generation_is_deterministic_per_seed() -> None:
    one = generate_programs("mixed", rate_per_s=1.0, duration_s=200.0, seed=11)
    two = generate_programs("mixed", rate_per_s=1.0, duration_s=200.0, seed=11)
    other = generate_programs("mixed", rate_per_s=1.0, duration_s=200.0, seed=12)
    assert one == two
    assert one != other


def test_every_generated_program_is_a_valid_dag() -> None:
    for workload in ("chatbot", "react", "mapreduce", "mcts"):
        for program in _draw(workload, 30, seed=5):
            program.validate()
