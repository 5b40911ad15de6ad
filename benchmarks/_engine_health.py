"""Whether an emulated engine kept its model-time schedule during a live run: its mean
delivery lag and the model time it gave up to schedule restarts
(docs/engine-emulator.md, "Time"). A run whose emulator fell behind measured the machine, not
the proxy or the policy, and is flagged rather than counted."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from typing import Any

from agentrt_controller.backends.prometheus_text import sum_samples

#: A live run is flagged when its emulator delivered a step's tokens more than this late on
#: average (model seconds; about one decode step of the batch-8 A100 engine, so at most a
#: step of extra latency per call) or gave up more than this share of its busy model time to
#: schedule restarts.
MAX_LAG_MEAN_S = 0.01
MAX_DROPPED_SHARE = 0.01

_LAG = "agentrt_engine_delivery_lag_seconds"
_TTFT = "vllm:time_to_first_token_seconds"
_RESETS = "agentrt_engine_schedule_resets_total"
_DROPPED = "agentrt_engine_dropped_model_seconds_total"
_BUSY = "agentrt_engine_busy_model_seconds_total"
#: The emulator's series the health reads (one series per engine: summed, as the
#: controller's scrape does).
_SERIES = (
    f"{_LAG}_sum",
    f"{_LAG}_count",
    f"{_TTFT}_sum",
    f"{_TTFT}_count",
    _RESETS,
    _DROPPED,
    _BUSY,
)


def engine_health(text: str) -> dict[str, float | None]:
    """Whether the emulator kept up, from its /metrics body: its mean delivery lag (model
    s), schedule restarts, the model seconds they gave up, its busy model seconds and its
    server-side TTFT."""
    metrics = sum_samples(text, _SERIES)

    def mean(histogram: str) -> float | None:
        n = metrics.get(f"{histogram}_count", 0.0)
        return metrics.get(f"{histogram}_sum", 0.0) / n if n else None

    return {
        "lag_mean_s": mean(_LAG),
        "schedule_resets": metrics.get(_RESETS),
        "dropped_model_s": metrics.get(_DROPPED),
        "busy_model_s": metrics.get(_BUSY),
        "engine_ttft_mean_s": mean(_TTFT),
    }


def scrape(engine_url: str) -> dict[str, float | None]:
    """:func:`engine_health` of the emulator at ``engine_url``, now."""
    with urllib.request.urlopen(engine_url + "/metrics", timeout=10) as response:
        return engine_health(response.read().decode())


def kept_up(health: Mapping[str, Any]) -> bool:
    """Whether the emulator kept its model-time schedule (:data:`MAX_LAG_MEAN_S`,
    :data:`MAX_DROPPED_SHARE`)."""
    lag, busy = health.get("lag_mean_s"), health.get("busy_model_s") or 0.0
    dropped = health.get("dropped_model_s") or 0.0
    return lag is not None and lag <= MAX_LAG_MEAN_S and dropped <= MAX_DROPPED_SHARE * busy
