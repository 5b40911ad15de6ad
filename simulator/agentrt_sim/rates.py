"""The arrival rate ``agentrt bench sim`` uses without ``--rate``: each workload near its
saturation, where program-level scheduling matters (below it the engine keeps up and every
policy gives the same latencies; far above it nothing finishes).

Each entry is the workload's FCFS saturation on one ``a100-llama3-8b`` engine: the largest rate
(programs/s) at which FCFS still completes >= 90 % of the offered programs (``agentrt bench
sweep --policy fcfs``, the rate it reports as kept up; prompt calibration ``engine``, 256 batch
slots, prefix caching on). chatbot, react, mcts and mixed: the sweeps of docs/simulator.md
("Calibration", "Saturation on one engine"; FCFS with an unlimited window); mapreduce: rates
0.5, 1, 2, 4 with the default configuration, ``--duration 400`` (kept up at 0.5; at 1.0 only
0.37/s completed). mcts and mixed were measured again with MCTS's LATS prompt layout, the
default since (mcts kept up at 0.5: 0.467 of 0.506 arrived, not at 0.6; mixed at 1.35: 1.26 of
1.38, not at 1.5: 1.35 of 1.52). At these rates a 256-slot engine keeps up and hardly anything
queues, so every scheduling policy gives the same figures (``bench sim`` says so under the
table); program-level scheduling pays above them or on fewer batch slots (docs/controller.md,
"Why these defaults").
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from agentrt.errors import ConfigError

__all__ = ["DEFAULT_RATES", "default_rate"]

#: Workload name -> programs/s.
DEFAULT_RATES: Mapping[str, float] = MappingProxyType(
    {
        "chatbot": 3.5,
        "react": 16.0,
        "mapreduce": 0.5,
        "mcts": 0.5,
        "mixed": 1.35,
        # Swept like the others (docs/simulator.md, "Coding, research, agents"): coding
        # --duration 7200, kept up at 0.0075, not at 0.01 (0.0077 of 0.01 completed); research
        # --duration 1200, at 0.05, not at 0.1 (0.041); agents --duration 7200, at 0.02, not at
        # 0.03 (0.024).
        "coding": 0.0075,
        "research": 0.05,
        "agents": 0.02,
    }
)


def default_rate(workload: str) -> float:
    """The :data:`DEFAULT_RATES` entry of ``workload`` (programs/s).

    Raises :class:`ConfigError` for an unknown workload name."""
    try:
        return DEFAULT_RATES[workload]
    except KeyError:
        raise ConfigError(
            f"unknown workload {workload!r}; valid: {', '.join(DEFAULT_RATES)}"
        ) from None
