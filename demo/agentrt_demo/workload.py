"""The demo's program plan: which programs arrive when, each with its own seed. Pure and
deterministic: the same settings give the same plan, so both phases run the same programs.

Shapes follow the agent workloads that Autellix (arXiv 2502.13965) and Parrot report, as the
simulator models them (docs/simulator.md, "Workloads"), scaled down to fit a two-minute demo:

* ``react`` — a tool-using agent: a ~700-token system prompt with three tool schemas shared by
  every ReAct program, at most ``size`` LLM steps; tools take a log-normal time (median
  0.6 model s, σ = 1, clipped to [0.05, 6] s: heavy-tailed like real tools).
* ``map_reduce`` — ``size`` chunks of ~600 tokens summarised in parallel threads (50 output
  tokens each, Parrot's map shape), then one reduce call.
* ``mcts`` — LATS tree search (``agentrt.mcts``) with 3 children per expansion and ``size``
  expansions: the long, parallel programs of the mix.
* ``coding`` — a coding agent (SWE-agent / Codex-like, the simulator's ``coding`` workload
  scaled down): every call sends a shared system prompt, the context of one of
  :data:`CODING_REPOS` repositories (the same text for every program of that repository),
  the issue, then the growing history (each call's answer and the result of the tool it ran);
  ``size`` LLM calls with a tool wait between two, heavy-tailed (median 0.5 model s, 90th
  percentile about 3.4 s: tests and builds run long, most commands are quick). Its context
  is what KV retention keeps during the waits.
* ``langgraph`` / ``autogen`` — one ReAct-style agent each, written with LangGraph and
  AutoGen through the agentrt adapters, when those extras are installed.

Arrivals form a Poisson process (``arrival_rate`` programs per model second, the first at 0).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agentrt_demo.settings import DemoSettings

__all__ = [
    "BASE_KINDS",
    "CODING_REPOS",
    "FRAMEWORK_KINDS",
    "ProgramKind",
    "ProgramSpec",
    "coding_tool_duration_s",
    "filler_text",
    "plan_programs",
    "tool_duration_s",
]

ProgramKind = Literal["react", "map_reduce", "mcts", "coding", "langgraph", "autogen"]
#: The kinds of the planned mix (shares in ``_SHARES``).
BASE_KINDS: tuple[ProgramKind, ...] = ("react", "map_reduce", "mcts", "coding")
#: Framework agents (one each per phase when their extras are installed).
FRAMEWORK_KINDS: tuple[ProgramKind, ...] = ("langgraph", "autogen")

#: Share of each base kind in the mix: many short programs, a few long ones (heavy-tailed
#: work per program, as in the workloads Autellix reports; docs/simulator.md).
_SHARES: dict[ProgramKind, float] = {
    "react": 0.5,
    "map_reduce": 0.2,
    "mcts": 0.15,
    "coding": 0.15,
}

# Tool durations (model seconds): log-normal, median and sigma of the underlying normal.
_TOOL_MEDIAN_S = 0.6
_TOOL_SIGMA = 1.0
_TOOL_MIN_S, _TOOL_MAX_S = 0.05, 6.0
# A coding agent's tools: heavier tail (recorded coding sessions: p50 0.3 s, p90 13.6 s;
# docs/simulator.md, "Coding, research, agents"), scaled to the demo's minute.
_CODING_TOOL_MEDIAN_S = 0.5
_CODING_TOOL_SIGMA = 1.5
_CODING_TOOL_MIN_S, _CODING_TOOL_MAX_S = 0.05, 10.0

#: Repositories the coding programs work on; programs of one repository share its context.
CODING_REPOS = 2

_VOCABULARY = """
agent program engine cache prefix token thread batch queue tool answer search result table
report plan step model river harbor lantern signal market garden winter summer station
letter archive record ledger survey sample measure budget forecast journey bridge valley
orchard meadow canyon island beacon compass anchor harvest granite copper silver timber
marble velvet candle window shadow mirror ribbon council village museum library theater
factory network circuit voltage sensor balance careful steady rapid quiet bright narrow
gentle simple useful honest
"""
_WORDS = tuple(_VOCABULARY.split())


@dataclass(frozen=True, slots=True)
class ProgramSpec:
    """One planned program."""

    #: Position in arrival order, 0-based.
    index: int
    kind: ProgramKind
    #: Arrival time, model seconds after the phase starts.
    arrival_s: float
    #: Seed of this program's texts and tool durations.
    seed: int
    #: ``react`` / framework agents: most LLM steps; ``map_reduce``: chunks; ``mcts``:
    #: expansions; ``coding``: LLM calls.
    size: int

    @property
    def repo(self) -> int:
        """``coding``: the repository it works on, in ``[0, CODING_REPOS)`` (from its seed)."""
        return self.seed % CODING_REPOS

    @property
    def name(self) -> str:
        """Program name, e.g. ``react-07`` (the program span's ``agentrt.program.name``)."""
        return f"{self.kind}-{self.index:02d}"


def plan_programs(
    settings: DemoSettings, extra_kinds: Sequence[ProgramKind] = ()
) -> list[ProgramSpec]:
    """``settings.programs`` programs of the base kinds plus one of each of ``extra_kinds``,
    in arrival order. Deterministic in ``settings.seed``."""
    rng = random.Random(f"agentrt-demo-plan-{settings.seed}")
    kinds = _mix(settings.programs)
    rng.shuffle(kinds)
    for offset, kind in enumerate(extra_kinds):
        # Early in the run (while the engines are busy), not first and not last.
        position = min(len(kinds), 1 + offset + len(kinds) // 4)
        kinds.insert(position, kind)
    specs: list[ProgramSpec] = []
    now = 0.0
    for index, kind in enumerate(kinds):
        if index:
            now += rng.expovariate(settings.arrival_rate)
        specs.append(
            ProgramSpec(index, kind, now, rng.randrange(2**31), _size(kind, rng, settings.quick))
        )
    return specs


def _mix(programs: int) -> list[ProgramKind]:
    """Half ReAct, 20 % map-reduce, 15 % MCTS, 15 % coding (rounded; every kind once when
    there is room)."""
    counts = {kind: round(programs * share) for kind, share in _SHARES.items()}
    if programs >= len(_SHARES):
        for kind in counts:
            counts[kind] = max(1, counts[kind])
    while sum(counts.values()) > programs:
        counts[max(counts, key=lambda k: counts[k])] -= 1
    counts["react"] += programs - sum(counts.values())
    return [kind for kind, n in counts.items() for _ in range(n)]


def _size(kind: ProgramKind, rng: random.Random, quick: bool) -> int:
    if kind in FRAMEWORK_KINDS:
        return 3 if quick else 4
    if kind == "map_reduce":
        return rng.randint(2, 3) if quick else rng.randint(3, 6)
    if kind == "mcts":
        return 2 if quick else rng.randint(4, 12)
    if kind == "coding":
        # Codex on SWE-bench runs ~33 calls per task; a minute's demo affords a handful.
        return 3 if quick else rng.randint(4, 8)
    # ReAct: LLM calls per program, log-normal (median 3, σ 0.9) in [1, 24]: most programs
    # are short, a few are long (BFCL's ReAct traces: mean 10.75, max 70 calls).
    return 3 if quick else min(24, max(1, round(rng.lognormvariate(math.log(3), 0.9))))


def tool_duration_s(rng: random.Random) -> float:
    """One tool duration in model seconds (see the module docstring)."""
    value = rng.lognormvariate(0.0, _TOOL_SIGMA) * _TOOL_MEDIAN_S
    return min(_TOOL_MAX_S, max(_TOOL_MIN_S, value))


def coding_tool_duration_s(rng: random.Random) -> float:
    """One coding tool's duration in model seconds (heavier-tailed than the others)."""
    value = rng.lognormvariate(0.0, _CODING_TOOL_SIGMA) * _CODING_TOOL_MEDIAN_S
    return min(_CODING_TOOL_MAX_S, max(_CODING_TOOL_MIN_S, value))


def filler_text(rng: random.Random, words: int) -> str:
    """``words`` pseudo-English words (about one emulator token each), in sentences."""
    out: list[str] = []
    for i in range(words):
        word = rng.choice(_WORDS)
        out.append(word.capitalize() if i % 12 == 0 else word)
        if i % 12 == 11:
            out[-1] += "."
    return " ".join(out) + "."
