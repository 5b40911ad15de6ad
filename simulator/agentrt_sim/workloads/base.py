"""What the sampled workloads share: wrapping drawn nodes into a :class:`Program`, and the
sequential call–wait–call spine of the chatbot and ReAct workloads.

**Seeds.** A workload draws a program from one ``random.Random``; the *order* of the draws is
part of what a seed means (``generate_programs`` promises the same programs for the same seed).
The helpers here make no draw of their own: they call the workload's samplers in the order the
docstrings state.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar, Generic, Protocol, TypeVar

from agentrt_sim.workloads.program import LLMNode, Node, Program, WaitNode

__all__ = ["SampledWorkload", "WorkloadParams", "sequential_calls"]


class WorkloadParams(Protocol):
    """What :class:`SampledWorkload` reads from a workload's parameters."""

    @property
    def system_prompt_tokens(self) -> int:
        """Shared system prompt of the workload's kind (tokens)."""
        ...


ParamsT = TypeVar("ParamsT", bound=WorkloadParams)


class SampledWorkload(ABC, Generic[ParamsT]):
    """A workload whose programs are drawn from ``random.Random``: a subclass draws the nodes
    and the program's root input (:meth:`_draw_nodes`, in its own order of draws); this class
    makes the :class:`Program` — its kind, which is also its system prompt's id."""

    #: Workload name, program kind and system prompt id (``chatbot``, ``react``...).
    kind: ClassVar[str]

    def __init__(self, params: ParamsT) -> None:
        self.params = params

    def draw(self, rng: random.Random, program_id: str, arrival_s: float) -> Program:
        """One program arriving at ``arrival_s`` (seconds)."""
        root_prompt_tokens, nodes = self._draw_nodes(rng)
        return Program(
            program_id=program_id,
            kind=self.kind,
            arrival_s=arrival_s,
            system_prompt_id=self.kind,
            system_prompt_tokens=self.params.system_prompt_tokens,
            root_prompt_tokens=root_prompt_tokens,
            nodes=tuple(nodes),
        )

    @abstractmethod
    def _draw_nodes(self, rng: random.Random) -> tuple[int, list[Node]]:
        """The program's own first input (tokens, after the system prompt) and its nodes."""


def sequential_calls(
    calls: int,
    *,
    wait: Callable[[str, str], WaitNode],
    wait_prefix: str,
    prompt_extends_wait: bool,
    fresh_tokens: Callable[[], int],
    output_tokens: Callable[[], int],
) -> list[Node]:
    """The ``main`` thread of a sequential agent: LLM calls ``c0 … c<calls-1>`` with a wait
    between each two (a tool call, a human's think time).

    For call k >= 1, in this order: ``wait(f"{wait_prefix}{k}", previous_call_id)`` draws the
    wait, which must depend on call k-1; ``fresh_tokens()`` draws call k's fresh prompt tokens;
    ``output_tokens()`` its output. Call 0 draws only its output (its input is the program's
    root prompt). Call k's prompt extends the wait's prefix when ``prompt_extends_wait`` (a
    tool's observation joins the context), else call k-1's (think time adds nothing to it).
    """
    nodes: list[Node] = []
    previous: str | None = None
    for k in range(calls):
        parents: tuple[str, ...] = ()
        context = previous
        new_tokens = 0
        if previous is not None:
            before = wait(f"{wait_prefix}{k}", previous)
            nodes.append(before)
            parents = (before.node_id,)
            if prompt_extends_wait:
                context = before.node_id
            new_tokens = fresh_tokens()
        call = LLMNode(f"c{k}", parents, "main", context, new_tokens, output_tokens())
        nodes.append(call)
        previous = call.node_id
    return nodes
