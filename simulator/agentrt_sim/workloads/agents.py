"""``agents``: a mix of today's agents (docs/simulator.md §3, "Coding, research, agents").

Each arrival is a ``coding``, ``research`` or ``react`` program, picked with probability
proportional to its share (equal by default); each kind keeps its own parameters
(``coding.*``, ``research.*``, ``react.*``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Protocol

from agentrt.errors import ConfigError
from agentrt_sim.workloads.program import Program

__all__ = ["AGENTS_KINDS", "AgentsParams", "AgentsWorkload"]

#: The kinds ``agents`` draws from, in the order of :class:`AgentsParams`.
AGENTS_KINDS: tuple[str, ...] = ("coding", "research", "react")


class _Generator(Protocol):
    def draw(self, rng: random.Random, program_id: str, arrival_s: float) -> Program: ...


@dataclass(frozen=True)
class AgentsParams:
    """Relative shares of the mix (>= 0, not all 0; equal by default: an assumption)."""

    coding_share: float = 1.0
    research_share: float = 1.0
    react_share: float = 1.0

    def shares(self) -> tuple[float, ...]:
        """The shares in :data:`AGENTS_KINDS` order; raises :class:`ConfigError` naming a bad
        field."""
        values = tuple(getattr(self, f.name) for f in fields(self))
        for field, value in zip(fields(self), values, strict=True):
            if not value >= 0:
                raise ConfigError(f"agents {field.name} must be >= 0, got {value}")
        if sum(values) <= 0:
            raise ConfigError(
                "agents: at least one of coding_share, research_share, react_share > 0"
            )
        return values


class AgentsWorkload:
    """Draws each program from one of :data:`AGENTS_KINDS` by share; the pick is one
    ``rng.random()`` draw before the program's own draws."""

    kind = "agents"

    def __init__(self, params: AgentsParams, parts: Sequence[_Generator]) -> None:
        self._shares = params.shares()
        self._parts = list(parts)
        if len(self._parts) != len(self._shares):
            raise ConfigError(f"agents needs {len(self._shares)} generators")

    def draw(self, rng: random.Random, program_id: str, arrival_s: float) -> Program:
        """One program; its id is prefixed with the drawn kind."""
        point = rng.random() * sum(self._shares)
        index = len(self._shares) - 1
        for i, share in enumerate(self._shares):
            if point < share:
                index = i
                break
            point -= share
        kind = AGENTS_KINDS[index]
        return self._parts[index].draw(rng, f"{kind}-{program_id}", arrival_s)
