"""The arrival rate ``agentrt bench sim`` uses without ``--rate``: each workload near its
saturation, where program-level scheduling matters (below it the engine keeps up and every
policy gives the same latencies; far above it nothing finishes).

Each entry is the workload's FCFS saturation on one ``a100-llama3-8b`` engine: the largest rate
(programs/s) at which FCFS under the default configuration (``agentrt_controller.defaults``)
still completes >= 90 % of the offered programs (``agentrt bench sweep --policy fcfs``, the
``saturation_rate`` it reports; prompt calibration ``engine``). docs/simulator.md ("Default
rates") gives the sweeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from agentrt.errors import ConfigError

__all__ = ["DEFAULT_RATES", "default_rate"]

#: Workload name -> programs/s.
DEFAULT_RATES: Mapping[str, float] = MappingProxyType(
    {
        "chatbot": 2.0,
        "react": 5.0,
        "mapreduce": 0.5,
        "mcts": 0.4,
        "mixed": 1.6,
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
