"""Prometheus text exposition (format 0.0.4) with vLLM's metric names.

Gauges and token counters come from :meth:`EngineCore.stats` at scrape time; the latency
histograms are observed by the engine loop. **All latencies are in model seconds** (equal to
wall seconds at ``--time-scale 1``), so metrics describe the modelled GPU, not the speed-up.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentrt_emulator.core.types import EngineStats

__all__ = ["Histogram", "ServerMetrics"]

# Bucket bounds close to vLLM's (seconds).
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
_LAG_BUCKETS = (0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


@dataclass(slots=True)
class Histogram:
    """A cumulative histogram: ``counts[i]`` observations fell into ``(bounds[i-1], bounds[i]]``."""

    bounds: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf"
    return repr(float(value))


@dataclass(slots=True)
class ServerMetrics:
    """Server-side observations; rendered together with the engine's stats."""

    model_name: str
    e2e: Histogram = field(default_factory=lambda: Histogram(_LATENCY_BUCKETS))
    queue_time: Histogram = field(default_factory=lambda: Histogram(_LATENCY_BUCKETS))
    ttft: Histogram = field(default_factory=lambda: Histogram(_TTFT_BUCKETS))
    #: Finished requests by finish reason (``vllm:request_success_total``).
    success: dict[str, int] = field(default_factory=dict)
    #: Requests aborted (client gone) before they finished.
    aborted: int = 0
    #: The engine's batch size (``--max-num-seqs``), published as
    #: ``agentrt:engine_max_num_seqs`` so a controller can bound its admission window by it
    #: (vLLM has no such metric); ``None`` = not published.
    max_num_seqs: int | None = None
    #: Per engine step, how late its tokens were delivered: wall time past the step's
    #: modelled end, in model seconds (the driver's CPU time beyond the modelled step).
    delivery_lag: Histogram = field(default_factory=lambda: Histogram(_LAG_BUCKETS))
    #: Model seconds of engine steps run (the modelled GPU's busy time).
    busy_model_s: float = 0.0
    #: Times the driver fell more than its lag bound behind its schedule and restarted it.
    schedule_resets: int = 0
    #: Model seconds given up by those restarts (busy time that became idle time).
    dropped_model_s: float = 0.0
    #: Requests answered 500 because of an unhandled error, by route template.
    internal_errors: dict[str, int] = field(default_factory=dict)

    def internal_error(self, route: str) -> None:
        """Count one request that failed with an unhandled error on ``route``."""
        self.internal_errors[route] = self.internal_errors.get(route, 0) + 1

    def render(self, stats: EngineStats) -> str:
        """The ``/metrics`` body."""
        label = 'model_name="' + _escape(self.model_name) + '"'
        lines: list[str] = []

        def sample(name: str, kind: str, help_text: str, value: float) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f"{name}{{{label}}} {_fmt(value)}")

        sample(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            stats.num_running,
        )
        sample(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            stats.num_waiting,
        )
        sample(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            stats.kv_cache_usage,
        )
        sample(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            stats.prefix_cache_queries,
        )
        sample(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            stats.prefix_cache_hits,
        )
        sample(
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemptions from the engine.",
            stats.num_preemptions,
        )
        sample(
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            stats.prompt_tokens,
        )
        sample(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            stats.generation_tokens,
        )
        sample(
            "agentrt:engine_pinned_blocks",
            "gauge",
            "KV blocks held by retention pins.",
            stats.pinned_blocks,
        )
        sample(
            "agentrt:engine_recomputed_prompt_tokens_total",
            "counter",
            "Prompt tokens computed again after preemption or eviction.",
            stats.recomputed_prompt_tokens,
        )
        if self.max_num_seqs is not None:
            sample(
                "agentrt:engine_max_num_seqs",
                "gauge",
                "Most requests the engine runs at once (--max-num-seqs).",
                self.max_num_seqs,
            )
        sample(
            "agentrt:engine_aborted_requests_total",
            "counter",
            "Requests aborted before they finished.",
            self.aborted,
        )
        sample(
            "agentrt:engine_busy_model_seconds_total",
            "counter",
            "Model seconds of engine steps run.",
            self.busy_model_s,
        )
        sample(
            "agentrt:engine_schedule_resets_total",
            "counter",
            "Times the engine loop fell too far behind its model-time schedule and restarted it.",
            self.schedule_resets,
        )
        sample(
            "agentrt:engine_dropped_model_seconds_total",
            "counter",
            "Model seconds of schedule given up by those restarts.",
            self.dropped_model_s,
        )
        lines.append(
            "# HELP agentrt:engine_internal_errors_total Requests answered 500 because of an "
            "unhandled error, by route (see the log)."
        )
        lines.append("# TYPE agentrt:engine_internal_errors_total counter")
        for route in sorted(self.internal_errors):
            lines.append(
                f'agentrt:engine_internal_errors_total{{{label},route="{_escape(route)}"}} '
                f"{_fmt(self.internal_errors[route])}"
            )
        lines.append("# HELP vllm:request_success_total Count of successfully processed requests.")
        lines.append("# TYPE vllm:request_success_total counter")
        for reason in sorted(self.success):
            lines.append(
                f'vllm:request_success_total{{{label},finished_reason="{reason}"}} '
                f"{_fmt(self.success[reason])}"
            )
        for name, help_text, hist in (
            ("vllm:e2e_request_latency_seconds",
             "Histogram of e2e request latency in seconds.", self.e2e),
            ("vllm:request_queue_time_seconds",
             "Histogram of time spent in WAITING phase for request.", self.queue_time),
            ("vllm:time_to_first_token_seconds",
             "Histogram of time to first token in seconds.", self.ttft),
            ("agentrt:engine_delivery_lag_seconds",
             "Per engine step, model seconds its tokens were delivered after its modelled end.",
             self.delivery_lag),
        ):  # fmt: skip
            lines.extend(_histogram_lines(name, help_text, hist, label))
        return "\n".join(lines) + "\n"


def _histogram_lines(name: str, help_text: str, hist: Histogram, label: str) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    cumulative = 0
    for bound, count in zip([*hist.bounds, math.inf], hist.counts, strict=True):
        cumulative += count
        lines.append(f'{name}_bucket{{{label},le="{_fmt(bound)}"}} {cumulative}')
    lines.append(f"{name}_sum{{{label}}} {_fmt(hist.total)}")
    lines.append(f"{name}_count{{{label}}} {hist.count}")
    return lines


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
