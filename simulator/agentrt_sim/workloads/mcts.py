"""Tree search in the shape of LATS on HotpotQA (docs/simulator.md §3).

Each iteration selects a tree state, **expands** it into ``children`` candidate actions in
parallel (one LLM call per child, each in its own thread), runs each action in the environment
(a tool, e.g. a search, whose observation extends the child's context), **evaluates** every
child with an LLM call, and with probability ``reflect_probability`` **reflects** on a failed
trajectory. The next iteration starts when all evaluations (and the reflection) are done.
Prompts share the tree path: a child's calls extend its parent state's prefix.

Calibrated means: 159.7 calls per program, 467 fresh prompt tokens and 72.6 output tokens per
call. The relative sizes of expand / observation / evaluate / reflect prompts and outputs are
assumptions; one scale factor each for prompts and outputs makes the means exact.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agentrt.errors import ConfigError
from agentrt_sim.workloads.base import SampledWorkload
from agentrt_sim.workloads.distributions import ClippedLogNormal, DiscreteLogNormal
from agentrt_sim.workloads.program import LLMNode, Node, WaitNode
from agentrt_sim.workloads.tools import ToolMix, ToolSpec

__all__ = ["MctsParams", "MctsWorkload"]


@dataclass(frozen=True)
class MctsParams:
    """Assumptions of the tree-search workload (all configurable)."""

    #: Mean LLM calls per program; docs/simulator.md §3.
    calls_mean: float = 159.7
    #: Children expanded per iteration (LATS n).
    children: int = 5
    #: Chance that an iteration ends with a reflection call.
    reflect_probability: float = 0.3
    #: Most iterations in one search.
    iterations_max: int = 40
    #: Tail shape of the number of iterations.
    iterations_sigma: float = 0.6
    #: Deepest state that is still expanded (tree levels).
    max_depth: int = 6
    #: Chance to deepen from the last iteration's children rather than pick any open state.
    deepen_probability: float = 0.7
    #: Mean fresh prompt tokens per call; docs/simulator.md §3.
    prompt_tokens_mean: float = 467.0
    #: Mean output tokens per call; docs/simulator.md §3.
    output_tokens_mean: float = 72.6
    #: Shared system prompt: instructions and few-shot examples (tokens).
    system_prompt_tokens: int = 800
    #: Mean question length (tokens).
    question_tokens_mean: float = 60.0
    #: Relative prompt sizes: expand instruction, observation, evaluate, reflect.
    expand_prompt_weight: float = 40.0
    observation_weight: float = 400.0
    evaluate_prompt_weight: float = 150.0
    reflect_prompt_weight: float = 100.0
    #: Relative output sizes: expand (thought + action), evaluate (score), reflect.
    expand_output_weight: float = 120.0
    evaluate_output_weight: float = 20.0
    reflect_output_weight: float = 150.0
    length_sigma: float = 0.8
    #: Mean environment-step (tool) duration (seconds).
    tool_mean_s: float = 0.8
    tool_min_s: float = 0.05
    tool_max_s: float = 10.0


class MctsWorkload(SampledWorkload[MctsParams]):
    """Draws tree searches; samplers are calibrated once at construction."""

    kind = "mcts"

    def __init__(self, params: MctsParams | None = None) -> None:
        super().__init__(params or MctsParams())
        p = self.params
        if p.children < 1 or not 0 <= p.reflect_probability <= 1 or p.max_depth < 1:
            raise ConfigError("mcts needs children >= 1, 0 <= reflect_probability <= 1, depth >= 1")
        calls_per_iteration = 2 * p.children + p.reflect_probability
        iterations_mean = p.calls_mean / calls_per_iteration
        self._iterations = DiscreteLogNormal(
            iterations_mean, p.iterations_sigma, low=1, high=p.iterations_max
        )
        # fresh = system + question + sum over iterations of the weighted prompt sizes * scale.
        prompt_weight = (
            p.children * (p.expand_prompt_weight + p.observation_weight + p.evaluate_prompt_weight)
            + p.reflect_probability * p.reflect_prompt_weight
        )
        prompt_scale = (
            p.prompt_tokens_mean * p.calls_mean - p.system_prompt_tokens - p.question_tokens_mean
        ) / (iterations_mean * prompt_weight)
        output_weight = (
            p.children * (p.expand_output_weight + p.evaluate_output_weight)
            + p.reflect_probability * p.reflect_output_weight
        )
        output_scale = p.output_tokens_mean * calls_per_iteration / output_weight
        if prompt_scale <= 0:
            raise ConfigError("mcts system prompt too long for the requested prompt mean")

        def sized(weight: float, scale: float) -> ClippedLogNormal:
            return ClippedLogNormal(max(weight * scale, 1.0), p.length_sigma, 1, 16384)

        self._question = sized(p.question_tokens_mean, 1.0)
        self._expand_prompt = sized(p.expand_prompt_weight, prompt_scale)
        self._observation = sized(p.observation_weight, prompt_scale)
        self._evaluate_prompt = sized(p.evaluate_prompt_weight, prompt_scale)
        self._reflect_prompt = sized(p.reflect_prompt_weight, prompt_scale)
        self._expand_output = sized(p.expand_output_weight, output_scale)
        self._evaluate_output = sized(p.evaluate_output_weight, output_scale)
        self._reflect_output = sized(p.reflect_output_weight, output_scale)
        self._tools = ToolMix(
            (ToolSpec("environment", 1.0, p.tool_mean_s),), min_s=p.tool_min_s, max_s=p.tool_max_s
        )

    def _draw_nodes(self, rng: random.Random) -> tuple[int, list[Node]]:
        """One search: its nodes, then the question (the root input, drawn last)."""
        p = self.params
        nodes: list[Node] = []
        # A tree state = (context node id or None for the root, depth).
        open_states: list[tuple[str | None, int]] = []
        selected: tuple[str | None, int] = (None, 0)
        barrier: tuple[str, ...] = ()
        last_children: list[tuple[str | None, int]] = []
        for it in range(self._iterations.sample(rng)):
            if it:
                selected = self._select(rng, open_states, last_children)
            state_context, depth = selected
            evaluations: list[str] = []
            last_children = []
            tools: list[str] = []
            for child in range(p.children):
                thread = f"b{child}"
                expand = LLMNode(
                    f"i{it}e{child}",
                    barrier,
                    thread,
                    state_context,
                    self._expand_prompt.sample_int(rng),
                    self._expand_output.sample_int(rng),
                )
                name, duration_s = self._tools.draw(rng)
                tool = WaitNode(
                    f"i{it}t{child}",
                    (expand.node_id,),
                    thread,
                    "tool",
                    name,
                    duration_s,
                    context=expand.node_id,
                    result_tokens=self._observation.sample_int(rng),
                )
                evaluate = LLMNode(
                    f"i{it}v{child}",
                    (tool.node_id,),
                    thread,
                    tool.node_id,
                    self._evaluate_prompt.sample_int(rng),
                    self._evaluate_output.sample_int(rng),
                )
                nodes += (expand, tool, evaluate)
                evaluations.append(evaluate.node_id)
                tools.append(tool.node_id)
                if depth + 1 < p.max_depth:
                    last_children.append((tool.node_id, depth + 1))
            barrier = tuple(evaluations)
            if rng.random() < p.reflect_probability:
                reflect = LLMNode(
                    f"i{it}r",
                    barrier,
                    "main",
                    rng.choice(tools),
                    self._reflect_prompt.sample_int(rng),
                    self._reflect_output.sample_int(rng),
                )
                nodes.append(reflect)
                barrier = (*barrier, reflect.node_id)
            open_states += last_children
        return self._question.sample_int(rng), nodes

    def _select(
        self,
        rng: random.Random,
        open_states: list[tuple[str | None, int]],
        last_children: list[tuple[str | None, int]],
    ) -> tuple[str | None, int]:
        """Pick the next state to expand and remove it from the open set."""
        pool = (
            last_children
            if last_children and rng.random() < self.params.deepen_probability
            else open_states
        )
        if not pool:
            return (None, 0)  # everything at max depth: restart from the root
        state = rng.choice(pool)
        open_states.remove(state)
        return state
