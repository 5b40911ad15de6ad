"""The live state of the backends: in-flight counts, scraped load, health, served models."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from controller.backends.api import Backend, BackendError, BackendLoad
from controller.scheduling.api import BackendView

__all__ = ["BackendPool", "BackendState"]

_log = logging.getLogger("agentrt.controller")


@dataclass(slots=True, eq=False)
class BackendState:
    """What the controller knows about one backend right now."""

    backend: Backend
    #: Calls admitted to it that have not finished.
    in_flight: int = 0
    #: Last health verdict (optimistic until the first probe).
    healthy: bool = True
    #: Last scrape; all-``None`` when unknown.
    load: BackendLoad = field(default_factory=BackendLoad)
    #: When :attr:`load` was scraped (seconds, controller clock); ``None`` = never.
    load_at_s: float | None = None
    #: Models from its ``/v1/models`` (empty when it did not answer).
    models: list[dict[str, Any]] = field(default_factory=list)
    #: Calls admitted to it since start.
    admitted_total: int = 0


class BackendPool:
    """Backends by id, with the views the policies get. Single event-loop thread only."""

    def __init__(
        self,
        backends: Sequence[Backend],
        on_change: Callable[[], None],
        clock: Callable[[], float],
    ) -> None:
        self._clock = clock
        self.states: dict[str, BackendState] = {b.backend_id: BackendState(b) for b in backends}
        self._on_change = on_change

    def views(self) -> list[BackendView]:
        return [
            BackendView(
                backend_id=backend_id,
                in_flight=state.in_flight,
                healthy=state.healthy,
                num_running=state.load.num_running,
                num_waiting=state.load.num_waiting,
                kv_cache_usage=state.load.kv_cache_usage,
                supports_priority=state.backend.capabilities.supports_priority,
                metrics_at_s=state.load_at_s,
            )
            for backend_id, state in self.states.items()
        ]

    def any_healthy(self) -> bool:
        return any(state.healthy for state in self.states.values())

    def release(self, backend_id: str) -> None:
        """One admitted call left ``backend_id`` (a backend removed meanwhile is ignored)."""
        state = self.states.get(backend_id)
        if state is not None:
            state.in_flight -= 1

    def mark_down(self, backend_id: str) -> None:
        """A call could not reach it: out of routing until a probe says otherwise."""
        state = self.states.get(backend_id)
        if state is not None and state.healthy:
            _log.warning("backend %s unreachable: marked down", backend_id)
            state.healthy = False
            self._on_change()

    async def refresh(self) -> None:
        """Probe every backend once (health, load, models), concurrently."""
        async with anyio.create_task_group() as group:
            for state in self.states.values():
                group.start_soon(self._refresh_one, state)
        self._on_change()

    async def _refresh_one(self, state: BackendState) -> None:
        backend = state.backend
        healthy = await backend.health()
        if healthy and backend.capabilities.scrapes_metrics:
            try:
                state.load = await backend.scrape()
            except BackendError:
                state.load = BackendLoad()
            state.load_at_s = self._clock()
        elif not healthy:
            state.load = BackendLoad()
        if healthy and not state.models:
            try:
                state.models = await backend.models()
            except BackendError:
                state.models = []
        if healthy != state.healthy:
            _log.warning("backend %s is %s", backend.backend_id, "up" if healthy else "down")
        state.healthy = healthy

    def model_list(self) -> list[dict[str, Any]]:
        """The union of all backends' models, first occurrence of each id wins."""
        seen: dict[str, dict[str, Any]] = {}
        for state in self.states.values():
            for model in state.models:
                seen.setdefault(model["id"], model)
        return list(seen.values())

    def known_model_ids(self) -> set[str] | None:
        """Model ids served somewhere, or ``None`` when no backend told us (then any model
        name is forwarded and the backend judges it)."""
        ids = {m["id"] for state in self.states.values() for m in state.models}
        return ids or None
