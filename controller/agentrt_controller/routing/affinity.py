"""Program → backend bindings with a time-to-live (program affinity).

Two routers use it: ``autellix`` binds a program to the backend of its *first* call and never
moves it (Autellix Algorithm 2); ``prefix`` rebinds to wherever the program's latest call went
and uses the binding as a tie-breaking preference. A binding not refreshed for ``ttl_s``
seconds is gone (the engine has likely evicted the program's context by then); program end
forgets it. Pure: ``now_s`` comes in.

A binding is per program *and model* (``CallFacts.model``): a program whose planner runs on one
model and its verifier on another has one binding for each, since a backend's cache of one
model's context is of no use to the other's (docs/routing.md, "Several models").
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
        #: (program, model) -> (backend id, when the binding was last refreshed in seconds)
        self._bound: dict[tuple[ProgramKey, str | None], tuple[str, float]] = {}
        #: program -> the models it has a binding for (forgotten together at program end)
        self._models: dict[ProgramKey, set[str | None]] = {}

    def backend_of(self, program: ProgramKey, now_s: float, model: str | None = None) -> str | None:
        """The program's backend for ``model``, or ``None`` (never bound, expired or
        ended)."""
        key = (program, model)
        bound = self._bound.get(key)
        if bound is None:
            return None
        if now_s - bound[1] > self.ttl_s:
            del self._bound[key]
            models = self._models.get(program)
            if models is not None:
                models.discard(model)
                if not models:
                    del self._models[program]
            return None
        return bound[0]

    def backend_of_call(self, call: CallEntry, now_s: float) -> str | None:
        """The backend of the call's program for the call's model (:meth:`backend_of`)."""
        return self.backend_of(call.facts.program, now_s, call.facts.model)

    def bound_among(self, call: CallEntry, backend_ids: Sequence[str], now_s: float) -> str | None:
        """The call's program's backend if it is one of ``backend_ids``, else ``None``."""
        backend = self.backend_of_call(call, now_s)
        return backend if backend is not None and backend in backend_ids else None

    def __len__(self) -> int:
        return len(self._bound)

    # --- RouteObserver -------------------------------------------------------------------

    def on_routed(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        program, model = call.facts.program, call.facts.model
        if self.sticky_first:
            # (Following the latest call, the current binding does not matter: rebound below,
            # an expired one included.)
            current = self.backend_of(program, now_s, model)
            if current is not None and current != backend_id:
                # Sent elsewhere (its backend was down or full): the binding stays, refreshed.
                self._bound[program, model] = (current, now_s)
                return
        self._bound[program, model] = (backend_id, now_s)
        models = self._models.get(program)
        if models is None:
            self._models[program] = {model}
        else:
            models.add(model)

    def on_finish(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        key = (call.facts.program, call.facts.model)
        bound = self._bound.get(key)
        if bound is not None and bound[0] == backend_id:
            self._bound[key] = (backend_id, now_s)

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        for model in self._models.pop(program, ()):
            self._bound.pop((program, model), None)
