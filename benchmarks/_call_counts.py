"""Python function calls per request, by layer, from two cProfile runs of the controller.

CPU per call on a shared machine moves by ±10 % between runs; the number of Python calls a
request makes does not. ``benchmarks/controller_overhead.py --count-calls`` runs the controller
under ``python -m cProfile`` twice (``small`` and ``large`` calls from the same load) and
divides the difference of each layer's calls by the difference of requests, so that start-up
and shut-down cancel out. A function belongs to the layer its source file names
(:data:`LAYERS`, first match); C builtins and methods (cProfile's ``~``) are counted apart,
since one cannot tell which layer called them without the call graph.
"""

from __future__ import annotations

import collections
import pstats
from collections.abc import Mapping
from pathlib import Path

__all__ = ["BUILTINS", "LAYERS", "calls_by_layer", "layer_of", "markdown", "per_request"]

#: (layer, substrings of a source path), tried in order.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "server: uvicorn's protocol, ASGI middlewares, hardening",
        (
            "uvicorn/",
            "agentrt_serving/",
            "service/http/server.py",
            "service/http/hardening.py",
            "service/http/direct.py",
        ),
    ),
    ("access log and `logging`", ("service/http/access_log.py", "logging/")),
    ("endpoint: auth, parse, proxy, SSE", ("service/http/",)),
    # Not bare "backends/": anyio's own "anyio/_backends/" would match it.
    (
        "backend leg: the lean transport, `backends/`, httpx",
        ("agentrt_controller/backends/", "agentrt/fasthttp.py", "httpx/", "httpcore/"),
    ),
    (
        "metrics (`prometheus_client` and our wrappers)",
        ("telemetry/prometheus.py", "telemetry/metrics.py", "prometheus_client/"),
    ),
    ("tracing (OpenTelemetry)", ("telemetry/tracing.py", "opentelemetry/")),
    ("core: accept / forward / settle, queues, pool, quotas", ("service/core/",)),
    (
        "policies: scheduling, routing, retention, process table",
        (
            "scheduling/",
            "routing/",
            "retention/",
            "process_table.py",
            "agentrt_controller/keys.py",
            "agentrt_controller/policies.py",
            "agentrt_controller/cost_model",
        ),
    ),
    ("anyio, sniffio", ("anyio/", "sniffio/")),
    ("asyncio (tasks, futures, events)", ("asyncio/",)),
    (
        "dataclasses, contextlib, weakref, enum",
        ("dataclasses.py", "contextlib.py", "<string>", "weakref.py", "_weakrefset.py", "enum.py"),
    ),
)
#: The row of C builtins and methods.
BUILTINS = "C builtins and methods (all layers)"
_OTHER = "other"


def layer_of(filename: str) -> str:
    """The layer of a function defined in ``filename`` (cProfile's ``~`` = :data:`BUILTINS`)."""
    if filename == "~":
        return BUILTINS
    for layer, parts in LAYERS:
        if any(part in filename for part in parts):
            return layer
    return _OTHER


def calls_by_layer(stats_path: str) -> collections.Counter[str]:
    """All calls (primitive or not) per layer in a cProfile output file. Raises
    :class:`FileNotFoundError` naming the file when the profiled process wrote none."""
    if not Path(stats_path).exists():
        raise FileNotFoundError(f"{stats_path}: no profile (did the profiled process exit?)")
    counts: collections.Counter[str] = collections.Counter()
    stats: Mapping[tuple[str, int, str], tuple[int, int, float, float, object]]
    stats = pstats.Stats(stats_path).stats  # type: ignore[attr-defined]
    for (filename, _line, _name), (_primitive, calls, _tt, _ct, _callers) in stats.items():
        counts[layer_of(filename)] += calls
    return counts


def per_request(
    small: Mapping[str, int], large: Mapping[str, int], small_requests: int, large_requests: int
) -> dict[str, float]:
    """Calls per request of each layer: the difference of two runs over the difference of
    their requests. Raises :class:`ValueError` unless ``large_requests > small_requests``."""
    if large_requests <= small_requests:
        raise ValueError("the large run needs more requests than the small one")
    extra = large_requests - small_requests
    return {
        layer: (large.get(layer, 0) - small.get(layer, 0)) / extra for layer in {*small, *large}
    }


def markdown(columns: Mapping[str, Mapping[str, float]]) -> str:
    """A table, one row per layer (in :data:`LAYERS` order, builtins first, ``other`` last)
    and one column per entry of ``columns`` (e.g. ``{"before": ..., "after": ...}``)."""
    order = [BUILTINS, *(layer for layer, _ in LAYERS), _OTHER]
    names = list(columns)
    lines = [
        "| layer | " + " | ".join(f"Python calls per request, {name}" for name in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for layer in order:
        if any(layer in column for column in columns.values()):
            cells = " | ".join(f"{columns[name].get(layer, 0.0):,.0f}" for name in names)
            lines.append(f"| {layer} | {cells} |")
    totals = " | ".join(f"**{sum(columns[name].values()):,.0f}**" for name in names)
    lines.append(f"| **total** | {totals} |")
    return "\n".join(lines)
