"""The named routers, each a :class:`PipelineRouter` (round robin aside).

* ``least_loaded`` — healthy → fewest outstanding calls (in-flight + scraped
  waiting); ties by backend id.
* ``autellix`` — Autellix (arXiv 2502.13965) Algorithm 2: a call of at most
  ``threshold_tokens`` (2,048) prompt tokens goes to the least-loaded backend; a longer one to
  the backend its program's first call went to (if that backend is down or full, to the least
  loaded, and the program stays bound to its first backend).
* ``prefix`` (our default) — healthy → KV pressure, then the cheapest backend by
  ``prefill_s_per_token × uncached prompt tokens + queued_s_per_call × outstanding calls``
  (approximate prefix index, :class:`PrefixCostScorer`), plus a program-affinity preference
  with a TTL (weight ``affinity_weight``). See docs/routing.md.

Every one of them fails over from an unhealthy backend (``healthy``). Retention's engine
binding (a retained call goes to the backend holding its KV) is applied by the
:class:`~agentrt_controller.scheduling.dispatcher.Dispatcher` before any router runs, so it holds
for
every router, round robin included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentrt.errors import ConfigError
from agentrt_controller.routing.affinity import ProgramAffinity
from agentrt_controller.routing.filters import (
    AutellixLongCallFilter,
    HealthyFilter,
    KvPressureFilter,
)
from agentrt_controller.routing.kv_index import ExactPrefixIndex
from agentrt_controller.routing.pickers import ArgmaxPicker
from agentrt_controller.routing.pipeline import PipelineRouter, WeightedScorer
from agentrt_controller.routing.prefix_index import DEFAULT_CAPACITY_BLOCKS, PrefixIndex
from agentrt_controller.routing.scorers import AffinityScorer, LoadScorer, PrefixCostScorer

__all__ = [
    "AutellixParams",
    "PrefixParams",
    "autellix_router",
    "least_loaded_router",
    "prefix_router",
]


def least_loaded_router() -> PipelineRouter:
    """Fewest outstanding calls (in-flight + scraped waiting)."""
    return PipelineRouter(
        "least_loaded",
        filters=[("healthy", HealthyFilter())],
        scorers=[WeightedScorer("load", LoadScorer())],
        picker=ArgmaxPicker(),
    )


@dataclass(frozen=True, slots=True)
class AutellixParams:
    """Parameters of the ``autellix`` router."""

    #: Calls with more prompt tokens than this stay on their program's first backend.
    threshold_tokens: int = 2048
    #: A program's binding lasts this long without calls (seconds; inf = until program end).
    affinity_ttl_s: float = math.inf


def autellix_router(params: AutellixParams | None = None) -> PipelineRouter:
    """Autellix Algorithm 2 (module docstring)."""
    params = params or AutellixParams()
    affinity = ProgramAffinity(ttl_s=params.affinity_ttl_s, sticky_first=True)
    return PipelineRouter(
        "autellix",
        filters=[
            ("healthy", HealthyFilter()),
            ("long_call", AutellixLongCallFilter(affinity, params.threshold_tokens)),
        ],
        scorers=[WeightedScorer("load", LoadScorer())],
        picker=ArgmaxPicker(),
        observers=[affinity],
    )


@dataclass(frozen=True, slots=True)
class PrefixParams:
    """Parameters of the ``prefix`` router (docs/routing.md)."""

    #: Seconds per uncached prompt token (the cost model's ``prefill_s_per_token``).
    prefill_s_per_token: float = 1.0e-4
    #: What one outstanding call on a backend costs a new call there, as prefill tokens
    #: (``queued_s_per_call = queued_tokens_per_call × prefill_s_per_token``).
    queued_tokens_per_call: float = 128.0
    #: Index entries not used for this long count as evicted (seconds).
    block_ttl_s: float = 600.0
    #: Chain elements remembered per backend, least recently used forgotten first (e.g. its
    #: KV blocks); ``None`` = no cap (only ``block_ttl_s`` bounds the index).
    capacity_blocks: int | None = DEFAULT_CAPACITY_BLOCKS
    #: A prefix used by at least this many programs counts as shared (a system prompt).
    shared_programs: int = 3
    #: Share of a missing shared prefix's prefill that counts (it is paid once), in [0, 1].
    shared_weight: float = 0.1
    #: Weight of the program-affinity preference (the cost score's weight is 1).
    affinity_weight: float = 0.2
    #: A binding lasts this long without calls (seconds).
    affinity_ttl_s: float = 600.0
    #: Backends at or above this scraped KV usage (fraction) are avoided while others exist.
    max_kv_usage: float = 0.95
    #: What a full engine's KV costs a call placed there, as prefill tokens (the contexts it
    #: would evict), rising linearly from ``kv_free_usage`` to full; 0 = off (docs/routing.md,
    #: "Keeping a program's context where it is").
    kv_full_tokens: float = 0.0
    #: KV usage (fraction) below which an engine's fill costs nothing.
    kv_free_usage: float = 0.5
    #: What a full engine's KV costs a program's placement there (a call whose program is
    #: bound to no backend), per prompt token of that call, as prefill tokens; linear in the
    #: KV usage from empty; 0 = off (docs/routing.md, "Placing a program by its engine's KV").
    placement_kv_weight: float = 4.0

    def __post_init__(self) -> None:
        for name in (
            "prefill_s_per_token",
            "queued_tokens_per_call",
            "affinity_weight",
            "shared_weight",
            "kv_full_tokens",
            "kv_free_usage",
            "placement_kv_weight",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"prefix router {name} must be a number, got {value!r}")
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"prefix router {name} must be finite and >= 0, got {value}")


def prefix_router(params: PrefixParams | None = None) -> PipelineRouter:
    """Prefix-aware cost routing with program affinity (module docstring)."""
    params = params or PrefixParams()
    index = PrefixIndex(
        ttl_s=params.block_ttl_s,
        capacity_blocks=params.capacity_blocks,
        shared_programs=params.shared_programs,
    )
    affinity = ProgramAffinity(ttl_s=params.affinity_ttl_s)
    cost = PrefixCostScorer(
        index,
        prefill_s_per_token=params.prefill_s_per_token,
        queued_s_per_call=params.queued_tokens_per_call * params.prefill_s_per_token,
        shared_weight=params.shared_weight,
        # Empty until a driver feeds it KV events: every lookup is the estimate's until then.
        exact=ExactPrefixIndex(),
        kv_full_tokens=params.kv_full_tokens,
        kv_free_usage=params.kv_free_usage,
        placement_kv_weight=params.placement_kv_weight,
        affinity=affinity,
    )
    return PipelineRouter(
        "prefix",
        filters=[
            ("healthy", HealthyFilter()),
            ("kv_pressure", KvPressureFilter(params.max_kv_usage)),
        ],
        scorers=[
            WeightedScorer("prefix_cost", cost),
            WeightedScorer("affinity", AffinityScorer(affinity), params.affinity_weight),
        ],
        picker=ArgmaxPicker(),
        observers=[index, affinity],
    )
