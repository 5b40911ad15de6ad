"""The emulator's ``/metrics``: vLLM's metric set under vLLM's names, and our own.

vLLM's metrics keep vLLM's ``vllm:`` names, types and ``model_name`` label, so dashboards and
the controller's scraper read the emulator exactly like a vLLM server; the emulator's own
metrics are ``agentrt_engine_*`` (docs/engine-emulator.md, "Metrics"). Exposition goes through
``prometheus_client`` with one registry per server (:meth:`ServerMetrics.registry`), whose
collector reads :meth:`EngineCore.stats` at scrape time; the latency histograms are observed
by the engine loop. **All latencies are in model seconds** (equal to wall seconds at
``--time-scale 1``), so metrics describe the modelled GPU, not the speed-up.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import prometheus_client
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from agentrt import __version__
from agentrt_emulator.core.types import EngineStats

__all__ = ["Histogram", "ServerMetrics"]

# Bucket bounds close to vLLM's (seconds).
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
_LAG_BUCKETS = (0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
#: vLLM's time-per-output-token buckets (seconds).
_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
#: Tokens per engine iteration (vLLM's ``vllm:iteration_tokens_total`` buckets).
_ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
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


@dataclass(slots=True)
class ServerMetrics:
    """Server-side observations; rendered together with the engine's stats."""

    model_name: str
    e2e: Histogram = field(default_factory=lambda: Histogram(_LATENCY_BUCKETS))
    queue_time: Histogram = field(default_factory=lambda: Histogram(_LATENCY_BUCKETS))
    ttft: Histogram = field(default_factory=lambda: Histogram(_TTFT_BUCKETS))
    #: Per finished request with more than one output token: (E2E − TTFT) / (tokens − 1).
    tpot: Histogram = field(default_factory=lambda: Histogram(_TPOT_BUCKETS))
    #: Tokens computed per engine iteration (prefill chunks and decode tokens of the batch).
    iteration_tokens: Histogram = field(default_factory=lambda: Histogram(_ITERATION_BUCKETS))
    #: Finished requests by finish reason (``vllm:request_success_total``).
    success: dict[str, int] = field(default_factory=dict)
    #: Requests aborted (client gone) before they finished.
    aborted: int = 0
    #: The engine's batch size (``--max-num-seqs``), published as
    #: ``agentrt_engine_max_num_seqs`` so a controller can bound its admission window by it
    #: (vLLM has no such metric); ``None`` = not published.
    max_num_seqs: int | None = None
    #: Model seconds per wall second (``--time-scale``), published as
    #: ``agentrt_engine_time_scale`` so a controller or a replay in front of it can say when
    #: its own clock disagrees (docs/engine-emulator.md, "Time").
    time_scale: float = 1.0
    #: Per engine step, how late its tokens were delivered: wall time past the step's
    #: modelled end, in model seconds (the driver's CPU time beyond the modelled step).
    delivery_lag: Histogram = field(default_factory=lambda: Histogram(_LAG_BUCKETS))
    #: Model seconds of engine steps run (the modelled GPU's busy time).
    busy_model_s: float = 0.0
    #: vLLM's ``vllm:cache_config_info`` labels (its ``CacheConfig`` fields that the emulator
    #: models: ``block_size``, ``num_gpu_blocks``, ``num_cpu_blocks``, ``kv_offloading_size``,
    #: ``kv_cache_size_tokens``...), so a controller learns the KV capacity and the CPU tier
    #: as from vLLM; empty = not published.
    cache_config: dict[str, str] = field(default_factory=dict)
    #: Seconds to reload one token's KV from the CPU tier (the profile's ``kv_bytes_per_token
    #: / pcie_bytes_per_s``), as ``agentrt_engine_kv_reload_s_per_token``; ``None`` = no tier.
    kv_reload_s_per_token: float | None = None
    #: Times the driver fell more than its lag bound behind its schedule and restarted it.
    schedule_resets: int = 0
    #: Model seconds given up by those restarts (busy time that became idle time).
    dropped_model_s: float = 0.0
    #: Requests answered 500 because of an unhandled error, by route template.
    internal_errors: dict[str, int] = field(default_factory=dict)
    #: Requests refused (404) because they named a model this engine does not serve: what a
    #: router that ignores models sends (docs/routing.md, "Several models").
    unserved_model: int = 0

    def internal_error(self, route: str) -> None:
        """Count one request that failed with an unhandled error on ``route``."""
        self.internal_errors[route] = self.internal_errors.get(route, 0) + 1

    def registry(self, stats: Callable[[], EngineStats]) -> CollectorRegistry:
        """A registry whose collector renders these metrics with the engine's ``stats()``."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_EngineCollector(self, stats))
        return registry

    def render(self, stats: EngineStats) -> str:
        """The ``/metrics`` body for one ``stats`` reading."""
        return prometheus_client.generate_latest(self.registry(lambda: stats)).decode()


class _EngineCollector(Collector):
    """The metric families of one emulated engine, read at collection time."""

    def __init__(self, metrics: ServerMetrics, stats: Callable[[], EngineStats]) -> None:
        self._metrics = metrics
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        m, stats = self._metrics, self._stats()
        model = ["model_name"]
        key = [m.model_name]

        def gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, help_text, labels=model)
            family.add_metric(key, float(value))
            return family

        def counter(name: str, help_text: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, help_text, labels=model)
            family.add_metric(key, float(value))
            return family

        yield gauge("vllm:num_requests_running", "Number of requests in model execution "
                    "batches.", stats.num_running)  # fmt: skip
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                    stats.num_waiting)  # fmt: skip
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                    stats.kv_cache_usage)  # fmt: skip
        yield counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number "
                      "of queried tokens.", stats.prefix_cache_queries)  # fmt: skip
        yield counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of "
                      "cached tokens.", stats.prefix_cache_hits)  # fmt: skip
        yield counter("vllm:num_preemptions", "Cumulative number of preemptions from the "
                      "engine.", stats.num_preemptions)  # fmt: skip
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                      stats.prompt_tokens)  # fmt: skip
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.",
                      stats.generation_tokens)  # fmt: skip
        success = CounterMetricFamily("vllm:request_success", "Count of successfully "
                                      "processed requests.",
                                      labels=["model_name", "finished_reason"])  # fmt: skip
        for reason in sorted(m.success):
            success.add_metric([m.model_name, reason], float(m.success[reason]))
        yield success
        for name, help_text, hist in (
            ("vllm:e2e_request_latency_seconds",
             "Histogram of e2e request latency in seconds.", m.e2e),
            ("vllm:request_queue_time_seconds",
             "Histogram of time spent in WAITING phase for request.", m.queue_time),
            ("vllm:time_to_first_token_seconds",
             "Histogram of time to first token in seconds.", m.ttft),
            ("vllm:time_per_output_token_seconds",
             "Histogram of time per output token in seconds.", m.tpot),
            ("vllm:iteration_tokens_total",
             "Histogram of number of tokens per engine_step.", m.iteration_tokens),
            ("agentrt_engine_delivery_lag_seconds",
             "Per engine step, model seconds its tokens were delivered after its modelled end.",
             m.delivery_lag),
        ):  # fmt: skip
            yield _histogram(name, help_text, hist, model, key)
        yield gauge("agentrt_engine_pinned_blocks", "KV blocks held by retention pins.",
                    stats.pinned_blocks)  # fmt: skip
        yield counter("agentrt_engine_recomputed_prompt_tokens", "Prompt tokens computed "
                      "again after preemption or eviction.",
                      stats.recomputed_prompt_tokens)  # fmt: skip
        yield counter("vllm:external_prefix_cache_queries", "External prefix cache "
                      "queries from KV connector cross-instance cache sharing, in terms of "
                      "number of queried tokens.", stats.cpu_cache_queries)  # fmt: skip
        yield counter("vllm:external_prefix_cache_hits", "External prefix cache hits "
                      "from KV connector cross-instance cache sharing, in terms of number "
                      "of cached tokens.", stats.reloaded_tokens)  # fmt: skip
        yield gauge("agentrt_engine_kv_cpu_blocks", "KV blocks the CPU tier can hold "
                    "(--kv-offloading-size).", stats.num_cpu_blocks)  # fmt: skip
        yield gauge("agentrt_engine_kv_cpu_blocks_used", "KV blocks held by the CPU tier.",
                    stats.cpu_blocks_used)  # fmt: skip
        yield counter("agentrt_engine_kv_offloaded_tokens", "Tokens of KV copied from the "
                      "GPU to the CPU tier (evictions and preemptions).",
                      stats.offloaded_tokens)  # fmt: skip
        yield counter("agentrt_engine_kv_reload_model_seconds", "Model seconds of engine "
                      "steps spent reloading KV from the CPU tier over PCIe.",
                      stats.reload_s)  # fmt: skip
        if m.cache_config:
            info = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine "
                                     "CacheConfig", labels=list(m.cache_config))  # fmt: skip
            info.add_metric(list(m.cache_config.values()), 1.0)
            yield info
        if m.kv_reload_s_per_token is not None:
            yield gauge("agentrt_engine_kv_reload_s_per_token", "Seconds to reload one token's "
                        "KV from the CPU tier over PCIe (the hardware profile's KV bytes per "
                        "token over its PCIe bandwidth).", m.kv_reload_s_per_token)  # fmt: skip
        if m.max_num_seqs is not None:
            yield gauge("agentrt_engine_max_num_seqs", "Most requests the engine runs at once "
                        "(--max-num-seqs).", m.max_num_seqs)  # fmt: skip
        yield gauge("agentrt_engine_time_scale", "Model seconds per wall second "
                    "(--time-scale): every time this engine reports is in model seconds.",
                    m.time_scale)  # fmt: skip
        yield counter("agentrt_engine_aborted_requests", "Requests aborted before they "
                      "finished.", m.aborted)  # fmt: skip
        yield counter("agentrt_engine_busy_model_seconds", "Model seconds of engine steps run.",
                      m.busy_model_s)  # fmt: skip
        yield counter("agentrt_engine_schedule_resets", "Times the engine loop fell too far "
                      "behind its model-time schedule and restarted it.",
                      m.schedule_resets)  # fmt: skip
        yield counter("agentrt_engine_dropped_model_seconds", "Model seconds of schedule given "
                      "up by those restarts.", m.dropped_model_s)  # fmt: skip
        yield counter("agentrt_engine_unserved_model_requests", "Requests refused because "
                      "they named a model this engine does not serve.",
                      m.unserved_model)  # fmt: skip
        errors = CounterMetricFamily("agentrt_engine_internal_errors", "Requests answered 500 "
                                     "because of an unhandled error, by route (see the log).",
                                     labels=["model_name", "route"])  # fmt: skip
        for route in sorted(m.internal_errors):
            errors.add_metric([m.model_name, route], float(m.internal_errors[route]))
        yield errors
        info = GaugeMetricFamily("agentrt_build_info", "The running agentrt component and its "
                                 "version", labels=["component", "version"])  # fmt: skip
        info.add_metric(["emulator", __version__], 1.0)
        yield info


def _histogram(name: str, help_text: str, hist: Histogram, labels: list[str],
               key: list[str]) -> HistogramMetricFamily:  # fmt: skip
    family = HistogramMetricFamily(name, help_text, labels=labels)
    buckets: list[tuple[str, float]] = []
    cumulative = 0
    for bound, count in zip([*hist.bounds, math.inf], hist.counts, strict=True):
        cumulative += count
        buckets.append(("+Inf" if math.isinf(bound) else repr(float(bound)), float(cumulative)))
    family.add_metric(key, buckets, hist.total)
    return family
