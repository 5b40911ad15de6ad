"""The worked example of Autellix Fig. 2 (arXiv 2502.13965; docs/scheduling.md) as simulator
programs.

Four programs arrive at t=0; the engine runs at most two calls at once (``max_num_seqs=2``) on
the ``unit-step`` profile (every step 1 s), so a call of d decode steps is a call generating
d tokens (its first token comes from its one-token prompt's prefill step). A program's next call
extends the previous one and is released when it finishes. FCFS gives a total waiting time of
18 steps (C1 3, D1 4, B2 1, A2 3, C2 4, B3 3).
"""

from __future__ import annotations

from collections.abc import Mapping

from agentrt_emulator.core.types import EngineConfig
from agentrt_sim.workloads.program import LLMNode, Program

__all__ = ["FIG2_DURATIONS", "FIG2_PROFILE", "fig2_engine_config", "fig2_programs"]

#: Call durations in decode steps, per program.
FIG2_DURATIONS: Mapping[str, tuple[int, ...]] = {
    "A": (4, 3, 1, 1),
    "B": (3, 3, 4),
    "C": (1, 2),
    "D": (4,),
}

#: Every step costs exactly 1.0 s.
FIG2_PROFILE = "unit-step"


def fig2_engine_config() -> EngineConfig:
    """Two batch slots; everything else generous."""
    return EngineConfig(max_num_seqs=2, max_model_len=4096)


def fig2_programs(durations: Mapping[str, tuple[int, ...]] = FIG2_DURATIONS) -> list[Program]:
    """One program per entry, all arriving at t=0, calls chained by context."""
    programs = []
    for name, calls in sorted(durations.items()):
        nodes = []
        previous: str | None = None
        for index, steps in enumerate(calls):
            node = LLMNode(
                f"{name}{index + 1}",
                (previous,) if previous else (),
                "main",
                previous,
                0,
                steps,
            )
            nodes.append(node)
            previous = node.node_id
        programs.append(
            Program(
                program_id=name,
                kind="fig2",
                arrival_s=0.0,
                system_prompt_id="fig2",
                system_prompt_tokens=0,
                root_prompt_tokens=1,
                nodes=tuple(nodes),
            )
        )
    return programs
