"""Workload names, their parameters, and Poisson program arrivals.

``generate_programs("mixed", rate_per_s=2.0, duration_s=3600, seed=1)`` draws the programs of a
run. Every draw comes from one ``random.Random(seed)``, so a seed fixes the programs; each
configuration of a comparison replays the same list.
"""

from __future__ import annotations

import dataclasses
import random
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from agentrt.errors import ConfigError
from agentrt_sim.workloads.agents import AGENTS_KINDS, AgentsParams, AgentsWorkload
from agentrt_sim.workloads.base import check_calibration
from agentrt_sim.workloads.chatbot import ChatbotParams, ChatbotWorkload
from agentrt_sim.workloads.coding import CodingParams, CodingWorkload
from agentrt_sim.workloads.mapreduce import MapReduceParams, MapReduceWorkload
from agentrt_sim.workloads.mcts import MctsParams, MctsWorkload
from agentrt_sim.workloads.program import Program
from agentrt_sim.workloads.react import ReactParams, ReactWorkload
from agentrt_sim.workloads.research import ResearchParams, ResearchWorkload

__all__ = [
    "CALIBRATED_KINDS",
    "WORKLOAD_NAMES",
    "ProgramGenerator",
    "build_generator",
    "generate_programs",
    "parse_workload_params",
]


class ProgramGenerator(Protocol):
    """Draws one program of a workload kind."""

    def draw(self, rng: random.Random, program_id: str, arrival_s: float) -> Program: ...


class MixedWorkload:
    """Equal shares of chatbot, react and mcts programs (docs/simulator.md §3): each arrival
    picks one."""

    kind = "mixed"

    def __init__(self, parts: Sequence[tuple[str, ProgramGenerator]]) -> None:
        self._parts = list(parts)

    def draw(self, rng: random.Random, program_id: str, arrival_s: float) -> Program:
        kind, generator = self._parts[rng.randrange(len(self._parts))]
        return generator.draw(rng, f"{kind}-{program_id}", arrival_s)


_PARAMS: dict[str, type[Any]] = {
    "chatbot": ChatbotParams,
    "react": ReactParams,
    "mapreduce": MapReduceParams,
    "mcts": MctsParams,
    "coding": CodingParams,
    "research": ResearchParams,
    "agents": AgentsParams,
}

_KINDS: dict[str, Callable[[Any], ProgramGenerator]] = {
    "chatbot": ChatbotWorkload,
    "react": ReactWorkload,
    "mapreduce": MapReduceWorkload,
    "mcts": MctsWorkload,
    "coding": CodingWorkload,
    "research": ResearchWorkload,
}

#: Workload names accepted by :func:`build_generator` (and ``agentrt bench sim --workload``).
WORKLOAD_NAMES: tuple[str, ...] = (
    "chatbot",
    "react",
    "mapreduce",
    "mcts",
    "mixed",
    "coding",
    "research",
    "agents",
)

#: The kinds with a ``prompt_calibration`` field (``engine`` by default, or ``fresh``).
CALIBRATED_KINDS: tuple[str, ...] = ("chatbot", "react", "mcts")

#: The kinds ``mixed`` draws from, in equal shares.
MIXED_KINDS: tuple[str, ...] = ("chatbot", "react", "mcts")


def parse_workload_params(
    items: Sequence[str], *, prompt_calibration: str | None = None
) -> dict[str, dict[str, Any]]:
    """Parse ``KIND.FIELD=VALUE`` overrides (``react.tool_time_scale=0.5``), typed per field.

    ``prompt_calibration`` (``engine`` or ``fresh``), when given, sets that field of every kind
    that has one (:data:`CALIBRATED_KINDS`) unless an item sets it for a kind explicitly.
    Raises :class:`ConfigError` for an unknown kind or field or a value of the wrong type.
    """
    overrides: dict[str, dict[str, Any]] = {}
    if prompt_calibration is not None:
        check_calibration("--prompt-calibration", prompt_calibration)
        for kind in CALIBRATED_KINDS:
            overrides[kind] = {"prompt_calibration": prompt_calibration}
    for item in items:
        key, sep, raw = item.partition("=")
        kind, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise ConfigError(f"workload parameter {item!r}: expected KIND.FIELD=VALUE")
        params_type = _PARAMS.get(kind)
        if params_type is None:
            raise ConfigError(
                f"workload parameter {item!r}: unknown kind {kind!r}; valid: {', '.join(_PARAMS)}"
            )
        hints = typing.get_type_hints(params_type)
        if name not in hints:
            raise ConfigError(
                f"workload parameter {item!r}: {kind} has no field {name!r}; "
                f"valid: {', '.join(f.name for f in dataclasses.fields(params_type))}"
            )
        # ``int | None`` (None = the calibration's default) parses as int.
        value_type = next(
            t for t in typing.get_args(hints[name]) or (hints[name],) if t is not type(None)
        )
        try:
            value: Any = value_type(raw.strip())
        except ValueError as exc:
            raise ConfigError(f"workload parameter {item!r}: not a {value_type.__name__}") from exc
        overrides.setdefault(kind, {})[name] = value
    return overrides


def _params(kind: str, overrides: Mapping[str, Mapping[str, Any]]) -> Any:
    return _PARAMS[kind](**overrides.get(kind, {}))


def build_generator(
    workload: str, overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> ProgramGenerator:
    """The generator of a named workload; unknown names raise :class:`ConfigError`."""
    overrides = overrides or {}
    if workload == "agents":
        parts = [_KINDS[k](_params(k, overrides)) for k in AGENTS_KINDS]
        return AgentsWorkload(_params("agents", overrides), parts)
    if workload == "mixed":
        return MixedWorkload([(k, _KINDS[k](_params(k, overrides))) for k in MIXED_KINDS])
    if workload not in _KINDS:
        raise ConfigError(f"unknown workload {workload!r}; valid: {', '.join(WORKLOAD_NAMES)}")
    return _KINDS[workload](_params(workload, overrides))


def generate_programs(
    workload: str,
    *,
    rate_per_s: float,
    duration_s: float,
    seed: int,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Program]:
    """Programs arriving as a Poisson process of ``rate_per_s`` over ``[0, duration_s)``.

    The seed fixes both the programs and the arrival process; at another rate the same seed
    gives the same programs in the same order, arriving at times scaled by the rate ratio.
    Program ids are ``<kind>-<index>`` (``mixed`` and ``agents`` prefix the drawn kind), index
    in arrival order, zero-padded so that sorting by id sorts by arrival.
    """
    if rate_per_s <= 0 or duration_s <= 0:
        raise ConfigError(f"rate and duration must be > 0, got {rate_per_s}, {duration_s}")
    generator = build_generator(workload, overrides)
    # Two streams: the k-th program is the same at every rate (a sweep compares like with
    # like), only the arrival times change.
    contents = random.Random(seed)
    arrivals = random.Random(f"agentrt-arrivals-{seed}")
    programs: list[Program] = []
    now = arrivals.expovariate(1.0) / rate_per_s
    while now < duration_s:
        index = len(programs)
        name = f"{index:07d}" if workload in ("mixed", "agents") else f"{workload}-{index:07d}"
        programs.append(generator.draw(contents, name, now))
        now += arrivals.expovariate(1.0) / rate_per_s
    return programs
