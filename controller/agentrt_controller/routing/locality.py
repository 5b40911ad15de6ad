"""Locality counters: how often a program's call lands on another backend than its previous one.

A program's context (system prompt, repository, the growing history of a coding agent: 12-180 K
tokens, docs/routing.md "Keeping a program's context where it is") sits in the prefix cache of
the backend its previous call ran on. A call routed elsewhere recomputes it there. Every
:class:`~agentrt_controller.routing.pipeline.PipelineRouter` keeps one :class:`LocalityStats`
(a :class:`~agentrt_controller.routing.api.RouteObserver`) so the controller's introspection and
the simulator report the moves of whichever router runs. Pure: nothing reads a clock.
"""

from __future__ import annotations

from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.call import CallEntry

__all__ = ["LocalityStats"]


class LocalityStats:
    """Per (program, model): the backend of its latest call; counts of calls that moved.

    A call *moves* when its program's previous call (for the same model) went to another
    backend. ``moved_context_tokens`` sums the prompt tokens of the previous call of every move:
    the context left behind, which the new backend had to compute (an upper bound of what the
    move cost: the shared part may already be there)."""

    def __init__(self) -> None:
        #: program -> model -> (backend of its latest call, that call's prompt tokens)
        self._last: dict[ProgramKey, dict[str | None, tuple[str, int]]] = {}
        #: Programs (still running) that moved at least once.
        self._moved: set[ProgramKey] = set()
        #: Calls routed of programs that had routed a call before (for the same model).
        self.followup_calls = 0
        #: Those of them routed to another backend than the previous call.
        self.moved_calls = 0
        #: Prompt tokens of the previous call of each moved call (tokens).
        self.moved_context_tokens = 0
        #: Programs that moved at least once (counted at their first move).
        self.programs_moved = 0

    def on_routed(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        facts = call.facts
        by_model = self._last.get(facts.program)
        if by_model is None:
            self._last[facts.program] = {facts.model: (backend_id, facts.prompt_tokens)}
            return
        last = by_model.get(facts.model)
        by_model[facts.model] = (backend_id, facts.prompt_tokens)
        if last is None:
            return
        self.followup_calls += 1
        if last[0] != backend_id:
            self.moved_calls += 1
            self.moved_context_tokens += last[1]
            if facts.program not in self._moved:
                self._moved.add(facts.program)
                self.programs_moved += 1

    def on_finish(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        return None

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        self._last.pop(program, None)
        self._moved.discard(program)

    def __len__(self) -> int:
        """Programs with a remembered backend (empty again once every program ended)."""
        return len(self._last)

    def snapshot(self) -> dict[str, int]:
        """JSON-able counters."""
        return {
            "followup_calls": self.followup_calls,
            "moved_calls": self.moved_calls,
            "moved_context_tokens": self.moved_context_tokens,
            "programs_moved": self.programs_moved,
        }
