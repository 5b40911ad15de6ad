"""Read-only views of the engine's state: the ``GET /agentrt/v1/queues`` JSON and the
scrape-time Prometheus gauges (names in docs/controller.md, "Metrics").

**Times in the views.** The policies run on the controller's monotonic clock, whose origin
means nothing outside the process; the JSON views therefore give each moment as wall-clock
ISO 8601 (UTC, milliseconds: ``"last_arrival_at": "2026-12-05T08:21:01.123Z"``), which can be
matched with log lines, access-log lines and traces, and keep the monotonic value under a name
that says so (``"last_arrival_monotonic_s": 513.69``: differences between two views are exact
on it, wall clocks may step). Durations (``age_s``, ``wait_s``...) stay seconds.
:func:`with_wall_times` does the conversion; each view also says when it was taken
(``now_at``, ``now_monotonic_s``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission
from agentrt_controller.scheduling.api import AdmissionPolicy
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.service.core.pool import BackendPool
from agentrt_controller.service.core.retention import RetentionExecutor
from agentrt_controller.service.telemetry.metrics import BACKEND_STATES, ServiceMetrics
from agentrt_serving.logs import iso_time

__all__ = [
    "MOMENT_FIELDS",
    "admission_window",
    "collect_metrics",
    "queues_snapshot",
    "with_wall_times",
]

#: Snapshot fields holding a moment on the controller's monotonic clock (seconds); each
#: becomes ``<name>_at`` (ISO 8601) and ``<name>_monotonic_s`` (:func:`with_wall_times`).
MOMENT_FIELDS = frozenset(
    {"arrival_s", "deadline_s", "last_arrival_s", "last_completion_s", "retained_until_s"}
)


def with_wall_times(
    view: dict[str, Any],
    now_monotonic_s: float,
    now_wall_s: float | None = None,
    *,
    time_scale: float = 1.0,
) -> dict[str, Any]:
    """``view`` (a JSON snapshot taken at ``now_monotonic_s`` on the controller's clock) with
    every :data:`MOMENT_FIELDS` entry, at any depth, replaced by ``<name>_at`` — wall clock,
    ISO 8601 UTC, ``None`` stays ``None`` — and ``<name>_monotonic_s``, plus ``now_at`` and
    ``now_monotonic_s`` at the top. ``now_wall_s``: the wall clock at the same moment
    (seconds since the epoch; default: :func:`time.time`). ``time_scale``: the controller's
    clock runs that many times faster than the wall clock (``controller serve --time-scale``),
    so a moment ``d`` of its seconds away is ``d / time_scale`` wall seconds away. A new dict;
    ``view`` is left as is."""
    wall_s = time.time() if now_wall_s is None else now_wall_s
    converted = _convert(view, lambda moment: wall_s + (moment - now_monotonic_s) / time_scale)
    assert isinstance(converted, dict)
    return {"now_at": iso_time(wall_s), "now_monotonic_s": now_monotonic_s, **converted}


def _convert(value: object, to_wall: Callable[[float], float]) -> object:
    """``value`` with its moments converted (``to_wall``: a moment of the controller's clock
    -> seconds since the epoch)."""
    if isinstance(value, list):
        return [_convert(item, to_wall) for item in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, object] = {}
    for key, item in value.items():
        if key in MOMENT_FIELDS and (item is None or isinstance(item, int | float)):
            stem = key[: -len("_s")]
            finite = item is not None and math.isfinite(item)
            out[f"{stem}_at"] = iso_time(to_wall(item)) if item is not None and finite else None
            out[f"{stem}_monotonic_s"] = item if finite else None
        else:
            out[key] = _convert(item, to_wall)
    return out


def admission_window(admission: AdmissionPolicy, backend_id: str) -> tuple[float, bool | None]:
    """The backend's admission window (sequences; ``inf`` = unlimited) and whether it is in
    slow start (``None``: the policy has none). The adaptive window as the policy holds it —
    a backend has room while its sequences in flight are below ``floor(window)`` — and its
    initial window for a backend it has not been asked about yet. Reads state only: for
    scrapes and views, never per call."""
    if isinstance(admission, AdaptiveWindowAdmission):
        return admission.window(backend_id), admission.in_slow_start(backend_id)
    if isinstance(admission, FixedWindowAdmission):
        fixed = admission.window
        return (math.inf if fixed is None else float(fixed)), None
    return math.inf, None  # a policy without a window: nothing held back by one


def queues_snapshot(
    dispatcher: Dispatcher, pool: BackendPool, retention: RetentionExecutor | None, now_s: float
) -> dict[str, Any]:
    """The scheduler's queues, the policies' names, the retained lane, retention counters and
    each backend's load, as plain JSON; its moments on the controller's clock (the caller
    converts them: :func:`with_wall_times`)."""
    snapshot = dispatcher.scheduler.snapshot(now_s)
    snapshot["admission"] = getattr(dispatcher.admission, "name", "")
    snapshot["router"] = getattr(dispatcher.router, "name", "")
    snapshot["retained_lane"] = dispatcher.lane_snapshot()
    if retention is not None:
        snapshot["retention"] = retention.snapshot()
    admission = dispatcher.admission
    backends: list[dict[str, Any]] = []
    for backend_id, state in pool.states.items():
        window, slow_start = admission_window(admission, backend_id)
        backends.append(
            {
                "backend_id": backend_id,
                "kind": state.backend.kind,
                "url": state.backend.url,
                "healthy": state.healthy,
                "in_flight": state.in_flight,
                "sequences_in_flight": state.sequences_in_flight,
                # JSON has no infinity: null = unlimited
                "admission_window": window if math.isfinite(window) else None,
                "admission_slow_start": slow_start,
                "admitted_total": state.admitted_total,
                "supports_priority": state.backend.capabilities.supports_priority,
                "num_running": state.load.num_running,
                "num_waiting": state.load.num_waiting,
                "kv_cache_usage": state.load.kv_cache_usage,
            }
        )
    snapshot["backends"] = backends
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
    metrics.in_flight_sequences.replace(
        {(b,): float(s.sequences_in_flight) for b, s in states.items()}
    )
    windows = {b: admission_window(dispatcher.admission, b) for b in states}
    metrics.admission_window.replace({(b,): window for b, (window, _) in windows.items()})
    metrics.admission_slow_start.replace(
        {(b,): float(slow) for b, (_, slow) in windows.items() if slow is not None}
    )
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
