"""Scorers: each gives every candidate a score; the pipeline clamps to [0, 1] and weights.

Scores are *relative*: the best candidate of a scorer gets 1, the others a ratio below it, so
a weight says how much that scorer's preference may outweigh another's (e.g. an affinity
weight of 0.2 keeps a program where it is unless elsewhere is more than about 25 % cheaper).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agentrt.errors import ConfigError
from agentrt_controller.routing.affinity import ProgramAffinity
from agentrt_controller.routing.api import backend_load
from agentrt_controller.routing.kv_index import ExactPrefixIndex
from agentrt_controller.routing.prefix_index import PrefixIndex
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallEntry

__all__ = [
    "AffinityScorer",
    "LoadScorer",
    "PrefixCostScorer",
    "cached_prompt_tokens",
    "exact_scorer_of",
]


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)


class LoadScorer:
    """Fewer outstanding calls is better: ``(min_load + 1) / (load + 1)`` with ``load`` =
    in-flight + scraped waiting (:func:`~agentrt_controller.routing.api.backend_load`)."""

    def score(self, call: CallEntry, backends: Sequence[BackendView], now_s: float) -> list[float]:
        loads = [backend_load(b) for b in backends]
        best = min(loads)
        return [(best + 1) / (load + 1) for load in loads]


class AffinityScorer:
    """1 for the backend the call's program is bound to (within the binding's TTL), else 0."""

    def __init__(self, affinity: ProgramAffinity) -> None:
        self.affinity = affinity

    def score(self, call: CallEntry, backends: Sequence[BackendView], now_s: float) -> list[float]:
        bound = self.affinity.backend_of_call(call, now_s)
        return [1.0 if b.backend_id == bound else 0.0 for b in backends]


def cached_prompt_tokens(call: CallEntry, matched: int) -> int:
    """Prompt tokens a backend holding ``matched`` leading chain elements would serve from
    cache: the matched share of the chain times the prompt length (exact for token blocks up
    to the trailing partial block; an estimate for message-boundary chains)."""
    count = len(call.facts.block_hashes)
    if count == 0 or matched <= 0:
        return 0
    return min(call.facts.prompt_tokens, round(matched * call.facts.prompt_tokens / count))


class PrefixCostScorer:
    """Cheapest backend first, by the estimated cost of running the call there (seconds)::

        cost_b = prefill_s_per_token × (uncached_b − (1 − shared_weight) × shared_missing_b)
               + queued_s_per_call   × (in_flight_b + waiting_b)       (work queued ahead)

    ``uncached_b`` = prompt tokens minus :func:`cached_prompt_tokens` for the call's match in
    the :class:`PrefixIndex`; ``shared_missing_b`` = the tokens of the call's *shared* prefix
    (:meth:`PrefixIndex.shared_prefix`: a system prompt many programs use) that ``b`` lacks —
    computing those there is paid once and serves every later program, so they count only
    ``shared_weight`` of their prefill. Score: ``(min_cost + s0) / (cost_b + s0)`` with
    ``s0 = prefill_s_per_token × 16`` (one block) so that near-zero costs do not blow up
    ratios. ``queued_s_per_call`` says what one more outstanding call on an engine costs a
    new call there, in prefill-seconds (docs/routing.md discusses its choice).

    A program's *placement* — a call whose program has no backend bound in ``affinity``
    (its first call, or its first after the binding expired) — also pays
    :meth:`placement_s`: ``prefill_s_per_token × placement_kv_weight × prompt_tokens ×
    usage_b`` — its context and the KV already on ``b`` slow each other's decode steps, more
    the larger both are (docs/routing.md, "Placing a program by its engine's KV"). Follow-up
    calls never pay it: their context decides.

    ``exact``: the index fed by vLLM's KV events (:meth:`exact_costs`). For a backend it is
    synced for, and a call with a token chain (``CallFacts.token_block_hashes``), the cached tokens
    are exact — matched blocks × block size — instead of the estimate's share of the prompt;
    elsewhere the estimate stands (:attr:`lookups` counts both).
    """

    def __init__(
        self,
        index: PrefixIndex,
        *,
        prefill_s_per_token: float,
        queued_s_per_call: float,
        shared_weight: float = 0.1,
        exact: ExactPrefixIndex | None = None,
        kv_full_tokens: float = 0.0,
        kv_free_usage: float = 0.5,
        placement_kv_weight: float = 0.0,
        affinity: ProgramAffinity | None = None,
    ) -> None:
        self.index = index
        self.exact = exact
        #: Per-backend cache lookups answered by the ``exact`` index and by the estimate.
        self.lookups = {"exact": 0, "estimate": 0}
        self.prefill_s_per_token = _positive("prefill_s_per_token", prefill_s_per_token)
        self.queued_s_per_call = _positive("queued_s_per_call", queued_s_per_call)
        self.shared_weight = _positive("shared_weight", shared_weight)
        if self.shared_weight > 1:
            raise ConfigError(f"shared_weight must be in [0, 1], got {shared_weight!r}")
        #: What a full engine costs a call placed there, as prefill tokens: the contexts its
        #: KV would evict (docs/routing.md, "Keeping a program's context where it is"); 0 = off.
        self.kv_full_tokens = _positive("kv_full_tokens", kv_full_tokens)
        #: KV usage (fraction) below which an engine counts as not filling up at all.
        self.kv_free_usage = _positive("kv_free_usage", kv_free_usage)
        if self.kv_free_usage >= 1:
            raise ConfigError(f"kv_free_usage must be in [0, 1), got {kv_free_usage!r}")
        #: What a full engine's KV costs a program's placement there, per prompt token of
        #: the placing call, as prefill tokens (linear in the KV usage from empty); 0 = off.
        #: Needs ``affinity`` to tell placements from follow-up calls.
        self.placement_kv_weight = _positive("placement_kv_weight", placement_kv_weight)
        if self.placement_kv_weight and affinity is None:
            raise ConfigError("placement_kv_weight needs the router's program affinity")
        #: The bindings that tell a program's placement from its follow-up calls.
        self.affinity = affinity

    def kv_s(self, view: BackendView) -> float:
        """The KV-fill part of ``cost_b`` (seconds): ``prefill_s_per_token × kv_full_tokens ×
        max(0, usage − kv_free_usage) / (1 − kv_free_usage)``; 0 for unknown usage."""
        usage = view.kv_cache_usage
        if not self.kv_full_tokens or usage is None or usage <= self.kv_free_usage:
            return 0.0
        fill = min(1.0, (usage - self.kv_free_usage) / (1.0 - self.kv_free_usage))
        return self.prefill_s_per_token * self.kv_full_tokens * fill

    def is_placement(self, call: CallEntry, now_s: float) -> bool:
        """Whether the call places its program (the placement term is on and no backend is
        bound to the program in :attr:`affinity`)."""
        affinity = self.affinity
        return (
            bool(self.placement_kv_weight)
            and affinity is not None
            and affinity.backend_of_call(call, now_s) is None
        )

    def placement_s(self, view: BackendView, prompt_tokens: int) -> float:
        """The placement part of ``cost_b`` (seconds) for a placing call of ``prompt_tokens``:
        ``prefill_s_per_token × placement_kv_weight × prompt_tokens × usage``; 0 for unknown
        usage. Linear from an empty cache because a decode step's time grows with the KV it
        reads (docs/engine-model.md), and in the prompt because the program's context starts
        there and only grows."""
        usage = view.kv_cache_usage
        if usage is None or usage <= 0:
            return 0.0
        tokens = self.placement_kv_weight * max(0, prompt_tokens)
        return self.prefill_s_per_token * tokens * min(1.0, usage)

    def _extra_s(
        self, call: CallEntry, backends: Sequence[BackendView], now_s: float
    ) -> list[float]:
        """The per-backend terms beyond prefill and load (seconds): :meth:`kv_s`, and
        :meth:`placement_s` for a placement."""
        placement = self.is_placement(call, now_s)
        tokens = call.facts.prompt_tokens
        return [
            self.kv_s(b) + (self.placement_s(b, tokens) if placement else 0.0) for b in backends
        ]

    def costs(self, call: CallEntry, backends: Sequence[BackendView], now_s: float) -> list[float]:
        """``cost_b`` per backend (seconds), aligned with ``backends``."""
        hashes = call.facts.block_hashes
        a, q = self.prefill_s_per_token, self.queued_s_per_call
        extra = self._extra_s(call, backends, now_s)
        if not hashes:  # nothing to match: the prompt is uncached everywhere
            return [
                a * max(0, call.facts.prompt_tokens) + q * backend_load(b) + extra_s
                for b, extra_s in zip(backends, extra, strict=True)
            ]
        shared = self.shared_of(call)
        matches = self.index.match_all([b.backend_id for b in backends], hashes, now_s)
        # The prefill part depends on the backend only through its match, and most backends
        # share a few match values (none, the shared head): computed once per value.
        prefill_of: dict[int, float] = {}
        out = []
        for b, matched, extra_s in zip(backends, matches, extra, strict=True):
            prefill = prefill_of.get(matched)
            if prefill is None:
                prefill = prefill_of[matched] = self.prefill_s(call, matched, shared)
            out.append(prefill + q * (b.in_flight + (b.num_waiting or 0)) + extra_s)
        return out

    def shared_of(self, call: CallEntry) -> tuple[int, int]:
        """(leading chain elements that count as shared, their prompt tokens) for a call with
        a chain (:meth:`PrefixIndex.shared_prefix`)."""
        shared = self.index.shared_prefix(call.facts.block_hashes)
        return shared, cached_prompt_tokens(call, shared)

    def prefill_s(self, call: CallEntry, matched: int, shared: tuple[int, int]) -> float:
        """The prefill part of ``cost_b`` (seconds) on a backend matching ``matched`` leading
        elements of the call's chain (not empty); ``shared``: :meth:`shared_of`. Never
        grows with ``matched``. :meth:`costs` adds ``queued_s_per_call × load``."""
        shared_elements, shared_cached = shared
        cached = cached_prompt_tokens(call, matched)
        missing_shared = shared_cached - cached if shared_elements > matched else 0
        uncached = (
            max(0, call.facts.prompt_tokens - cached) - (1.0 - self.shared_weight) * missing_shared
        )
        return self.prefill_s_per_token * max(0.0, uncached)

    def exact_cached(self, call: CallEntry, backend_id: str) -> int | None:
        """Prompt tokens cached on ``backend_id`` by its KV events; ``None`` = the exact
        index cannot say (no index, no token chain, backend unsynced)."""
        if self.exact is None or not call.facts.token_block_hashes:
            return None
        size = call.facts.token_block_size
        blocks = self.exact.match(backend_id, call.facts.token_block_hashes, size)
        if blocks is None:
            return None
        return min(
            max(call.facts.prompt_tokens, len(call.facts.token_block_hashes) * size), blocks * size
        )

    def exact_costs(
        self,
        call: CallEntry,
        backends: Sequence[BackendView],
        costs: Sequence[float],
        *,
        placement: bool = False,
    ) -> list[float]:
        """``costs`` (:meth:`costs`, from the estimate) with the prefill part of every backend
        the exact index answers for recomputed from its cached tokens (seconds).
        ``placement``: the call places its program (:meth:`is_placement`)."""
        if self.exact is None or not call.facts.token_block_hashes:
            # No backend can answer (exact_cached says None for each): skip the per-backend
            # loop, which costs every routing decision O(backends) for nothing.
            self.lookups["estimate"] += len(backends)
            return list(costs)
        out = list(costs)
        hashes = call.facts.block_hashes
        shared: int | None = None
        a, relief = self.prefill_s_per_token, 1.0 - self.shared_weight
        for i, b in enumerate(backends):
            cached = self.exact_cached(call, b.backend_id)
            if cached is None:
                self.lookups["estimate"] += 1
                continue
            self.lookups["exact"] += 1
            if shared is None:
                head = self.index.shared_prefix(hashes) if hashes else 0
                shared = cached_prompt_tokens(call, head)
            uncached = max(0, call.facts.prompt_tokens - cached) - relief * max(0, shared - cached)
            load_s = self.queued_s_per_call * backend_load(b)
            extra_s = self.kv_s(b)
            if placement:
                extra_s += self.placement_s(b, call.facts.prompt_tokens)
            out[i] = a * max(0.0, uncached) + load_s + extra_s
        return out

    def score(self, call: CallEntry, backends: Sequence[BackendView], now_s: float) -> list[float]:
        costs = self.exact_costs(
            call,
            backends,
            self.costs(call, backends, now_s),
            placement=self.is_placement(call, now_s),
        )
        soft = self.soft_s
        best = min(costs) + soft
        return [best / (cost + soft) for cost in costs]

    @property
    def soft_s(self) -> float:
        """``s0`` of the score (seconds): one block's prefill, so near-zero costs do not blow
        up ratios."""
        return self.prefill_s_per_token * 16 or 1e-9


def exact_scorer_of(router: object) -> PrefixCostScorer | None:
    """A router's ``prefix_cost`` scorer that reads an exact prefix index (``None``: none),
    for the driver that feeds :attr:`PrefixCostScorer.exact` vLLM's KV events."""
    for weighted in getattr(router, "scorers", ()):
        scorer = getattr(weighted, "scorer", None)
        if isinstance(scorer, PrefixCostScorer) and scorer.exact is not None:
            return scorer
    return None
