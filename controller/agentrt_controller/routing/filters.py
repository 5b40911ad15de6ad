"""Filters: each narrows the candidate backends for one call (see :mod:`.api`)."""

from __future__ import annotations

from collections.abc import Sequence

from agentrt.errors import ConfigError
from agentrt_controller.routing.affinity import ProgramAffinity
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallEntry

__all__ = [
    "AutellixLongCallFilter",
    "HealthyFilter",
    "KvPressureFilter",
    "ModelDemand",
    "ModelFilter",
    "RetainedFilter",
    "serves",
]


def serves(view: BackendView, model: str | None) -> bool:
    """Whether ``view``'s backend may take a call for ``model``: the call names none, the
    backend's models are unknown (``BackendView.models`` is ``None``), or it serves it."""
    return model is None or view.models is None or model in view.models


class ModelDemand:
    """How many queued calls ask for each model (``None``: calls naming none), so that an
    admission round can stop as soon as no queued call could go to any backend with room —
    instead of popping, and putting back, every queued call of a model whose backends are full
    (docs/routing.md, "Several models").

    A count may only be too high, never too low: the Dispatcher adds at submission and
    re-queueing, and takes away only where a call certainly left the queues (admitted,
    cancelled, dropped). A count too high costs a round some pops; one too low would leave a
    call waiting while a backend of its model has room.
    """

    def __init__(self) -> None:
        self._queued: dict[str | None, int] = {}

    def add(self, model: str | None) -> None:
        self._queued[model] = self._queued.get(model, 0) + 1

    def remove(self, model: str | None) -> None:
        left = self._queued.get(model, 0) - 1
        if left > 0:
            self._queued[model] = left
        else:
            self._queued.pop(model, None)

    def any_servable(self, backends: Sequence[BackendView], blocked: set[str | None]) -> bool:
        """Whether some queued call's model, not in ``blocked`` (found without a backend this
        round), is served by one of ``backends``. (Loops, not generators, and :func:`serves`
        inlined: this runs once per admission round, and a generator or a function costs a
        Python call per item.)"""
        for model in self._queued:
            if model in blocked:
                continue
            for b in backends:  # serves(b, model), inlined
                if model is None or b.models is None or model in b.models:
                    return True
        return False


class ModelFilter:
    """Keeps the backends that serve the call's model (``CallFacts.model``; docs/routing.md,
    "Several models"). Unlike the other filters it is a *constraint*, not a preference: every
    router applies it first (:meth:`~agentrt_controller.routing.api.Router.eligible`) and it
    is never skipped — a call whose model no candidate serves waits for one that does."""

    def filter(
        self, call: CallEntry, backends: Sequence[BackendView], now_s: float
    ) -> list[BackendView]:
        model = call.facts.model
        return [b for b in backends if serves(b, model)]

    @staticmethod
    def keeps_all(call: CallEntry, backends: Sequence[BackendView]) -> bool:
        """Whether every one of ``backends`` serves the call's model (the common case: one
        model everywhere), so the candidate set can be passed on as it is."""
        model = call.facts.model
        if model is None:
            return True
        # A loop, not all(generator), and serves() inlined: see ModelDemand.any_servable.
        for b in backends:  # noqa: SIM110
            if b.models is not None and model not in b.models:
                return False
        return True


class HealthyFilter:
    """Drops backends marked unhealthy (health check / circuit breaker): failover."""

    def filter(
        self, call: CallEntry, backends: Sequence[BackendView], now_s: float
    ) -> list[BackendView]:
        return [b for b in backends if b.healthy]

    @staticmethod
    def keeps(view: BackendView) -> bool:
        """Whether :meth:`filter` keeps ``view`` (the test per backend, for the pruned
        router: :mod:`.pruning`)."""
        return bool(view.healthy)


class KvPressureFilter:
    """Drops backends whose scraped KV usage is at or above ``max_usage`` (a fraction in
    (0, 1]): a call sent there would evict cached prefixes or preempt running requests.
    Backends with unknown usage stay."""

    def __init__(self, max_usage: float = 0.95) -> None:
        if not 0 < max_usage <= 1:
            raise ConfigError(f"kv_pressure max_usage must be in (0, 1], got {max_usage!r}")
        self.max_usage = float(max_usage)

    def filter(
        self, call: CallEntry, backends: Sequence[BackendView], now_s: float
    ) -> list[BackendView]:
        limit = self.max_usage  # :meth:`keeps`, inlined: one call per backend saved
        return [b for b in backends if b.kv_cache_usage is None or b.kv_cache_usage < limit]

    def keeps(self, view: BackendView) -> bool:
        """Whether :meth:`filter` keeps ``view``: its usage is unknown or below the limit."""
        usage = view.kv_cache_usage
        return usage is None or usage < self.max_usage


class RetainedFilter:
    """Keeps only the backend that retains the call's KV (``CallEntry.retained_backend``, set while
    a retention window lasts: docs/routing.md, "KV retention") when it is a candidate."""

    def filter(
        self, call: CallEntry, backends: Sequence[BackendView], now_s: float
    ) -> list[BackendView]:
        retained = call.retained_backend
        if retained is None:
            return list(backends)
        return [b for b in backends if b.backend_id == retained]


class AutellixLongCallFilter:
    """Autellix Algorithm 2: a call with more than ``threshold_tokens`` prompt tokens keeps
    only its program's bound backend (the one its first call went to); shorter calls, and
    programs not bound yet, keep every candidate (a load scorer then picks)."""

    def __init__(self, affinity: ProgramAffinity, threshold_tokens: int = 2048) -> None:
        if isinstance(threshold_tokens, bool) or not isinstance(threshold_tokens, int):
            raise ConfigError(f"threshold_tokens must be an integer, got {threshold_tokens!r}")
        if threshold_tokens < 0:
            raise ConfigError(f"threshold_tokens must be >= 0, got {threshold_tokens}")
        self.affinity = affinity
        self.threshold_tokens = threshold_tokens

    def filter(
        self, call: CallEntry, backends: Sequence[BackendView], now_s: float
    ) -> list[BackendView]:
        if call.facts.prompt_tokens <= self.threshold_tokens:
            return list(backends)
        bound = self.affinity.backend_of_call(call, now_s)
        return [b for b in backends if b.backend_id == bound]
