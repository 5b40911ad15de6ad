"""The service charged for a finished call, and the clairvoyant estimates SRPT needs.

**Cost-model hook.** :data:`~agentrt_controller.cost_model.CostFunction` (the controller's
type) is any callable ``(uncached_prompt_tokens, generated_tokens) -> seconds``. The simulator
charges ``cost(prompt_len - cached_tokens, output_tokens)`` to the scheduler's ``on_finish`` —
the same facts the real controller has (``usage.prompt_tokens`` / ``cached_tokens`` /
``completion_tokens``), never wall time, which includes the engine's own queueing
(docs/scheduling.md, "What is charged as service"). The controller's calibratable cost model
plugs in here.

**What ``agentrt bench sim`` charges by default** is the controller's default cost model
(``agentrt_controller.defaults.COST``, parsed once into a
:class:`~agentrt_controller.cost_model.CostModel` whose ``service_s`` is the charge), so
attained service means the same number in the simulator and in ``agentrt controller serve``.
``--cost roofline`` (and a :class:`~agentrt_sim.sim.Simulation` given no cost model) charges
the engine profile's roofline instead (:func:`roofline_cost_model`; the profile is an
:class:`agentrt_serving.hardware.HardwareProfile`, the step time emulator/core/profiles.py's)::

    cost = uncached_prompt_tokens · prefill_s_per_token + generated_tokens · decode_step_s
    prefill_s_per_token = 2 · params / (peak_flops · efficiency)      (compute bound)
    decode_step_s       = step_time_s(profile, 0 prefill, 1 decode, 0 KV)  (a lone decode step)

i.e. the call's modelled GPU time had it run alone. On ``unit-step`` it is exactly the number
of output tokens (every step 1 s, prefill free), so service is counted in decode steps as in
Autellix's Fig. 2 (docs/scheduling.md).

**Oracle (SRPT only).** ``OracleFigures.service_s`` = ``cost(expected_uncached, output_tokens)``
where ``expected_uncached`` is the prompt minus the part the program's own previous call left
in the KV cache (its prompt + output; the system prompt for a program's first calls) — the
uncached work if nothing was evicted. ``OracleFigures.program_remaining_s`` = the sum of the
oracle service of the program's LLM calls that have not finished, this one included (total
remaining work, not the critical path).
"""

from __future__ import annotations

from agentrt_controller.cost_model import CostFunction, CostModel
from agentrt_emulator.core.profiles import step_time_s
from agentrt_serving.hardware import HardwareProfile
from agentrt_sim.plan import ProgramPlan
from agentrt_sim.workloads.program import LLMNode

__all__ = [
    "default_cost_model",
    "expected_uncached_tokens",
    "oracle_costs",
    "roofline_cost_model",
]


def roofline_cost_model(profile: HardwareProfile) -> CostFunction:
    """The default cost model of ``profile`` (see the module docstring)."""
    prefill_s_per_token = 2.0 * profile.params / (profile.peak_flops * profile.efficiency)
    decode_step_s = step_time_s(profile, 0, 1, 0)

    def cost(uncached_prompt_tokens: int, generated_tokens: int) -> float:
        return uncached_prompt_tokens * prefill_s_per_token + generated_tokens * decode_step_s

    return cost


def expected_uncached_tokens(plan: ProgramPlan) -> list[int]:
    """Per node: prompt tokens a call must compute if its program's own KV stayed cached.

    The KV left by the nearest LLM call up the context chain (its prompt + output) is assumed
    cached; so is the system prompt. Waits contribute their result tokens as uncached. A call
    with a template (``agentrt_sim.workloads.program``) is assumed to find only the system
    prompt and its template cached. 0 for wait nodes.
    """
    program = plan.program
    kv_len = [0] * len(program.nodes)  # cached-by-construction prefix of each node's prefix
    uncached = [0] * len(program.nodes)
    for i in range(len(program.nodes)):
        ctx = plan.context[i]
        base = program.system_prompt_tokens if ctx < 0 else kv_len[ctx]
        if plan.is_llm[i]:
            node = program.nodes[i]
            if isinstance(node, LLMNode) and node.template is not None:
                base = program.system_prompt_tokens + node.template_tokens
            uncached[i] = plan.prompt_len[i] - base
            kv_len[i] = plan.prefix_len[i]
        else:
            kv_len[i] = base
    return uncached


def oracle_costs(plan: ProgramPlan, cost: CostFunction) -> list[float]:
    """Per node: the oracle service of each LLM call (seconds); 0.0 for waits."""
    uncached = expected_uncached_tokens(plan)
    nodes = plan.program.nodes
    return [
        cost(uncached[i], getattr(nodes[i], "output_tokens", 0)) if plan.is_llm[i] else 0.0
        for i in range(len(nodes))
    ]


def default_cost_model() -> CostModel:
    """What ``agentrt bench sim`` charges with no ``--cost`` (its ``service_s``): the
    controller's default cost model (``agentrt_controller.defaults.COST``), as ``agentrt
    controller serve`` charges."""
    from agentrt_controller import defaults

    return CostModel.from_mapping(defaults.COST)
