"""The baseline router: round robin over the candidate backends."""

from __future__ import annotations

from collections.abc import Sequence

from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.filters import ModelFilter
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallEntry

__all__ = ["RoundRobinRouter"]


class RoundRobinRouter:
    """Cycles through the candidate backends in id order (implements
    :class:`~agentrt_controller.routing.api.Router`)."""

    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def eligible(
        self, call: CallEntry, candidates: Sequence[BackendView], now_s: float
    ) -> Sequence[BackendView]:
        if ModelFilter.keeps_all(call, candidates):
            return candidates
        return ModelFilter().filter(call, candidates, now_s)

    def route(self, call: CallEntry, candidates: Sequence[BackendView], now_s: float) -> str:
        candidates = self.eligible(call, candidates, now_s)
        if not candidates:
            raise ValueError(f"no candidate backend serves the model {call.facts.model!r}")
        ordered = sorted(candidates, key=lambda b: b.backend_id)
        choice = ordered[self._next % len(ordered)]
        self._next += 1
        return choice.backend_id

    def on_finish(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        return None

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        return None
