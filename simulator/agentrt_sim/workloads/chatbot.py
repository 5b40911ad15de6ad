"""Chatbot (ShareGPT-like, docs/simulator.md §3): a linear chain of turns with human think time.

Calibrated means (Autellix arXiv 2502.13965): 6.66 calls per program (max 80), 256 prompt
tokens and 277 output tokens per call. What the 256 are depends on ``prompt_calibration``
(docs/simulator.md, "Calibration"):

* ``engine`` (default): each turn's whole prompt — the shared system prompt and the user's
  message — averages 256 tokens. Turns are **stateless**: the earlier turns are not sent again.
  No conversation that re-sends its history can match the table: with 277-token answers and
  6.66 turns the answers already in the context average at least 277 × (6.66 − 1) / 2 ≈ 780
  tokens per call, whatever the distribution of turns.
* ``fresh``: turn k's prompt = turn k-1's prompt + its answer + the user's next message; the
  system prompt once plus every user message average 256 per call (engine-visible ≈ 4,300).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agentrt.errors import ConfigError
from agentrt_sim.workloads.base import SampledWorkload, check_calibration, sequential_calls
from agentrt_sim.workloads.distributions import ClippedLogNormal, DiscreteLogNormal
from agentrt_sim.workloads.program import Node, WaitNode

__all__ = ["ChatbotParams", "ChatbotWorkload"]


@dataclass(frozen=True)
class ChatbotParams:
    """Assumptions of the chatbot workload (all configurable)."""

    #: Mean turns (LLM calls) per conversation; docs/simulator.md §3.
    calls_mean: float = 6.66
    #: Longest conversation (calls); docs/simulator.md §3.
    calls_max: int = 80
    #: Tail shape of the number of turns.
    calls_sigma: float = 1.0
    #: What ``prompt_tokens_mean`` measures: ``engine`` (each turn's whole prompt; stateless
    #: turns) or ``fresh`` (system prompt once + every user message; the history is re-sent).
    prompt_calibration: str = "engine"
    #: Mean prompt tokens per call, as ``prompt_calibration`` measures them; docs/simulator.md §3.
    prompt_tokens_mean: float = 256.0
    #: Shared system prompt (tokens) — the only tokens programs share.
    system_prompt_tokens: int = 64
    #: Longest user message (tokens).
    message_tokens_max: int = 8192
    #: Mean answer length (tokens); docs/simulator.md §3.
    output_tokens_mean: float = 277.0
    #: Longest answer (tokens).
    output_tokens_max: int = 4096
    #: Tail shape of message and answer lengths.
    length_sigma: float = 1.0
    #: Mean human think time between turns (seconds); 0 disables think time.
    think_mean_s: float = 5.0
    #: Shortest think time (seconds).
    think_min_s: float = 0.5
    #: Longest think time (seconds).
    think_max_s: float = 60.0


class ChatbotWorkload(SampledWorkload[ChatbotParams]):
    """Draws conversations; samplers are calibrated once at construction."""

    kind = "chatbot"

    def __init__(self, params: ChatbotParams | None = None) -> None:
        params = params or ChatbotParams()
        super().__init__(params, params.system_prompt_tokens)
        self._calibration = check_calibration(self.kind, params.prompt_calibration)
        self._calls = DiscreteLogNormal(
            params.calls_mean, params.calls_sigma, low=1, high=params.calls_max
        )
        if self._calibration == "engine":
            # Every turn's prompt = system + its message.
            message_mean = params.prompt_tokens_mean - params.system_prompt_tokens
        else:
            # E[fresh per call] = (system + E[calls] * message_mean) / E[calls]: the first
            # message is the root input, every later turn adds one.
            message_mean = (
                params.prompt_tokens_mean - params.system_prompt_tokens / params.calls_mean
            )
        if message_mean < 1:
            raise ConfigError("chatbot system prompt too long for the requested prompt mean")
        self._message = ClippedLogNormal(
            message_mean, params.length_sigma, low=1, high=params.message_tokens_max
        )
        self._output = ClippedLogNormal(
            params.output_tokens_mean, params.length_sigma, low=1, high=params.output_tokens_max
        )
        low = min(params.think_min_s, params.think_mean_s)
        self._think = ClippedLogNormal(params.think_mean_s, 1.0, low=low, high=params.think_max_s)

    def _draw_nodes(self, rng: random.Random) -> tuple[int, list[Node]]:
        """One conversation: turn k >= 1 is the user's think time, then their message, then the
        answer. Under ``fresh`` the first message is the program's root input and each turn
        extends the previous one; under ``engine`` the root input is empty and every turn is
        the system prompt + its own message."""
        turns = self._calls.sample(rng)
        stateless = self._calibration == "engine"
        root_tokens = 0 if stateless else self._message.sample_int(rng)

        def think(node_id: str, previous: str) -> WaitNode:
            return WaitNode(node_id, (previous,), "main", "think", "human", self._think.sample(rng))

        nodes = sequential_calls(
            turns,
            wait=think,
            wait_prefix="h",
            extends="root" if stateless else "previous",
            fresh_tokens=lambda: self._message.sample_int(rng),
            output_tokens=lambda: self._output.sample_int(rng),
        )
        return root_tokens, nodes
