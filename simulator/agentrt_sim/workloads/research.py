"""Research agent (web search, docs/simulator.md §3, "Coding, research, agents").

A program answers one question: each call but the last plans queries and fans out to parallel
web fetches (one thread per fetch); the next call waits for all of them and reads every result:
its prompt extends the first fetch's prefix (the call + that fetch's result) and carries the
other fetches' results as fresh tokens; the last call synthesises the answer. The context grows
by the planning outputs and every fetched page.

Calibration (each default with its source in docs/simulator.md): calls per program and the
synthesis call's context from Continuum's BFCL web-search workload (arXiv 2511.02230: ~6 turns,
~93 K tokens, tool 1.9 s); fetch times are lognormal with σ = z₀.₉ ≈ 1.28, the shape at which
the slowest 10 % of fetches take half of all fetch time (same paper). The fan-out, the system
prompt, the question and the outputs are assumptions.

A fetch's ``result_tokens`` is what it returns; the results of fetches 2.. of a round appear
again as the next call's fresh tokens, so :meth:`Program.fresh_prompt_tokens` counts them twice
(the engine-visible prompts, :meth:`Program.call_prompt_tokens`, are exact).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from agentrt.errors import ConfigError
from agentrt_sim.workloads.base import SampledWorkload
from agentrt_sim.workloads.distributions import ClippedLogNormal, DiscreteLogNormal
from agentrt_sim.workloads.program import LLMNode, Node, WaitNode

__all__ = ["ResearchParams", "ResearchWorkload", "slowest_tenth_share"]

#: z of the standard normal's 90th percentile: the lognormal shape at which the top 10 % of
#: draws carry half of the total.
SLOWEST_TENTH_HALF_SIGMA = 1.2815515655446004


@dataclass(frozen=True)
class ResearchParams:
    """Assumptions of the research workload (all configurable; sources in docs/simulator.md)."""

    #: Mean LLM calls per program, the synthesis included (Continuum, BFCL web search: ~6).
    calls_mean: float = 6.0
    #: Tail shape and bounds of the calls (assumption).
    calls_sigma: float = 0.4
    calls_max: int = 24
    #: Mean parallel fetches per planning call (assumption) and the most.
    fanout_mean: float = 3.0
    fanout_max: int = 16
    #: Mean prompt of the synthesis call, context included (Continuum: ~93 K tokens per
    #: program); fixes the mean fetched page.
    final_context_tokens_mean: float = 93000.0
    #: Shared system prompt with the search tools' schemas (tokens; assumption).
    system_prompt_tokens: int = 1500
    #: Mean question (tokens; assumption).
    question_tokens_mean: float = 100.0
    #: Mean output of a planning call (queries; tokens; assumption).
    plan_output_tokens_mean: float = 150.0
    #: Mean output of the synthesis call (the answer; tokens; assumption).
    answer_output_tokens_mean: float = 1000.0
    #: Longest fetched page (tokens).
    page_tokens_max: int = 65536
    #: Tail shape of token lengths.
    length_sigma: float = 0.8
    #: Mean fetch time (Continuum, BFCL web search: 1.9 s).
    fetch_mean_s: float = 1.9
    #: Lognormal shape of fetch times (1.28: the slowest 10 % are half of the fetch time).
    fetch_sigma: float = SLOWEST_TENTH_HALF_SIGMA
    #: Fetch time clip (seconds).
    fetch_min_s: float = 0.02
    fetch_max_s: float = 120.0


class ResearchWorkload(SampledWorkload[ResearchParams]):
    """Draws research programs; samplers are calibrated once at construction."""

    kind = "research"

    def __init__(self, params: ResearchParams | None = None) -> None:
        params = params or ResearchParams()
        super().__init__(params, params.system_prompt_tokens)
        if params.calls_mean <= 1:
            raise ConfigError("research calls_mean must be > 1 (fetch rounds sit between calls)")
        self._calls = DiscreteLogNormal(
            params.calls_mean, params.calls_sigma, low=2, high=params.calls_max
        )
        self._fanout = DiscreteLogNormal(params.fanout_mean, 0.5, low=1, high=params.fanout_max)
        self._question = ClippedLogNormal(params.question_tokens_mean, params.length_sigma, 1, 8192)
        self._plan = ClippedLogNormal(params.plan_output_tokens_mean, params.length_sigma, 1, 4096)
        self._answer = ClippedLogNormal(
            params.answer_output_tokens_mean, params.length_sigma, 1, 8192
        )
        # Synthesis prompt = system + question + (n - 1) * (plan output + fanout * page).
        rounds = params.calls_mean - 1
        page_mean = (
            params.final_context_tokens_mean
            - params.system_prompt_tokens
            - params.question_tokens_mean
            - rounds * params.plan_output_tokens_mean
        ) / (rounds * params.fanout_mean)
        if not 1 <= page_mean <= params.page_tokens_max:
            raise ConfigError(
                f"research final_context_tokens_mean {params.final_context_tokens_mean:g} needs "
                f"pages of {page_mean:.0f} tokens on average, outside [1, page_tokens_max "
                f"{params.page_tokens_max}]"
            )
        #: Mean fetched page (tokens), solved from the synthesis context.
        self.page_tokens_mean = page_mean
        self._page = ClippedLogNormal(page_mean, params.length_sigma, 1, params.page_tokens_max)
        if not 0 <= params.fetch_min_s <= params.fetch_mean_s <= params.fetch_max_s:
            raise ConfigError(
                "research needs 0 <= fetch_min_s <= fetch_mean_s <= fetch_max_s, got "
                f"{params.fetch_min_s}, {params.fetch_mean_s}, {params.fetch_max_s}"
            )
        self._fetch = ClippedLogNormal(
            params.fetch_mean_s, params.fetch_sigma, params.fetch_min_s, params.fetch_max_s
        )

    def _draw_nodes(self, rng: random.Random) -> tuple[int, list[Node]]:
        """Draws, in order: calls, question, then per round the plan's output, the fan-out and
        each fetch (duration, page); finally the answer's output."""
        calls = self._calls.sample(rng)
        question = self._question.sample_int(rng)
        nodes: list[Node] = []
        context: str | None = None
        parents: tuple[str, ...] = ()
        fresh = 0
        for k in range(calls - 1):
            call = LLMNode(f"c{k}", parents, "main", context, fresh, self._plan.sample_int(rng))
            nodes.append(call)
            fetches = [
                WaitNode(
                    f"f{k}.{j}",
                    (call.node_id,),
                    f"fetch{j}",
                    "tool",
                    "fetch",
                    self._fetch.sample(rng),
                    context=call.node_id,
                    result_tokens=self._page.sample_int(rng),
                )
                for j in range(self._fanout.sample(rng))
            ]
            nodes.extend(fetches)
            parents = tuple(f.node_id for f in fetches)
            context = fetches[0].node_id
            fresh = sum(f.result_tokens for f in fetches[1:])
        answer = self._answer.sample_int(rng)
        nodes.append(LLMNode(f"c{calls - 1}", parents, "main", context, fresh, answer))
        return question, nodes


def slowest_tenth_share(durations: list[float]) -> float:
    """Share of the total time taken by the slowest 10 % of ``durations``."""
    ordered = sorted(durations, reverse=True)
    top = ordered[: max(1, math.ceil(len(ordered) / 10))]
    return sum(top) / sum(ordered)
