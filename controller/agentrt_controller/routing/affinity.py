"""Program → backend bindings with a time-to-live (program affinity).

Two routers use it: ``autellix`` binds a program to the backend of its *first* call and never
moves it (Autellix Algorithm 2); ``prefix`` rebinds to wherever the program's latest call went
and uses the binding as a tie-breaking preference. A binding not refreshed for ``ttl_s``
seconds is gone (the engine has likely evicted the program's context by then); program end
forgets it. Pure: ``now_s`` comes in.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.call import CallEntry

__all__ = ["ProgramAffinity"]


class ProgramAffinity:
    """Bindings keyed by program (a :class:`~agentrt_controller.routing.api.RouteObserver`)."""

    def __init__(self, *, ttl_s: float = 600.0, sticky_first: bool = False) -> None:
        """``ttl_s`` > 0 (``math.inf`` = until program end). ``sticky_first``: keep the first
        backend a program was routed to (Autellix); otherwise follow its latest call."""
        if not ttl_s > 0:
            raise ConfigError(f"affinity ttl_s must be > 0 seconds, got {ttl_s!r}")
        self.ttl_s = float(ttl_s)
        self.sticky_first = sticky_first
        #: program -> (backend id, when the binding was last refreshed in seconds)
        self._bound: dict[ProgramKey, tuple[str, float]] = {}

    def backend_of(self, program: ProgramKey, now_s: float) -> str | None:
        """The program's backend, or ``None`` (never bound, expired or ended)."""
        bound = self._bound.get(program)
        if bound is None:
            return None
        if now_s - bound[1] > self.ttl_s:
            del self._bound[program]
            return None
        return bound[0]

    def bound_among(self, call: CallEntry, backend_ids: Sequence[str], now_s: float) -> str | None:
        """The call's program's backend if it is one of ``backend_ids``, else ``None``."""
        backend = self.backend_of(call.facts.program, now_s)
        return backend if backend is not None and backend in backend_ids else None

    def __len__(self) -> int:
        return len(self._bound)

    # --- RouteObserver -------------------------------------------------------------------

    def on_routed(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        program = call.facts.program
        current = self.backend_of(program, now_s)
        if self.sticky_first and current is not None and current != backend_id:
            # Sent elsewhere (its backend was down or full): the binding stays, refreshed.
            self._bound[program] = (current, now_s)
            return
        self._bound[program] = (backend_id, now_s)

    def on_finish(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        program = call.facts.program
        bound = self._bound.get(program)
        if bound is not None and bound[0] == backend_id:
            self._bound[program] = (backend_id, now_s)

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        self._bound.pop(program, None)
