"""Tree search in the shape of LATS on HotpotQA (docs/simulator.md §3).

Each iteration selects a tree state, **expands** it into ``children`` candidate actions in
parallel (one LLM call per child, each in its own thread), runs each action in the environment
(a tool, e.g. a search, whose observation extends the child's context), **evaluates** every
child with an LLM call, and with probability ``reflect_probability`` **reflects** on a failed
trajectory. The next iteration starts when all evaluations (and the reflection) are done.
**Prompt layout** (``prompt_layout``). ``lats`` (default under the ``engine`` calibration) is
LATS's own (Zhou et al., arXiv 2310.04406): each call type has its own template — instructions
and examples — before the question and the trajectory, and the reflections so far (the latest
``memory_reflections``) sit between the template and the question of the expand and value
prompts (``agentrt_sim.workloads.program``: ``template``, ``memory``). So a value call does not
extend its expand call's prompt, and each reflection changes the header of every later prompt:
the engine's prefix cache serves the shared system prompt and templates across programs, and a
question + trajectory only to calls under the same header. ``path`` (default under ``fresh``):
a child's calls extend its parent state's prefix (no templates, no memory), the layout before
templates existed; docs/simulator.md, "Calibration", measures both.

Calibrated means (Autellix arXiv 2502.13965): 159.7 calls per program, 467 prompt tokens and
72.6 output tokens per call. The relative sizes of expand / observation / evaluate / reflect
prompts and outputs are assumptions; one scale factor each for prompts and outputs makes the
means exact. Under ``prompt_calibration="engine"`` (default) the 467 are each call's whole
prompt: the tree path (the states' expand outputs and observations), the template and the
memory count, so their shares are measured on a seeded sample of tree shapes
(:func:`_path_weights`) and the prompt scale solved from it; the shared parts are small (system
20 and templates expand 120 / value 100 / reflect 80 under ``lats``; system 150 under ``path``;
question 40) and expansions short (expand : evaluate : reflect outputs = 30 : 110 : 150).
Under ``fresh`` the 467 are the system prompt (800) and question (60) once plus every new
prompt segment, per call (docs/simulator.md, "Calibration").
"""

from __future__ import annotations

import dataclasses
import functools
import random
import re
from dataclasses import dataclass
from typing import Any

from agentrt.errors import ConfigError
from agentrt_sim.workloads.base import SampledWorkload, calibrated, check_calibration
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
    #: What ``prompt_tokens_mean`` measures: ``engine`` (each call's whole prompt) or
    #: ``fresh`` (system prompt and question once, then every new prompt segment).
    prompt_calibration: str = "engine"
    #: Mean prompt tokens per call, as ``prompt_calibration`` measures them; docs/simulator.md §3.
    prompt_tokens_mean: float = 467.0
    #: Mean output tokens per call; docs/simulator.md §3.
    output_tokens_mean: float = 72.6
    #: Shared system prompt: instructions and few-shot examples (tokens); ``None``: 20
    #: (engine with the lats layout: the templates hold the instructions), 150 (engine, path
    #: layout), 800 (fresh).
    system_prompt_tokens: int | None = None
    #: ``lats`` (per-call-type templates, reflections in later prompts) or ``path`` (branches
    #: extend their tree path); ``None``: lats (engine), path (fresh).
    prompt_layout: str | None = None
    #: Template sizes of the expand, value and reflect prompts under ``lats`` (tokens).
    expand_template_tokens: int = 120
    evaluate_template_tokens: int = 100
    reflect_template_tokens: int = 80
    #: Reflections (the latest ones) carried in later expand and value prompts under ``lats``.
    memory_reflections: int = 1
    #: Mean question length (tokens); ``None``: 40 (engine), 60 (fresh).
    question_tokens_mean: float | None = None
    #: Relative prompt sizes: expand instruction, observation, evaluate, reflect.
    expand_prompt_weight: float = 40.0
    observation_weight: float = 400.0
    evaluate_prompt_weight: float = 150.0
    reflect_prompt_weight: float = 100.0
    #: Relative output sizes: expand (thought + action), evaluate (reasoning + score), reflect;
    #: ``None``: expand 30 and evaluate 110 (engine: expand outputs join the tree path, so
    #: they are kept short), expand 120 and evaluate 20 (fresh).
    expand_output_weight: float | None = None
    evaluate_output_weight: float | None = None
    reflect_output_weight: float = 150.0
    length_sigma: float = 0.8
    #: Mean environment-step (tool) duration (seconds).
    tool_mean_s: float = 0.8
    tool_min_s: float = 0.05
    tool_max_s: float = 10.0


