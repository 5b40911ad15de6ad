"""Read-only views of the engine's state: the ``GET /agentrt/v1/queues`` JSON and the
scrape-time Prometheus gauges (names in docs/controller.md, "Metrics")."""

from __future__ import annotations

from typing import Any

from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.service.core.pool import BackendPool
from agentrt_controller.service.core.retention import RetentionExecutor
from agentrt_controller.service.telemetry.metrics import BACKEND_STATES, ServiceMetrics

__all__ = ["collect_metrics", "queues_snapshot"]


def queues_snapshot(
    dispatcher: Dispatcher, pool: BackendPool, retention: RetentionExecutor | None, now_s: float
) -> dict[str, Any]:
    """The scheduler's queues, the policies' names, the retained lane, retention counters and
    each backend's load, as plain JSON."""
    snapshot = dispatcher.scheduler.snapshot(now_s)
    snapshot["admission"] = getattr(dispatcher.admission, "name", "")
    snapshot["router"] = getattr(dispatcher.router, "name", "")
    snapshot["retained_lane"] = dispatcher.lane_snapshot()
    if retention is not None:
        snapshot["retention"] = retention.snapshot()
    snapshot["backends"] = [
        {
            "backend_id": backend_id,
            "kind": state.backend.kind,
            "url": state.backend.url,
            "healthy": state.healthy,
            "in_flight": state.in_flight,
            "admitted_total": state.admitted_total,
            "supports_priority": state.backend.capabilities.supports_priority,
            "num_running": state.load.num_running,
            "num_waiting": state.load.num_waiting,
            "kv_cache_usage": state.load.kv_cache_usage,
        }
        for backend_id, state in pool.states.items()
    ]
    return snapshot


def collect_metrics(
    metrics: ServiceMetrics, dispatcher: Dispatcher, pool: BackendPool, now_s: float
) -> None:
    """Fill the gauges that are read from live state at scrape time."""
    metrics.fill_queues(dispatcher.scheduler.snapshot(now_s))
    metrics.programs.set(float(len(dispatcher.table)))
    metrics.tenant_programs.replace(
        {(tenant or "",): float(n) for tenant, n in dispatcher.table.tenant_counts().items()}
    )
    states = pool.states
    # replace(): a removed backend's series disappear with it.
    metrics.in_flight.replace({(b,): float(s.in_flight) for b, s in states.items()})
    metrics.backend_up.replace({(b,): float(s.healthy) for b, s in states.items()})
    metrics.backend_circuit.replace(
        {
            (b, state): float(s.status() == state)
            for b, s in states.items()
            for state in BACKEND_STATES
        }
    )
    metrics.backend_waiting.replace(
        {
            (b,): float(s.load.num_waiting)
            for b, s in states.items()
            if s.load.num_waiting is not None
        }
    )
