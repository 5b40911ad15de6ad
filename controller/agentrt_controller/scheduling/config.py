"""Discrete-queue parameters shared by MLFQ, PLAS, ATLAS (and SRPT's backend priority).

Autellix (arXiv 2502.13965), as docs/scheduling.md ("Discrete queues") describes it: K queues Q1..QK
with priority ranges ``[lo_i, hi_i)``, ``lo_1 = 0``, ``hi_K = inf``. Here the K-1 inner boundaries
are given in seconds of attained service, and each queue has a quantum in decode (output) tokens.
Defaults (docs/scheduling.md): boundaries 0.5, 2, 8, 32 s; quanta 16, 32, 64, 128, 256 tokens.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from pydantic import BeforeValidator, Field

from agentrt.errors import ConfigError
from agentrt_controller.config_check import SECTION, as_tuple, check_fields, parse_section

__all__ = ["SchedulerConfig", "is_starving", "starvation_ratio"]


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The ``scheduling`` config section; validated on construction (:mod:`..config_check`):
    every violation raises :class:`ConfigError`."""

    __pydantic_config__ = SECTION

    #: Inner queue boundaries (seconds of service), strictly increasing, finite, > 0.
    #: Queue index ``i`` holds priorities in ``[boundaries[i-1], boundaries[i])``.
    boundaries_s: Annotated[
        tuple[Annotated[float, Field(gt=0, allow_inf_nan=False)], ...], BeforeValidator(as_tuple)
    ] = (
        0.5, 2.0, 8.0, 32.0,
    )  # fmt: skip
    #: Per-queue quantum (output tokens, >= 1); exactly ``len(boundaries_s) + 1`` of them.
    quanta_tokens: Annotated[tuple[Annotated[int, Field(ge=1)], ...], BeforeValidator(as_tuple)] = (
        16, 32, 64, 128, 256,
    )  # fmt: skip
    #: Anti-starvation threshold β (> 0) on waiting / service; ``None`` = off (plain
    #: PLAS / ATLAS, which can starve long programs under overload).
    starvation_beta: Annotated[float, Field(gt=0)] | None = None
    #: Minimum time between two anti-starvation sweeps over the queues (seconds, >= 0);
    #: 0 = check on every ``pop``. A sweep costs O(queued calls below Q1), so the default
    #: bounds that cost under high pop rates; 0.1 s is nothing next to β x seconds of service.
    starvation_check_interval_s: Annotated[float, Field(ge=0)] = 0.1
    #: Calls of a program whose KV is retained (docs/routing.md, "KV retention";
    #: ``ProcessTable.set_retention``) enter Q1 instead of their PLAS / ATLAS queue while the
    #: retention lasts.
    boost_retained: bool = True

    def __post_init__(self) -> None:
        check_fields(self)
        bounds = self.boundaries_s
        if any(b >= nxt for b, nxt in itertools.pairwise(bounds)):
            raise ConfigError(f"queue boundaries must be strictly increasing, got {bounds}")
        if len(self.quanta_tokens) != len(bounds) + 1:
            raise ConfigError(
                f"need one quantum per queue: {len(bounds)} boundaries make "
                f"{len(bounds) + 1} queues, got {len(self.quanta_tokens)} quanta"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> SchedulerConfig:
        """Build from a config-file / JSON table with the field names above (``boundaries_s``
        and ``quanta_tokens`` as lists). Unknown keys raise :class:`ConfigError`."""
        return parse_section(cls, values, "scheduling")

    @property
    def levels(self) -> int:
        """Number of queues K."""
        return len(self.quanta_tokens)

    def level_for(self, priority_s: float) -> int:
        """Queue index (0 = Q1) whose range ``[lo, hi)`` holds ``priority_s``."""
        return bisect.bisect_right(self.boundaries_s, priority_s)

    def quantum(self, level: int) -> int:
        """Quantum of queue ``level`` (output tokens)."""
        return self.quanta_tokens[level]


def starvation_ratio(
    program_wait_s: float, program_service_s: float, call_wait_s: float, call_service_s: float
) -> float:
    """Autellix anti-starvation (arXiv 2502.13965; docs/scheduling.md):
    ``(W_program + W_call) / (T_program + T_call)``.

    With no service at all the ratio is ``inf`` if anything waited, else 0.
    """
    wait = program_wait_s + call_wait_s
    service = program_service_s + call_service_s
    if service <= 0:
        return math.inf if wait > 0 else 0.0
    return wait / service


def is_starving(
    beta: float,
    program_wait_s: float,
    program_service_s: float,
    call_wait_s: float,
    call_service_s: float,
) -> bool:
    """True when :func:`starvation_ratio` ``>= beta`` (the call is moved to Q1)."""
    ratio = starvation_ratio(program_wait_s, program_service_s, call_wait_s, call_service_s)
    return ratio >= beta
