"""Whether an emulated engine kept its model-time schedule during a live run: its
Prometheus samples, its mean delivery lag and the model time it gave up to schedule restarts
(docs/engine-emulator.md, "Time"). A run whose emulator fell behind measured the machine, not
the proxy or the policy, and is flagged rather than counted."""

from __future__ import annotations

import contextlib
import re
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

#: A live run is flagged when its emulator delivered a step's tokens more than this late on
#: average (model seconds; about one decode step of the batch-8 A100 engine, so at most a
#: step of extra latency per call) or gave up more than this share of its busy model time to
#: schedule restarts.
MAX_LAG_MEAN_S = 0.01
MAX_DROPPED_SHARE = 0.01

_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{[^}]*\})? (\S+)$")


def samples(text: str) -> Iterator[tuple[str, float]]:
    """``(name, value)`` of every sample of a /metrics body, labels dropped."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            with contextlib.suppress(ValueError):
                yield match.group(1), float(match.group(2))


def parse_metrics(text: str) -> dict[str, float]:
    """``name -> value`` of the unlabelled-or-single-series samples of a /metrics body (the
    last series wins for a name with several)."""
    return dict(samples(text))


def engine_health(metrics: Mapping[str, float]) -> dict[str, float | None]:
    """Whether the emulator kept up: its mean delivery lag (model s), schedule restarts,
    the model seconds they gave up, its busy model seconds and its server-side TTFT."""

    def ratio(total: str, count: str) -> float | None:
        n = metrics.get(count, 0.0)
        return metrics.get(total, 0.0) / n if n else None

    return {
        "lag_mean_s": ratio(
            "agentrt_engine_delivery_lag_seconds_sum", "agentrt_engine_delivery_lag_seconds_count"
        ),
        "schedule_resets": metrics.get("agentrt_engine_schedule_resets_total"),
        "dropped_model_s": metrics.get("agentrt_engine_dropped_model_seconds_total"),
        "busy_model_s": metrics.get("agentrt_engine_busy_model_seconds_total"),
        "engine_ttft_mean_s": ratio(
            "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count"
        ),
    }


def scrape(engine_url: str) -> dict[str, float | None]:
    """:func:`engine_health` of the emulator at ``engine_url``, now."""
    with urllib.request.urlopen(engine_url + "/metrics", timeout=10) as response:
        return engine_health(parse_metrics(response.read().decode()))


def kept_up(health: Mapping[str, Any]) -> bool:
    """Whether the emulator kept its model-time schedule (:data:`MAX_LAG_MEAN_S`,
    :data:`MAX_DROPPED_SHARE`)."""
    lag, busy = health.get("lag_mean_s"), health.get("busy_model_s") or 0.0
    dropped = health.get("dropped_model_s") or 0.0
    return lag is not None and lag <= MAX_LAG_MEAN_S and dropped <= MAX_DROPPED_SHARE * busy