_SYSTEM_PROMPT_TOKENS = {"engine": 150, "fresh": 800}
_LATS_SYSTEM_PROMPT_TOKENS = 20
_LAYOUTS = ("lats", "path")
_TEMPLATE_IDS = {"e": "mcts-expand", "v": "mcts-value", "r": "mcts-reflect"}
_QUESTION_TOKENS = {"engine": 40.0, "fresh": 60.0}
_EXPAND_OUTPUT_WEIGHT = {"engine": 30.0, "fresh": 120.0}
_EVALUATE_OUTPUT_WEIGHT = {"engine": 110.0, "fresh": 20.0}

#: Tree shapes drawn to measure the path's share of an engine-visible prompt (programs).
_PATH_SAMPLE_PROGRAMS = 400


class MctsWorkload(SampledWorkload[MctsParams]):
    """Draws tree searches; samplers are calibrated once at construction."""

    kind = "mcts"

    def __init__(self, params: MctsParams | None = None) -> None:
        p = params or MctsParams()
        calibration = check_calibration(self.kind, p.prompt_calibration)
        layout = p.prompt_layout or ("lats" if calibration == "engine" else "path")
        if layout not in _LAYOUTS:
            raise ConfigError(f"mcts prompt_layout must be one of {_LAYOUTS}, got {layout!r}")
        if min(p.expand_template_tokens, p.evaluate_template_tokens, p.reflect_template_tokens) < 0:
            raise ConfigError("mcts template sizes must be >= 0")
        if p.memory_reflections < 0:
            raise ConfigError("mcts memory_reflections must be >= 0")
        #: ``lats`` or ``path`` (see the module docstring).
        self.layout = layout
        self._templates = (
            {
                "e": p.expand_template_tokens,
                "v": p.evaluate_template_tokens,
                "r": p.reflect_template_tokens,
            }
            if layout == "lats"
            else {}
        )
        system_defaults = dict(_SYSTEM_PROMPT_TOKENS)
        if layout == "lats":
            system_defaults["engine"] = _LATS_SYSTEM_PROMPT_TOKENS
        system = calibrated(p.system_prompt_tokens, calibration, system_defaults)
        question_mean = calibrated(p.question_tokens_mean, calibration, _QUESTION_TOKENS)
        expand_output = calibrated(p.expand_output_weight, calibration, _EXPAND_OUTPUT_WEIGHT)
        evaluate_output = calibrated(p.evaluate_output_weight, calibration, _EVALUATE_OUTPUT_WEIGHT)
        super().__init__(p, system)
        if p.children < 1 or not 0 <= p.reflect_probability <= 1 or p.max_depth < 1:
            raise ConfigError("mcts needs children >= 1, 0 <= reflect_probability <= 1, depth >= 1")
        calls_per_iteration = 2 * p.children + p.reflect_probability
        iterations_mean = p.calls_mean / calls_per_iteration
        self._iterations = DiscreteLogNormal(
            iterations_mean, p.iterations_sigma, low=1, high=p.iterations_max
        )
        output_weight = (
            p.children * (expand_output + evaluate_output)
            + p.reflect_probability * p.reflect_output_weight
        )
        output_scale = p.output_tokens_mean * calls_per_iteration / output_weight
        if calibration == "engine":
            # Mean whole prompt per call = system + question + (expand outputs on the path) *
            # expand output size + (prompt weight on the path and of the call) * scale.
            shape = _path_weights(dataclasses.replace(p, prompt_layout=layout))
            prompt_scale = (
                p.prompt_tokens_mean
                - system
                - question_mean
                - shape.expand_outputs * expand_output * output_scale
                - shape.template_tokens
                - shape.memory_reflections * p.reflect_output_weight * output_scale
            ) / shape.weight
        else:
            # fresh = system + question + sum over iterations of the weighted prompt sizes.
            prompt_weight = (
                p.children
                * (p.expand_prompt_weight + p.observation_weight + p.evaluate_prompt_weight)
                + p.reflect_probability * p.reflect_prompt_weight
            )
            prompt_scale = (p.prompt_tokens_mean * p.calls_mean - system - question_mean) / (
                iterations_mean * prompt_weight
            )
        if prompt_scale <= 0:
            raise ConfigError("mcts system prompt too long for the requested prompt mean")
        #: Multiplies the prompt weights into mean token counts (tokens per weight unit).
        self.prompt_scale = prompt_scale

        def sized(weight: float, scale: float) -> ClippedLogNormal:
            return ClippedLogNormal(max(weight * scale, 1.0), p.length_sigma, 1, 16384)

        self._question = sized(question_mean, 1.0)
        self._expand_prompt = sized(p.expand_prompt_weight, prompt_scale)
        self._observation = sized(p.observation_weight, prompt_scale)
        self._evaluate_prompt = sized(p.evaluate_prompt_weight, prompt_scale)
        self._reflect_prompt = sized(p.reflect_prompt_weight, prompt_scale)
        self._expand_output = sized(expand_output, output_scale)
        self._evaluate_output = sized(evaluate_output, output_scale)
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
        reflections: list[str] = []
        for it in range(self._iterations.sample(rng)):
            memory = tuple(reflections[-p.memory_reflections :]) if p.memory_reflections else ()
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
                    **self._header("e", memory),
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
                    **self._header("v", memory),
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
                    **self._header("r", ()),
                )
                nodes.append(reflect)
                reflections.append(reflect.node_id)
                barrier = (*barrier, reflect.node_id)
            open_states += last_children
        return self._question.sample_int(rng), nodes

    def _header(self, kind: str, memory: tuple[str, ...]) -> dict[str, Any]:
        """The template and memory fields of a call of type ``kind`` (``lats`` only)."""
        if not self._templates:
            return {}
        return {
            "template": _TEMPLATE_IDS[kind],
            "template_tokens": self._templates[kind],
            "memory": memory,
        }

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


