"""Sampled workload statistics match the Autellix workload means (docs/simulator.md §3,
"Calibration") within 5 % over a large sample (seed 7).

"Prompt tokens per call" has two calibrations: ``engine`` (the default) matches each call's
whole prompt — what an engine reports as ``prompt_tokens`` (``Program.engine_prompt_tokens``) —
and ``fresh`` matches the tokens a program adds that did not come from its own earlier prompts
or outputs (system prompt and first input once, then every new message / observation;
``Program.fresh_prompt_tokens``).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentrt.errors import ConfigError
from agentrt_sim.workloads.generate import build_generator, generate_programs, parse_workload_params
from agentrt_sim.workloads.program import LLMNode, Program, WaitNode

pytestmark = pytest.mark.timeout(120)

# (workload, programs to draw, calls/program, prompt tokens/call, output tokens/call)
WORKLOAD_MEANS = [
    ("chatbot", 20_000, 6.66, 256.0, 277.0),
    ("react", 10_000, 10.75, 735.0, 34.1),
    ("mcts", 1_000, 159.7, 467.0, 72.6),
]


def _draw(
    workload: str, count: int, seed: int = 7, calibration: str | None = None
) -> list[Program]:
    overrides: dict[str, dict[str, Any]] = {}
    if calibration is not None:
        overrides = {workload: {"prompt_calibration": calibration}}
    generator = build_generator(workload, overrides)
    rng = random.Random(seed)
    return [generator.draw(rng, f"{workload}-{i}", 0.0) for i in range(count)]


def _means(programs: list[Program]) -> tuple[float, float, float, float]:
    """Calls / program; engine-visible, fresh and output tokens / call."""
    calls = sum(p.llm_calls() for p in programs)
    return (
        calls / len(programs),
        sum(p.engine_prompt_tokens() for p in programs) / calls,
        sum(p.fresh_prompt_tokens() for p in programs) / calls,
        sum(p.output_tokens() for p in programs) / calls,
    )


@pytest.mark.parametrize(("workload", "count", "calls", "prompt", "output"), WORKLOAD_MEANS)
def test_default_engine_visible_means_match_the_paper_within_5_percent(
    workload: str, count: int, calls: float, prompt: float, output: float
) -> None:
    calls_mean, engine_mean, fresh_mean, output_mean = _means(_draw(workload, count))
    assert calls_mean == pytest.approx(calls, rel=0.05)
    assert engine_mean == pytest.approx(prompt, rel=0.05)
    assert output_mean == pytest.approx(output, rel=0.05)
    assert fresh_mean < engine_mean  # not the fresh calibration: contexts or a shared prefix


@pytest.mark.parametrize(("workload", "count", "calls", "prompt", "output"), WORKLOAD_MEANS)
def test_fresh_calibration_means_match_the_paper_within_5_percent(
    workload: str, count: int, calls: float, prompt: float, output: float
) -> None:
    calls_mean, engine_mean, fresh_mean, output_mean = _means(
        _draw(workload, count, calibration="fresh")
    )
    assert calls_mean == pytest.approx(calls, rel=0.05)
    assert fresh_mean == pytest.approx(prompt, rel=0.05)
    assert output_mean == pytest.approx(output, rel=0.05)
    # The contexts grow: the engine sees several times the paper's prompt per call.
    assert engine_mean > 4 * prompt


def test_fresh_calibration_keeps_the_pre_calibration_sizes() -> None:
    """``fresh`` reproduces the earlier workloads: the same system prompts and shapes."""
    sizes = {
        kind: _draw(kind, 1, calibration="fresh")[0].system_prompt_tokens
        for kind in ("chatbot", "react", "mcts")
    }
    assert sizes == {"chatbot": 64, "react": 1500, "mcts": 800}
    (chat,) = _draw("chatbot", 1, seed=3, calibration="fresh")
    calls = [n for n in chat.nodes if isinstance(n, LLMNode)]
    assert [n.context for n in calls[1:]] == [n.node_id for n in calls[:-1]]  # history re-sent


def test_engine_chatbot_turns_are_stateless_and_react_contexts_grow() -> None:
    (chat,) = [p for p in _draw("chatbot", 50, seed=3) if p.llm_calls() > 2][:1]
    assert chat.root_prompt_tokens == 0
    assert all(n.context is None for n in chat.nodes if isinstance(n, LLMNode))
    (react,) = [p for p in _draw("react", 50, seed=3) if p.llm_calls() > 2][:1]
    assert react.system_prompt_tokens == 200
    calls = [n for n in react.nodes if isinstance(n, LLMNode)]
    tools = [n for n in react.nodes if isinstance(n, WaitNode)]
    assert [n.context for n in calls[1:]] == [n.node_id for n in tools]  # observation appended
    assert [n.context for n in tools] == [n.node_id for n in calls[:-1]]


def test_prompt_calibration_option_reaches_every_calibrated_kind() -> None:
    overrides = parse_workload_params(
        ["react.prompt_calibration=engine"], prompt_calibration="fresh"
    )
    assert overrides == {
        "chatbot": {"prompt_calibration": "fresh"},
        "react": {"prompt_calibration": "engine"},
        "mcts": {"prompt_calibration": "fresh"},
    }
    assert parse_workload_params(["mcts.system_prompt_tokens=300"]) == {
        "mcts": {"system_prompt_tokens": 300}
    }
    with pytest.raises(ConfigError, match="prompt_calibration"):
        parse_workload_params([], prompt_calibration="visible")
    with pytest.raises(ConfigError, match="prompt_calibration"):
        build_generator("mixed", {"react": {"prompt_calibration": "visible"}})
    with pytest.raises(ConfigError, match="too long"):
        build_generator("react", {"react": {"system_prompt_tokens": 800}})


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
