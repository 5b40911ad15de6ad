"""Coding agent (SWE-agent / Codex-like, docs/simulator.md §3, "Coding, research, agents").

A program fixes one issue in one repository: every call is sent as the shared system prompt
(instructions + tool schemas, the same for every coding program), the repository's context (the
same for every program of that repository: a per-call template, see
:mod:`agentrt_sim.workloads.program`), the issue (the program's root input), then the history.
Call 1 reads the issue; it runs a tool (tests, a build, a search, an edit); the tool's result is
appended; call 2 extends call 1's prompt + output + result, and so on. The context therefore
grows by each call's output and each tool result.

Calibration (each default with its source in docs/simulator.md): calls per program from Codex
on SWE-bench Pro (mean 33, p50 30, p90 57, p99 90); the first call's context 12.4 K and the last
call's 84.5 K (same traces) fix the mean tool result given the mean output (~17 K output tokens
per task, i.e. ~515 per call); the split of the first context into system / repository / issue
follows the design notes' code-repair example (15 K : 60 K : 5 K); tool waits are lognormal
with TraceLab's recorded-session quantiles (p50 0.3 s, p90 13.6 s).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from agentrt.errors import ConfigError
from agentrt_sim.workloads.distributions import ClippedLogNormal, DiscreteLogNormal
from agentrt_sim.workloads.program import LLMNode, Node, Program, WaitNode

__all__ = ["CodingParams", "CodingWorkload", "QuantileLogNormal"]

#: z of the standard normal's 90th percentile.
_Z90 = 1.2815515655446004


@dataclass(frozen=True)
class QuantileLogNormal:
    """A lognormal given by its median and 90th percentile, clipped to ``[low, high]``
    (durations whose papers report quantiles, not means)."""

    p50: float
    p90: float
    low: float = 0.0
    high: float = math.inf

    def __post_init__(self) -> None:
        if not (0 < self.p50 < self.p90) or not (0 <= self.low <= self.high):
            raise ConfigError(
                f"need 0 < p50 < p90 and 0 <= low <= high, got p50={self.p50}, p90={self.p90}, "
                f"low={self.low}, high={self.high}"
            )

    @property
    def sigma(self) -> float:
        """Shape of the lognormal."""
        return math.log(self.p90 / self.p50) / _Z90

    def sample(self, rng: random.Random) -> float:
        """One draw."""
        return min(max(rng.lognormvariate(math.log(self.p50), self.sigma), self.low), self.high)


@dataclass(frozen=True)
class CodingParams:
    """Assumptions of the coding workload (all configurable; sources in docs/simulator.md)."""

    #: Mean LLM calls per program (Codex on SWE-bench Pro: 33).
    calls_mean: float = 33.0
    #: Tail shape of the calls (0.48 puts p50 / p90 / p99 near Codex's 30 / 57 / 90).
    calls_sigma: float = 0.48
    #: Fewest and most calls in one program.
    calls_min: int = 2
    calls_max: int = 200
    #: Distinct repositories; programs of one repository share its context (assumption).
    repos: int = 8
    #: Shared system prompt + tool schemas, the same for every coding program (tokens).
    system_tokens: int = 2325
    #: Repository context, the same for every program of one repository (tokens).
    repo_tokens: int = 9300
    #: Mean issue text, the program's own first input (tokens).
    issue_tokens_mean: float = 775.0
    #: Mean prompt of a program's last call, context included (Codex: 84.5 K tokens); fixes
    #: the mean tool result.
    final_context_tokens_mean: float = 84500.0
    #: Mean output per call (Codex: ~17 K output tokens per task / 33 calls).
    output_tokens_mean: float = 515.0
    #: Longest output (tokens).
    output_tokens_max: int = 8192
    #: Longest tool result (tokens).
    result_tokens_max: int = 32768
    #: Tail shape of token lengths (outputs, results, issues).
    length_sigma: float = 0.8
    #: Median and 90th percentile of a tool wait (TraceLab: 0.3 s, 13.6 s).
    tool_p50_s: float = 0.3
    tool_p90_s: float = 13.6
    #: Tool wait clip (seconds).
    tool_min_s: float = 0.01
    tool_max_s: float = 600.0


#: Tool names of a coding agent and their shares (names only: one duration law for all).
_TOOLS: tuple[tuple[str, float], ...] = (
    ("shell", 0.4),
    ("edit", 0.25),
    ("search", 0.2),
    ("test", 0.15),
)


class CodingWorkload:
    """Draws coding programs; samplers are calibrated once at construction."""

    kind = "coding"

    def __init__(self, params: CodingParams | None = None) -> None:
        params = params or CodingParams()
        self.params = params
        if params.repos < 1:
            raise ConfigError(f"coding repos must be >= 1, got {params.repos}")
        if params.system_tokens < 0 or params.repo_tokens < 0:
            raise ConfigError("coding system_tokens and repo_tokens must be >= 0")
        self._calls = DiscreteLogNormal(
            params.calls_mean, params.calls_sigma, low=params.calls_min, high=params.calls_max
        )
        self._issue = ClippedLogNormal(params.issue_tokens_mean, params.length_sigma, 1, 65536)
        self._output = ClippedLogNormal(
            params.output_tokens_mean, params.length_sigma, 1, params.output_tokens_max
        )
        first = params.system_tokens + params.repo_tokens + params.issue_tokens_mean
        # Last prompt = first + (n - 1) * (output + result): solve the mean result.
        steps = params.calls_mean - 1
        if steps <= 0:
            raise ConfigError("coding calls_mean must be > 1 (tool results sit between calls)")
        result_mean = (params.final_context_tokens_mean - first) / steps - params.output_tokens_mean
        if result_mean < 1:
            raise ConfigError(
                "coding final_context_tokens_mean too small for the first context and outputs"
            )
        if result_mean > params.result_tokens_max:
            raise ConfigError(
                f"coding final_context_tokens_mean {params.final_context_tokens_mean:g} needs "
                f"tool results of {result_mean:.0f} tokens on average over calls_mean "
                f"{params.calls_mean:g}, above result_tokens_max {params.result_tokens_max}"
            )
        #: Mean tool result (tokens), solved from the first and last contexts.
        self.result_tokens_mean = result_mean
        self._result = ClippedLogNormal(
            result_mean, params.length_sigma, 1, params.result_tokens_max
        )
        self._tool = QuantileLogNormal(
            params.tool_p50_s, params.tool_p90_s, params.tool_min_s, params.tool_max_s
        )

    def shared_prefix_tokens(self) -> int:
        """Tokens every call of the programs of one repository starts with."""
        return self.params.system_tokens + self.params.repo_tokens

    def draw(self, rng: random.Random, program_id: str, arrival_s: float) -> Program:
        """One program; draws, in order: repository, calls, issue, then per call its output and,
        before calls 2.., the tool (name, duration, result)."""
        repo = rng.randrange(self.params.repos)
        calls = self._calls.sample(rng)
        issue = self._issue.sample_int(rng)
        template = f"coding-repo-{repo}"
        nodes: list[Node] = []
        previous: str | None = None
        for k in range(calls):
            parents: tuple[str, ...] = ()
            if previous is not None:
                name = rng.choices([t[0] for t in _TOOLS], [t[1] for t in _TOOLS])[0]
                wait = WaitNode(
                    f"t{k}",
                    (previous,),
                    "main",
                    "tool",
                    name,
                    self._tool.sample(rng),
                    context=previous,
                    result_tokens=self._result.sample_int(rng),
                )
                nodes.append(wait)
                parents = (wait.node_id,)
                previous = wait.node_id
            call = LLMNode(
                f"c{k}",
                parents,
                "main",
                previous,
                0,
                self._output.sample_int(rng),
                template=template if self.params.repo_tokens else None,
                template_tokens=self.params.repo_tokens,
            )
            nodes.append(call)
            previous = call.node_id
        return Program(
            program_id=program_id,
            kind=self.kind,
            arrival_s=arrival_s,
            system_prompt_id=self.kind,
            system_prompt_tokens=self.params.system_tokens,
            root_prompt_tokens=issue,
            nodes=tuple(nodes),
        )
