"""The workloads of today's agents (``coding``, ``research``, ``agents``) match their published
calibration (docs/simulator.md, "Coding, research, agents") over a seed, take overrides, refuse
bad parameters by name, and run through ``agentrt bench sim``."""

from __future__ import annotations

import collections
import itertools
import json
import random
import statistics

import pytest

from agentrt.cli import main
from agentrt.errors import ConfigError
from agentrt_sim.tokens import TokenSpace
from agentrt_sim.workloads.coding import CodingWorkload
from agentrt_sim.workloads.generate import build_generator, parse_workload_params
from agentrt_sim.workloads.program import LLMNode, Program, WaitNode
from agentrt_sim.workloads.research import slowest_tenth_share

pytestmark = pytest.mark.timeout(60)


def _draw(
    workload: str, count: int, items: list[str] | None = None, seed: int = 7
) -> list[Program]:
    generator = build_generator(workload, parse_workload_params(items or []))
    rng = random.Random(seed)
    return [generator.draw(rng, f"p{i}", 0.0) for i in range(count)]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _waits(programs: list[Program]) -> list[float]:
    return [n.duration_s for p in programs for n in p.nodes if isinstance(n, WaitNode)]


def _within(measured: float, target: float, tolerance: float) -> bool:
    return abs(measured - target) <= tolerance * target


# --- coding -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def coding() -> list[Program]:
    return _draw("coding", 3000)


def test_coding_calls_match_codex_on_swe_bench_pro(coding: list[Program]) -> None:
    calls = [float(p.llm_calls()) for p in coding]
    assert _within(statistics.mean(calls), 33, 0.05)
    assert _within(_quantile(calls, 0.5), 30, 0.1)
    assert _within(_quantile(calls, 0.9), 57, 0.1)
    assert _within(_quantile(calls, 0.99), 90, 0.15)


def test_coding_context_grows_from_first_to_last_call(coding: list[Program]) -> None:
    prompts = [p.call_prompt_tokens() for p in coding]
    assert all(a < b for calls in prompts for a, b in itertools.pairwise(calls))
    assert _within(statistics.mean(calls[0] for calls in prompts), 12_400, 0.03)
    last = [float(calls[-1]) for calls in prompts]
    assert _within(statistics.mean(last), 84_500, 0.05)
    assert _within(_quantile(last, 0.9), 130_000, 0.1)
    outputs = statistics.mean(p.output_tokens() / p.llm_calls() for p in coding)
    assert _within(outputs, 515, 0.05)
    # Within a program each call re-reads the previous prompt: >= 94 % of input is a prefix hit
    # (Codex: 94 %), counting the repository's context as fresh once per program.
    params = CodingWorkload().params
    fresh = sum(p.fresh_prompt_tokens() + params.repo_tokens for p in coding)
    assert 1 - fresh / sum(p.engine_prompt_tokens() for p in coding) >= 0.94


def test_coding_tool_waits_are_heavy_tailed(coding: list[Program]) -> None:
    waits = _waits(coding)
    assert _within(_quantile(waits, 0.5), 0.3, 0.05)
    assert _within(_quantile(waits, 0.9), 13.6, 0.08)
    assert {n.name for p in coding for n in p.nodes if isinstance(n, WaitNode)} == {
        "shell",
        "edit",
        "search",
        "test",
    }


def test_coding_programs_of_one_repo_share_the_system_prompt_and_repo_context() -> None:
    programs = _draw("coding", 40)
    params = CodingWorkload().params
    space = TokenSpace()
    by_repo: dict[str, list[int]] = {}
    shared = params.system_tokens + params.repo_tokens
    for program in programs:
        first = program.nodes[0]
        assert isinstance(first, LLMNode) and first.template is not None
        ids = space.system_prompt(program.system_prompt_id, program.system_prompt_tokens)
        ids = ids + space.template(first.template, first.template_tokens)
        assert len(ids) == shared == CodingWorkload().shared_prefix_tokens()
        assert by_repo.setdefault(first.template, ids) == ids
        for node in program.nodes:
            assert not isinstance(node, LLMNode) or node.template == first.template
    assert len(by_repo) > 1  # several repositories; programs of one reuse its context


def test_coding_parameters_override_and_bad_ones_are_refused() -> None:
    items = ["coding.calls_mean=5", "coding.repo_tokens=60000", "coding.system_tokens=15000"]
    items += ["coding.issue_tokens_mean=5000", "coding.final_context_tokens_mean=100000"]
    programs = _draw("coding", 500, items)
    assert _within(statistics.mean(p.llm_calls() for p in programs), 5, 0.1)
    assert _within(statistics.mean(p.call_prompt_tokens()[0] for p in programs), 80_000, 0.03)
    with pytest.raises(ConfigError, match="coding has no field 'calls'"):
        parse_workload_params(["coding.calls=3"])
    with pytest.raises(ConfigError, match=r"coding\.repos=many.*not a int"):
        parse_workload_params(["coding.repos=many"])
    with pytest.raises(ConfigError, match="final_context_tokens_mean"):
        build_generator("coding", parse_workload_params(["coding.final_context_tokens_mean=100"]))
    with pytest.raises(ConfigError, match="final_context_tokens_mean 84500 needs"):
        build_generator("coding", parse_workload_params(["coding.calls_mean=3"]))
    with pytest.raises(ConfigError, match="p50 < p90"):
        build_generator("coding", parse_workload_params(["coding.tool_p90_s=0.1"]))