_NODE_TYPE = re.compile(r"i\d+([etvr])\d*")


@dataclass(frozen=True, slots=True)
class _Shape:
    """Per LLM call, means over a sample of tree shapes (see :func:`_path_weights`)."""

    #: Prompt weight its whole prompt holds (its own segment and those on its tree path).
    weight: float
    #: Expand outputs on its path.
    expand_outputs: float
    #: Template tokens (exact sizes, not weights).
    template_tokens: float
    #: Reflections in its memory.
    memory_reflections: float


@functools.lru_cache(maxsize=16)
def _path_weights(params: MctsParams) -> _Shape:
    """Per LLM call, over a seeded sample of tree shapes: the prompt weight its whole prompt
    holds (its own segment and those on its tree path), the expand outputs on its path, its
    template tokens and the reflections in its memory.

    The shape (iterations, selections, reflections) does not depend on token sizes, so the
    sample is drawn with the ``fresh`` sizes of the same tree parameters (and the same layout);
    the result is then exact for that sample (seed ``agentrt-mcts-path-weights``, 400 programs
    ≈ 64,000 calls).
    """
    weights = {
        "e": params.expand_prompt_weight,
        "t": params.observation_weight,
        "v": params.evaluate_prompt_weight,
        "r": params.reflect_prompt_weight,
    }
    shapes = MctsWorkload(
        dataclasses.replace(
            params, prompt_calibration="fresh", system_prompt_tokens=0, question_tokens_mean=1.0
        )
    )
    rng = random.Random("agentrt-mcts-path-weights")
    calls = 0
    weight_total = 0.0
    expand_total = 0
    template_total = 0
    memory_total = 0
    for index in range(_PATH_SAMPLE_PROGRAMS):
        program = shapes.draw(rng, f"shape-{index}", 0.0)
        # node id -> (prompt weight in its prefix, expand outputs in its prefix)
        prefix: dict[str, tuple[float, int]] = {}
        for node in program.nodes:
            match = _NODE_TYPE.fullmatch(node.node_id)
            assert match is not None, node.node_id
            kind = match.group(1)
            weight, expands = (0.0, 0) if node.context is None else prefix[node.context]
            weight += weights[kind]
            if isinstance(node, LLMNode):
                calls += 1
                weight_total += weight
                expand_total += expands
                template_total += node.template_tokens
                memory_total += len(node.memory)
                expands += kind == "e"
            prefix[node.node_id] = (weight, expands)
    return _Shape(
        weight_total / calls, expand_total / calls, template_total / calls, memory_total / calls
    )
