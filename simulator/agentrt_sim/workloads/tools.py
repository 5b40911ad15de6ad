"""Tool-duration assumptions shared by the agent workloads.

The papers give no tool durations (docs/simulator.md §3), so we assume a small mix of tools, each
with a lognormal duration clipped to [50 ms, 10 s] by default. Different tools have different means
so that per-tool history (what the SDK uses to predict a tool wait) carries information.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agentrt.errors import ConfigError
from agentrt_sim.workloads.distributions import ClippedLogNormal

__all__ = ["DEFAULT_TOOLS", "ToolMix", "ToolSpec"]


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, how often it is picked, and its duration distribution."""

    name: str
    #: Relative frequency among the mix's tools.
    weight: float
    #: Mean duration (seconds).
    mean_s: float
    #: Lognormal shape of the duration.
    sigma: float = 1.0


#: search ~1 s, code execution ~2 s, a fast API ~0.3 s, a calculator ~60 ms.
DEFAULT_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("search", 0.4, 1.0),
    ToolSpec("code", 0.2, 2.0),
    ToolSpec("api", 0.3, 0.3),
    ToolSpec("calculator", 0.1, 0.06, 0.5),
)


class ToolMix:
    """Picks a tool and draws its duration; ``scale`` multiplies every mean (0 = instant)."""

    def __init__(
        self,
        tools: tuple[ToolSpec, ...] = DEFAULT_TOOLS,
        *,
        scale: float = 1.0,
        min_s: float = 0.05,
        max_s: float = 10.0,
    ) -> None:
        self._names = [tool.name for tool in tools]
        self._weights = [tool.weight for tool in tools]
        if scale < 0 or not 0 <= min_s <= max_s:
            raise ConfigError(
                f"need scale >= 0 and 0 <= min_s <= max_s, got {scale}, {min_s}, {max_s}"
            )
        self._durations = [
            ClippedLogNormal(min(max(tool.mean_s * scale, min_s), max_s), tool.sigma, min_s, max_s)
            if scale > 0
            else ClippedLogNormal(0.0, tool.sigma, 0.0, 0.0)
            for tool in tools
        ]

    def mean_s(self) -> float:
        """Mean duration over the mix (seconds)."""
        total = sum(self._weights)
        return sum(w * d.mean for w, d in zip(self._weights, self._durations, strict=True)) / total

    def draw(self, rng: random.Random) -> tuple[str, float]:
        """A tool name and its duration (seconds)."""
        index = rng.choices(range(len(self._names)), self._weights)[0]
        return self._names[index], self._durations[index].sample(rng)
