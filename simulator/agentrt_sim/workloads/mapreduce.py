"""Map-reduce over a long document (Parrot; docs/simulator.md §3).

The document is cut into chunks; one map call per chunk runs in its own thread (system prompt +
instruction + chunk, ~1,084 prompt tokens, ~50 output tokens); a reduce call reads every map
output (re-tokenised into a new prompt, so it shares only the system prompt) and answers.

No call extends another's prompt, so the fresh and the engine-visible prompt per call are the
same (≈ 1,080 tokens, the reduce included): this workload needs no ``prompt_calibration``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agentrt_sim.workloads.base import SampledWorkload
from agentrt_sim.workloads.distributions import ClippedLogNormal, DiscreteLogNormal
from agentrt_sim.workloads.program import LLMNode, Node

__all__ = ["MapReduceParams", "MapReduceWorkload"]


@dataclass(frozen=True)
class MapReduceParams:
    """Assumptions of the map-reduce workload (all configurable)."""

    #: Mean chunks per document (Parrot's example has 16).
    chunks_mean: float = 16.0
    chunks_max: int = 64
    chunks_sigma: float = 0.5
    #: Shared system prompt (tokens).
    system_prompt_tokens: int = 100
    #: Task instruction shared by the program's map calls (tokens).
    instruction_tokens: int = 40
    #: Mean chunk length (tokens); with the system prompt and instruction a map prompt is
    #: ~1,084 tokens (Parrot).
    chunk_tokens_mean: float = 944.0
    chunk_tokens_max: int = 4096
    #: Mean map output (tokens; Parrot ~50).
    map_output_tokens_mean: float = 50.0
    #: Mean reduce output (tokens).
    reduce_output_tokens_mean: float = 200.0
    length_sigma: float = 0.3


class MapReduceWorkload(SampledWorkload[MapReduceParams]):
    """Draws map-reduce programs."""

    kind = "mapreduce"

    def __init__(self, params: MapReduceParams | None = None) -> None:
        params = params or MapReduceParams()
        super().__init__(params, params.system_prompt_tokens)
        self._chunks = DiscreteLogNormal(
            params.chunks_mean, params.chunks_sigma, low=1, high=params.chunks_max
        )
        self._chunk = ClippedLogNormal(
            params.chunk_tokens_mean, params.length_sigma, 1, params.chunk_tokens_max
        )
        self._map_output = ClippedLogNormal(
            params.map_output_tokens_mean, params.length_sigma, 1, 1024
        )
        self._reduce_output = ClippedLogNormal(
            params.reduce_output_tokens_mean, params.length_sigma, 1, 4096
        )

    def _draw_nodes(self, rng: random.Random) -> tuple[int, list[Node]]:
        """One document: the map calls, then the reduce; the root input is the instruction."""
        chunks = self._chunks.sample(rng)
        nodes: list[Node] = []
        map_output_total = 0
        for index in range(chunks):
            output = self._map_output.sample_int(rng)
            map_output_total += output
            nodes.append(
                LLMNode(f"m{index}", (), f"map{index}", None, self._chunk.sample_int(rng), output)
            )
        nodes.append(
            LLMNode(
                "reduce",
                tuple(node.node_id for node in nodes),
                "main",
                None,
                map_output_total + self.params.instruction_tokens,
                self._reduce_output.sample_int(rng),
            )
        )
        return self.params.instruction_tokens, nodes
