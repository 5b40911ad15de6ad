"""Exact candidate pruning for prefix-cost routing: score a few backends, decide as if all were.

The ``prefix`` router (:func:`~agentrt_controller.routing.routers.prefix_router`) scores every
candidate: ``cost_b = prefill(match_b) + queued_s_per_call × load_b`` and the score
``(min_cost + s0) / (cost_b + s0)`` (:class:`~agentrt_controller.routing.scorers.PrefixCostScorer`),
plus ``affinity_weight`` for the program's bound backend; the picker takes the highest total,
ties (within 1e-9) to the smallest id. At hundreds of backends that is the decision's cost
(docs/benchmarks.md, "Decision cost at many backends"). :class:`PrefixPruning` reaches the same
decision from a few backends:

* backends with the same match length ``m`` ("level") pay the same prefill, so among them the
  cost grows with the load alone, and the total falls with the cost (every step — ``+``,
  ``×`` by a weight >= 0, ``/`` by a larger positive number, clamping — is monotone in IEEE
  arithmetic too). Only the level's least-loaded backend (smallest id among equal loads: they
  have the very same total, and the picker prefers the smaller id) can win among the level's
  unbound backends;
* the levels are every distinct match among all backends, found from the prefix index's
  holders (:meth:`~agentrt_controller.routing.prefix_index.PrefixIndex.match_levels`);
* so the scored set is: each level's least-loaded candidate, and the program's bound backend.
  It holds the least cost of all candidates, hence ``min_cost`` — and every scored backend's
  total — is bit for bit what the full pipeline computes;
* the picker's tolerance could still let an unscored backend tie: after scoring, the best
  total an unscored backend of each level could reach (the next load up, or the same load when
  the scored one is the bound backend) is computed the same way; if it comes within twice the
  tolerance of the best, the router falls back to scoring every candidate. The answer is
  therefore always the full pipeline's (``tests/routing/test_decision_equivalence.py`` drives
  both on random states).

A level's least-loaded candidate is found by walking the candidates in (load, id) order — kept
per filter outcome across one admission round and updated per admitted call through
:attr:`~agentrt_controller.scheduling.candidates.CandidateSet.changes` — until one is on that
level, or, for a level with few holders (a program's own history), from its holders directly.
The filters this supports are per-backend predicates (``healthy``, ``kv_pressure``): they are
evaluated once per backend per round, and the pipeline's rule (a filter that would remove
every candidate is skipped, and counted) is applied to the counts.

Not pruned (the full pipeline runs): other stages, a cost weight of 0, calls the exact KV
index could answer for some backend (its per-backend costs are not by level), a program's
placement when the placement term is on (per backend too: one call per program), and rounds that
are not a :class:`CandidateSet` of at least :data:`PRUNE_MIN_CANDIDATES` backends.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from agentrt_controller.routing.api import Scored, backend_load, clamp_score
from agentrt_controller.routing.filters import HealthyFilter, KvPressureFilter
from agentrt_controller.routing.pickers import _TIE, ArgmaxPicker
from agentrt_controller.routing.prefix_index import PrefixIndex
from agentrt_controller.routing.scorers import AffinityScorer, PrefixCostScorer
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.scheduling.candidates import CandidateSet

__all__ = ["PRUNE_MIN_CANDIDATES", "PrefixPruning", "PrunedRoute"]

#: Fewer candidates than this are scored in full: the pruned path's fixed cost (the match
#: levels, a few walks, the tie check) and the prefix index's holder upkeep it starts are
#: about the cost of scoring ~30 backends (measured with benchmarks/decision_cost.py's state).
PRUNE_MIN_CANDIDATES = 32
#: Steps along a load order before a level's candidates are enumerated instead.
_WALK_STEPS = 24
#: A level with at most this many holders is read from its holders, not by walking.
_FEW_HOLDERS = 4

_Key = tuple[int, str]  # (load, backend id): the order that picks a level's candidate


@dataclass(frozen=True, slots=True)
class PrunedRoute:
    """A pruned decision: ``chosen``, the filters skipped for the call (in order) and the
    cost lookups to count as estimates (every remaining candidate, as the full path does)."""

    chosen: str
    skipped: tuple[str, ...]
    estimate_lookups: int


@dataclass(slots=True)
class _Round:
    """Derived state of one :class:`CandidateSet`."""

    candidates: CandidateSet
    #: How many of ``candidates.changes`` are applied.
    applied: int = 0
    #: backend id -> (filter bits, load); bit i set = filter i keeps the backend.
    facts: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: filter bits -> the candidates with those bits, sorted by (load, id).
    order: dict[int, list[_Key]] = field(default_factory=dict)
    #: filter bits -> the same candidates' ids.
    members: dict[int, set[str]] = field(default_factory=dict)


class PrefixPruning:
    """The pruned path of one pipeline router (module docstring). Build it with
    :meth:`for_stages`, which says ``None`` when the stages are not all supported."""

    def __init__(
        self,
        filters: Sequence[tuple[str, Callable[[BackendView], bool]]],
        scorers: Sequence[tuple[PrefixCostScorer | AffinityScorer, float]],
        cost: PrefixCostScorer,
        picker: ArgmaxPicker,
    ) -> None:
        self.filters = list(filters)
        self.scorers = [(s, w) for s, w in scorers if w != 0]  # the pipeline skips weight 0
        self.cost = cost
        self.index: PrefixIndex = cost.index
        self.picker = picker
        self._round: _Round | None = None
        #: Decisions taken pruned, and those that fell back to the full pipeline (a tie the
        #: pruned set could not settle, or the exact KV index could answer).
        self.pruned_total = 0
        self.fallback_total = 0

    @classmethod
    def for_stages(
        cls,
        filters: Sequence[tuple[str, object]],
        scorers: Sequence[tuple[object, float]],
        picker: object,
    ) -> PrefixPruning | None:
        """The pruned path for these stages, or ``None`` when one of them is not supported:
        filters must be ``healthy`` / ``kv_pressure``, scorers one prefix cost scorer of
        positive weight and at most one affinity scorer, the picker the argmax."""
        if type(picker) is not ArgmaxPicker:
            return None
        predicates: list[tuple[str, Callable[[BackendView], bool]]] = []
        for name, stage in filters:
            if type(stage) is HealthyFilter or type(stage) is KvPressureFilter:
                predicates.append((name, stage.keeps))
            else:
                return None
        supported: list[tuple[PrefixCostScorer | AffinityScorer, float]] = []
        costs, affinities = [], 0
        for scorer, weight in scorers:
            if type(scorer) is PrefixCostScorer:
                costs.append((scorer, weight))
            elif type(scorer) is AffinityScorer:
                affinities += 1
            else:
                return None
            assert isinstance(scorer, PrefixCostScorer | AffinityScorer)
            supported.append((scorer, weight))
        if len(costs) != 1 or not costs[0][1] > 0 or affinities > 1:
            return None
        if costs[0][0].kv_full_tokens > 0:  # a per-backend term the bounds do not cover
            return None
        return cls(predicates, supported, costs[0][0], picker)

    # --- the decision ------------------------------------------------------------------------

    def route(self, call: CallEntry, candidates: CandidateSet, now_s: float) -> PrunedRoute | None:
        """The full pipeline's choice among ``candidates``, or ``None`` when this call must be
        scored in full (exact KV index, an unsettled tie). Reads and purges the prefix index
        (:meth:`PrefixIndex.purge_stale`), reads affinity; changes nothing else."""
        state = self._state(candidates)
        # The pipeline's filters on the counts: each filter keeps the backends whose bit is
        # set, unless none is left (skipped: then every remaining backend has the bit clear).
        # Either way the backends left share one bit pattern.
        classes = [bits for bits, keys in state.order.items() if keys]
        skipped = []
        for i, (name, _) in enumerate(self.filters):
            narrowed = [bits for bits in classes if bits >> i & 1]
            if narrowed:
                classes = narrowed
            else:
                skipped.append(name)
        (bits,) = classes
        order, members = state.order[bits], state.members[bits]
        remaining = len(order)
        if remaining == 1:
            return PrunedRoute(order[0][1], tuple(skipped), 0)
        exact = self.cost.exact
        if exact is not None and call.facts.token_block_hashes and exact.any_synced():
            self.fallback_total += 1
            return None
        if self.cost.is_placement(call, now_s):  # a per-backend term, not by level
            self.fallback_total += 1
            return None
        index, hashes = self.index, call.facts.block_hashes
        bound = None
        for scorer, _ in self.scorers:
            if isinstance(scorer, AffinityScorer):  # the same read the scorer makes
                bound = scorer.affinity.backend_of_call(call, now_s)
        if hashes:
            index.purge_stale(now_s)
            levels = index.match_levels(hashes)
        else:
            levels = [0]
        picked: dict[str, int] = {}  # scored backend -> its level's match
        for level in levels:
            best = self._least_loaded(state, order, members, hashes, level)
            if best is not None:
                picked[best] = level
        views = [view for b in picked if (view := candidates.get(b)) is not None]
        bound_view = candidates.get(bound) if bound is not None else None
        if bound_view is not None and bound not in picked and bound in members:
            views.append(bound_view)
        decision = self._decide(call, views, picked, bound, hashes, now_s)
        if decision is None:
            self.fallback_total += 1
            return None
        self.pruned_total += 1
        return PrunedRoute(decision, tuple(skipped), remaining)

    def _decide(
        self,
        call: CallEntry,
        views: list[BackendView],
        picked: dict[str, int],
        bound: str | None,
        hashes: tuple[int, ...],
        now_s: float,
    ) -> str | None:
        """Score ``views`` exactly as the pipeline would among all candidates, check that no
        unscored backend can tie, pick."""
        cost = self.cost
        q = cost.queued_s_per_call
        shared = cost.shared_of(call) if hashes else (0, 0)
        prefill_of: dict[int, float] = {}

        def prefill(matched: int) -> float:
            value = prefill_of.get(matched)
            if value is None:
                if hashes:
                    value = cost.prefill_s(call, matched, shared)
                else:  # PrefixCostScorer.costs without a chain
                    value = cost.prefill_s_per_token * max(0, call.facts.prompt_tokens)
                prefill_of[matched] = value
            return value

        matches = self.index.match_all([v.backend_id for v in views], hashes, now_s)
        costs = []
        for v, matched in zip(views, matches, strict=True):
            level = picked.get(v.backend_id)
            if level is not None and level != matched:  # the holders disagree: never expected
                return None
            costs.append(prefill(matched) + q * backend_load(v))
        soft = cost.soft_s
        least = min(costs) + soft
        scorers = self.scorers

        def total(cost_s: float, is_bound: bool) -> float:
            # PipelineRouter._score over PrefixCostScorer.score and AffinityScorer.score,
            # operation for operation (the same floats).
            value = 0.0
            for scorer, weight in scorers:
                v = least / (cost_s + soft) if scorer is cost else 1.0 if is_bound else 0.0
                value = value + weight * (v if 0 <= v <= 1 else clamp_score(v))
            return value

        scored = [
            Scored(v, total(c, v.backend_id == bound)) for v, c in zip(views, costs, strict=True)
        ]
        top = max(s.total for s in scored)
        for v in views:
            level = picked.get(v.backend_id)
            if level is None:
                continue  # the bound backend, scored for its affinity: no level to stand for
            # An unscored backend of this level has this load or more; the same load only
            # matters when the scored one owes its total to the affinity bonus.
            step = 0 if v.backend_id == bound else 1
            if total(prefill(level) + q * (backend_load(v) + step), False) >= top - 2 * _TIE:
                return None
        return self.picker.pick(call, scored, now_s)

    def _least_loaded(
        self,
        state: _Round,
        order: list[_Key],
        members: set[str],
        hashes: tuple[int, ...],
        level: int,
    ) -> str | None:
        """The remaining candidate with the least (load, id) among those matching ``level``
        elements of ``hashes`` (``None``: no such candidate)."""
        index = self.index
        elements = index.elements
        lower = hashes[level - 1] if level > 0 else None  # held by the level's backends
        upper = hashes[level] if level < len(hashes) else None  # not held by them

        def on_level(backend_id: str) -> bool:
            held = elements(backend_id)
            return (lower is None or lower in held) and (upper is None or upper not in held)

        if lower is not None and index.holder_count(lower) <= _FEW_HOLDERS:
            return _least_of(state, members, [b for b in index.holders(lower) if on_level(b)])
        if lower is None and upper is not None:
            head = index.holders(upper)
            if len(head) >= len(members) and members.issubset(head):
                return None  # every candidate holds the chain's head (a system prompt)
        for key in order[:_WALK_STEPS]:
            if on_level(key[1]):
                return key[1]
        if len(order) <= _WALK_STEPS:
            return None
        # Not settled by the walk (a level of few candidates among many): enumerate it.
        if lower is None:
            pool: Iterable[str] = members.difference(index.holders(hashes[0]))
        else:
            pool = [b for b in index.holders(lower) if on_level(b)]
        return _least_of(state, members, pool)

    # --- the round's derived state ------------------------------------------------------------

    def _state(self, candidates: CandidateSet) -> _Round:
        state = self._round
        if state is None or state.candidates is not candidates:
            state = self._round = _Round(candidates)
            for view in candidates:
                self._add(state, view, sort=False)
            for keys in state.order.values():
                keys.sort()
            state.applied = len(candidates.changes)
            return state
        changes = candidates.changes
        for backend_id in changes[state.applied :]:
            self._discard(state, backend_id)
            changed = candidates.get(backend_id)
            if changed is not None:
                self._add(state, changed)
        state.applied = len(changes)
        return state

    def _add(self, state: _Round, view: BackendView, *, sort: bool = True) -> None:
        """Note ``view``; ``sort=False``: append to its order (the caller sorts)."""
        bits = 0
        for i, (_, keeps) in enumerate(self.filters):
            if keeps(view):
                bits |= 1 << i
        load = backend_load(view)
        state.facts[view.backend_id] = (bits, load)
        keys = state.order.get(bits)
        if keys is None:
            keys = state.order[bits] = []
        if sort:
            bisect.insort(keys, (load, view.backend_id))
        else:
            keys.append((load, view.backend_id))
        state.members.setdefault(bits, set()).add(view.backend_id)

    @staticmethod
    def _discard(state: _Round, backend_id: str) -> None:
        facts = state.facts.pop(backend_id, None)
        if facts is None:
            return
        bits, load = facts
        keys = state.order[bits]
        del keys[bisect.bisect_left(keys, (load, backend_id))]
        state.members[bits].discard(backend_id)


def _least_of(state: _Round, members: set[str], backends: Iterable[str]) -> str | None:
    """The least (load, id) of ``backends`` that are remaining candidates (in ``members``)."""
    keys = [(state.facts[b][1], b) for b in backends if b in members]
    return min(keys)[1] if keys else None
