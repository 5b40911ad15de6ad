"""ReAct (BFCL-like, docs/simulator.md §3): LLM ↔ tool alternation with a shared system prompt.

Call 1 reads the system prompt (instructions + tool schemas) and the user's request; it picks a
tool; the tool's observation is appended; call 2 extends call 1's prompt + output +
observation, and so on; the last call answers. Calibrated means (Autellix arXiv 2502.13965):
10.75 calls per program (max 70), 735 prompt tokens and 34.1 output tokens per call. Under
``prompt_calibration="engine"`` (default) the 735 are each call's whole prompt, context
included: the system prompt is 200 tokens, the request 40, and the mean observation is solved
exactly from the distribution of calls (≈ 20 tokens). Under ``fresh`` they are the system
prompt (1,500) and request (100) once plus every observation (≈ 646), per call
(docs/simulator.md, "Calibration").
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agentrt.errors import ConfigError
from agentrt_sim.workloads.base import (
    SampledWorkload,
    calibrated,
    check_calibration,
    sequential_calls,
)
from agentrt_sim.workloads.distributions import ClippedLogNormal, DiscreteLogNormal
from agentrt_sim.workloads.program import Node, WaitNode
from agentrt_sim.workloads.tools import ToolMix

__all__ = ["ReactParams", "ReactWorkload"]


@dataclass(frozen=True)
class ReactParams:
    """Assumptions of the ReAct workload (all configurable)."""

    #: Mean LLM calls per program; docs/simulator.md §3.
    calls_mean: float = 10.75
    #: Most calls in one program; docs/simulator.md §3.
    calls_max: int = 70
    #: Tail shape of the number of calls.
    calls_sigma: float = 0.8
    #: What ``prompt_tokens_mean`` measures: ``engine`` (each call's whole prompt) or
    #: ``fresh`` (system prompt and request once, then every observation).
    prompt_calibration: str = "engine"
    #: Mean prompt tokens per call, as ``prompt_calibration`` measures them; docs/simulator.md §3.
    prompt_tokens_mean: float = 735.0
    #: Shared system prompt with tool schemas (tokens); ``None``: 200 (engine), 1,500 (fresh).
    system_prompt_tokens: int | None = None
    #: Mean user request (tokens); ``None``: 40 (engine), 100 (fresh).
    request_tokens_mean: float | None = None
    #: Longest observation (tokens).
    observation_tokens_max: int = 16384
    #: Mean output per call (tokens): a thought and a tool call; docs/simulator.md §3.
    output_tokens_mean: float = 34.1
    #: Longest output (tokens).
    output_tokens_max: int = 1024
    #: Tail shape of token lengths.
    length_sigma: float = 0.8
    #: Multiplies every tool's mean duration (0 = instant tools).
    tool_time_scale: float = 1.0
    #: Tool duration clip (seconds).
    tool_min_s: float = 0.05
    tool_max_s: float = 10.0


_SYSTEM_PROMPT_TOKENS = {"engine": 200, "fresh": 1500}
_REQUEST_TOKENS = {"engine": 40.0, "fresh": 100.0}


class ReactWorkload(SampledWorkload[ReactParams]):
    """Draws ReAct programs; samplers are calibrated once at construction."""

    kind = "react"

    def __init__(self, params: ReactParams | None = None) -> None:
        params = params or ReactParams()
        calibration = check_calibration(self.kind, params.prompt_calibration)
        system = calibrated(params.system_prompt_tokens, calibration, _SYSTEM_PROMPT_TOKENS)
        request_mean = calibrated(params.request_tokens_mean, calibration, _REQUEST_TOKENS)
        super().__init__(params, system)
        if params.calls_mean <= 1:
            raise ConfigError("react calls_mean must be > 1 (observations sit between calls)")
        self._calls = DiscreteLogNormal(
            params.calls_mean, params.calls_sigma, low=1, high=params.calls_max
        )
        self._request = ClippedLogNormal(request_mean, params.length_sigma, 1, 8192)
        if calibration == "engine":
            # Call k's prompt = system + request + k * (output + observation), so the mean
            # per call is system + request + (output + observation) * E[n(n-1)/2] / E[n].
            pairs_per_call = self._calls.expectation(
                lambda n: n * (n - 1) / 2
            ) / self._calls.expectation(float)
            observation_mean = (
                params.prompt_tokens_mean - system - request_mean
            ) / pairs_per_call - params.output_tokens_mean
        else:
            # fresh = system + request + (calls - 1) * observation, averaged per call.
            observation_mean = (
                params.prompt_tokens_mean * params.calls_mean - system - request_mean
            ) / (params.calls_mean - 1)
        if observation_mean < 1:
            raise ConfigError("react system prompt too long for the requested prompt mean")
        self._observation = ClippedLogNormal(
            observation_mean, params.length_sigma, 1, params.observation_tokens_max
        )
        self._output = ClippedLogNormal(
            params.output_tokens_mean, params.length_sigma, 1, params.output_tokens_max
        )
        self._tools = ToolMix(
            scale=params.tool_time_scale, min_s=params.tool_min_s, max_s=params.tool_max_s
        )

    def _draw_nodes(self, rng: random.Random) -> tuple[int, list[Node]]:
        """One ReAct program: the request (root input), then call, tool, call, …; each tool's
        observation extends the next call's prompt, which has no other fresh tokens."""
        calls = self._calls.sample(rng)
        request = self._request.sample_int(rng)

        def tool(node_id: str, previous: str) -> WaitNode:
            name, duration_s = self._tools.draw(rng)
            return WaitNode(
                node_id,
                (previous,),
                "main",
                "tool",
                name,
                duration_s,
                context=previous,
                result_tokens=self._observation.sample_int(rng),
            )

        nodes = sequential_calls(
            calls,
            wait=tool,
            wait_prefix="t",
            extends="wait",
            fresh_tokens=lambda: 0,
            output_tokens=lambda: self._output.sample_int(rng),
        )
        return request, nodes
