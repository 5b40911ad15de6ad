"""The arrival rate ``agentrt bench sim`` uses without ``--rate``: each workload near its
saturation, where program-level scheduling matters (below it the engine keeps up and every
policy gives the same latencies; far above it nothing finishes).

Each entry is the workload's FCFS saturation on one ``a100-llama3-8b`` engine: the largest rate
(programs/s) at which FCFS still completes >= 90 % of the offered programs (``agentrt bench
sweep --policy fcfs``, the rate it reports as kept up; prompt calibration ``engine``, 256 batch
slots, prefix caching on). chatbot, react, mcts and mixed: the sweeps of docs/simulator.md
("Calibration", "Saturation on one engine"; FCFS with an unlimited window); mapreduce: rates
0.5, 1, 2, 4 with the default configuration, ``--duration 400`` (kept up at 0.5; at 1.0 only
0.37/s completed). Under the default adaptive window FCFS gives the same figures at these rates
(mixed at 1.6/s: 0.0282 s/token and 59.1 s mean E2E either way).
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
        "mixed": 1.5,
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