# --- research ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def research() -> list[Program]:
    return _draw("research", 3000)


def test_research_matches_continuum_bfcl_web_search(research: list[Program]) -> None:
    assert _within(statistics.mean(p.llm_calls() for p in research), 6, 0.05)
    final = [float(p.call_prompt_tokens()[-1]) for p in research]
    assert _within(statistics.mean(final), 93_000, 0.05)
    fetches = _waits(research)
    assert _within(statistics.mean(fetches), 1.9, 0.05)
    assert 0.45 <= slowest_tenth_share(fetches) <= 0.55
    assert all(p.system_prompt_tokens == 1500 for p in research)  # the shared prefix


def test_research_fans_out_parallel_fetches_read_by_the_next_call(
    research: list[Program],
) -> None:
    program = max(research[:50], key=lambda p: len(p.nodes))
    program.validate()
    nodes = {n.node_id: n for n in program.nodes}
    calls = [n for n in program.nodes if isinstance(n, LLMNode)]
    for call, after in itertools.pairwise(calls):
        fetches = [nodes[parent] for parent in after.parents]
        assert fetches and all(
            isinstance(f, WaitNode) and f.parents == (call.node_id,) for f in fetches
        )
        assert len({f.thread_id for f in fetches}) == len(fetches)  # in parallel
        pages = [f.result_tokens for f in fetches if isinstance(f, WaitNode)]
        assert after.context == fetches[0].node_id and after.new_prompt_tokens == sum(pages[1:])
    prompts = program.call_prompt_tokens()
    assert all(a < b for a, b in itertools.pairwise(prompts))


def test_research_parameters_override_and_bad_ones_are_refused() -> None:
    programs = _draw("research", 500, ["research.calls_mean=3", "research.fanout_mean=1"])
    assert _within(statistics.mean(p.llm_calls() for p in programs), 3, 0.05)
    assert statistics.mean(len(_waits([p])) / (p.llm_calls() - 1) for p in programs) == 1
    with pytest.raises(ConfigError, match="research has no field 'fanout'"):
        parse_workload_params(["research.fanout=3"])
    with pytest.raises(ConfigError, match="final_context_tokens_mean 1000 needs"):
        build_generator(
            "research", parse_workload_params(["research.final_context_tokens_mean=1000"])
        )
    with pytest.raises(ConfigError, match="fetch_mean_s"):
        build_generator("research", parse_workload_params(["research.fetch_mean_s=500"]))


# --- agents -----------------------------------------------------------------------------------


def test_agents_mixes_coding_research_and_react_in_settable_shares() -> None:
    kinds = collections.Counter(p.kind for p in _draw("agents", 3000))
    assert set(kinds) == {"coding", "research", "react"}
    assert all(_within(count, 1000, 0.08) for count in kinds.values())
    items = ["agents.coding_share=3", "agents.react_share=0", "coding.calls_mean=4"]
    items += ["coding.final_context_tokens_mean=20000"]
    programs = _draw("agents", 2000, items)
    kinds = collections.Counter(p.kind for p in programs)
    assert set(kinds) == {"coding", "research"} and _within(kinds["coding"], 1500, 0.06)
    coding = [p for p in programs if p.kind == "coding"]
    assert _within(statistics.mean(p.llm_calls() for p in coding), 4, 0.1)  # kind's own params
    assert all(p.program_id.startswith(f"{p.kind}-") for p in programs)


def test_agents_bad_shares_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"agents research_share must be >= 0, got -1\.0"):
        build_generator("agents", parse_workload_params(["agents.research_share=-1"]))
    zero = ["agents.coding_share=0", "agents.research_share=0", "agents.react_share=0"]
    with pytest.raises(ConfigError, match="at least one of coding_share"):
        build_generator("agents", parse_workload_params(zero))
    with pytest.raises(ConfigError, match="agents has no field 'mcts_share'"):
        parse_workload_params(["agents.mcts_share=1"])


# --- bench sim --------------------------------------------------------------------------------

#: Small programs so that a few seconds of simulated time finish them.
_TINY: dict[str, list[str]] = {
    "coding": [
        "coding.calls_mean=3",
        "coding.system_tokens=200",
        "coding.repo_tokens=1000",
        "coding.issue_tokens_mean=100",
        "coding.final_context_tokens_mean=3000",
        "coding.output_tokens_mean=20",
        "coding.tool_max_s=0.5",
    ],
    "research": [
        "research.calls_mean=3",
        "research.final_context_tokens_mean=3000",
        "research.answer_output_tokens_mean=20",
        "research.plan_output_tokens_mean=20",
        "research.fetch_mean_s=0.2",
        "research.fetch_max_s=0.5",
    ],
}
_TINY["agents"] = [*_TINY["coding"], *_TINY["research"], "react.tool_time_scale=0.1"]


@pytest.mark.parametrize("workload", sorted(_TINY))
def test_bench_sim_runs_each_workload(workload: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "sim", "--workload", workload, "--rate", "2", "--duration", "3"]
    argv += ["--policy", "fcfs", "--json", "--no-progress"]
    for item in _TINY[workload]:
        argv += ["--workload-param", item]
    assert main(argv) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["workload"] == workload
    assert result["programs_completed"] > 0 and result["programs_unfinished"] == 0
