"""What the sampled workloads share: wrapping drawn nodes into a :class:`Program`, the
sequential call–wait–call spine of the chatbot and ReAct workloads, and the two prompt
calibrations.

**Prompt calibrations** (docs/simulator.md, "Calibration"). Autellix (arXiv 2502.13965) gives
"prompt tokens per call" for each workload. ``engine`` (the default) reads it as what the engine
sees: the mean over calls of the whole prompt, context included
(:meth:`Program.engine_prompt_tokens`). ``fresh`` reads it as the tokens a program adds that did
not come from its own earlier prompts or outputs (:meth:`Program.fresh_prompt_tokens`); contexts
then grow to thousands of engine-visible tokens per call. Each calibration has its own default
sizes for the shared parts (system prompts, questions); a field left ``None`` takes the default
of the chosen calibration.

**Seeds.** A workload draws a program from one ``random.Random``; the *order* of the draws is
part of what a seed means (``generate_programs`` promises the same programs for the same seed).
The helpers here make no draw of their own: they call the workload's samplers in the order the
docstrings state.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import ClassVar, Generic, Literal, TypeVar

from agentrt.errors import ConfigError
from agentrt_sim.workloads.program import LLMNode, Node, Program, WaitNode

__all__ = [
    "PROMPT_CALIBRATIONS",
    "PromptCalibration",
    "SampledWorkload",
    "calibrated",
    "check_calibration",
    "sequential_calls",
]

#: ``engine``: the mean whole prompt per call matches the paper; ``fresh``: the mean new tokens.
PromptCalibration = Literal["engine", "fresh"]
PROMPT_CALIBRATIONS: tuple[PromptCalibration, ...] = ("engine", "fresh")

ParamsT = TypeVar("ParamsT")
T = TypeVar("T")


def check_calibration(kind: str, value: str) -> PromptCalibration:
    """``value`` as a :data:`PromptCalibration`; anything else raises :class:`ConfigError`."""
    for calibration in PROMPT_CALIBRATIONS:
        if value == calibration:
            return calibration
    raise ConfigError(
        f"{kind}: prompt_calibration {value!r} is unknown; valid: {', '.join(PROMPT_CALIBRATIONS)}"
    )


def calibrated(value: T | None, calibration: PromptCalibration, defaults: Mapping[str, T]) -> T:
    """``value``, or the default of ``calibration`` when it is ``None``."""
    return defaults[calibration] if value is None else value


class SampledWorkload(ABC, Generic[ParamsT]):
    """A workload whose programs are drawn from ``random.Random``: a subclass draws the nodes
    and the program's root input (:meth:`_draw_nodes`, in its own order of draws); this class
    makes the :class:`Program` — its kind, which is also its system prompt's id."""

    #: Workload name, program kind and system prompt id (``chatbot``, ``react``...).
    kind: ClassVar[str]

    def __init__(self, params: ParamsT, system_prompt_tokens: int) -> None:
        self.params = params
        #: Shared system prompt of the workload's kind (tokens), after calibration defaults.
        self.system_prompt_tokens = system_prompt_tokens

    def draw(self, rng: random.Random, program_id: str, arrival_s: float) -> Program:
        """One program arriving at ``arrival_s`` (seconds)."""
        root_prompt_tokens, nodes = self._draw_nodes(rng)
        return Program(
            program_id=program_id,
            kind=self.kind,
            arrival_s=arrival_s,
            system_prompt_id=self.kind,
            system_prompt_tokens=self.system_prompt_tokens,
            root_prompt_tokens=root_prompt_tokens,
            nodes=tuple(nodes),
        )

    @abstractmethod
    def _draw_nodes(self, rng: random.Random) -> tuple[int, list[Node]]:
        """The program's own first input (tokens, after the system prompt) and its nodes."""


#: What call k >= 1 of :func:`sequential_calls` extends: the wait before it (a tool's
#: observation joins the context), call k-1 (think time adds nothing to it), or only the root
#: prefix (stateless turns: the earlier turns are not sent again).
Extends = Literal["wait", "previous", "root"]


def sequential_calls(
    calls: int,
    *,
    wait: Callable[[str, str], WaitNode],
    wait_prefix: str,
    extends: Extends,
    fresh_tokens: Callable[[], int],
    output_tokens: Callable[[], int],
) -> list[Node]:
    """The ``main`` thread of a sequential agent: LLM calls ``c0 … c<calls-1>`` with a wait
    between each two (a tool call, a human's think time).

    For call k >= 1, in this order: ``wait(f"{wait_prefix}{k}", previous_call_id)`` draws the
    wait, which must depend on call k-1; ``fresh_tokens()`` draws call k's fresh prompt tokens;
    ``output_tokens()`` its output. Call 0 draws only its output (its input is the program's
    root prompt) unless ``extends`` is ``root``: then it draws its fresh tokens first like the
    others (the caller's root input is then usually empty). ``extends`` says which prefix call
    k's prompt extends (:data:`Extends`).
    """
    nodes: list[Node] = []
    previous: str | None = None
    for k in range(calls):
        parents: tuple[str, ...] = ()
        context = None if extends == "root" else previous
        new_tokens = fresh_tokens() if extends == "root" and previous is None else 0
        if previous is not None:
            before = wait(f"{wait_prefix}{k}", previous)
            nodes.append(before)
            parents = (before.node_id,)
            if extends == "wait":
                context = before.node_id
            new_tokens = fresh_tokens()
        call = LLMNode(f"c{k}", parents, "main", context, new_tokens, output_tokens())
        nodes.append(call)
        previous = call.node_id
    return nodes
