"""The pipeline router: filters → weighted scorers → picker, as one :class:`Router`.

Before any stage, the model constraint keeps the backends that serve the call's model
(:meth:`PipelineRouter.eligible`; docs/routing.md, "Several models"): not a filter that may be
skipped — a wrong model is an error, not a worse choice.

The pipeline enforces the stage contracts itself (docs/architecture.md, design rule 2, as llm-d's
inference scheduler does): a filter may not empty the candidate set (its result is then ignored
for that call, and counted), a scorer must return one score per candidate, scores are clamped to
``[0, 1]`` (NaN → 0) and multiplied by the scorer's weight, and the picker's answer must be one
of the remaining candidates.

**Pruning.** For the stages of the ``prefix`` router (healthy and KV-pressure filters, prefix
cost and affinity scorers, argmax) and a round's
:class:`~agentrt_controller.scheduling.candidates.CandidateSet` of many backends, the router
scores only the backends that can win and reaches the decision scoring all of them would
(:mod:`~agentrt_controller.routing.pruning`); ``prune=False`` turns that off.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.api import (
    Filter,
    Picker,
    RouteObserver,
    Scored,
    Scorer,
    clamp_score,
)
from agentrt_controller.routing.filters import ModelFilter
from agentrt_controller.routing.locality import LocalityStats
from agentrt_controller.routing.prefix_index import PrefixIndex
from agentrt_controller.routing.pruning import PRUNE_MIN_CANDIDATES, PrefixPruning
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.scheduling.candidates import CandidateSet

__all__ = ["PipelineRouter", "WeightedScorer", "clamp_score", "uses_block_hashes"]


def uses_block_hashes(router: object) -> bool:
    """Whether ``router`` reads ``CallFacts.block_hashes`` (so the driver should fill them):
    what the router declares in its ``uses_block_hashes`` attribute (``False`` when it has
    none)."""
    return getattr(router, "uses_block_hashes", False) is True


@dataclass(frozen=True, slots=True)
class WeightedScorer:
    """A scorer, the name it is configured and reported under, and its weight (>= 0)."""

    name: str
    scorer: Scorer
    weight: float = 1.0

    def __post_init__(self) -> None:
        weight = self.weight
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise ConfigError(f"scorer {self.name!r}: weight must be a number, got {weight!r}")
        if not (math.isfinite(weight) and weight >= 0):
            raise ConfigError(f"scorer {self.name!r}: weight must be finite and >= 0")


class PipelineRouter:
    """A :class:`~agentrt_controller.scheduling.api.Router` built from pipeline stages.

    ``observers`` (the stateful parts: prefix index, affinity) hear ``on_routed``,
    ``on_finish`` and ``on_program_end``.
    """

    def __init__(
        self,
        name: str,
        *,
        filters: Sequence[tuple[str, Filter]] = (),
        scorers: Sequence[WeightedScorer] = (),
        picker: Picker,
        observers: Sequence[RouteObserver] = (),
        prune: bool = True,
        prune_min_candidates: int = PRUNE_MIN_CANDIDATES,
    ) -> None:
        """``prune``: take the pruned path when the stages allow it (module docstring) and a
        round has at least ``prune_min_candidates`` candidates (below, scoring all of them is
        cheaper); the stages must not be changed after construction then."""
        names = [n for n, _ in filters] + [s.name for s in scorers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"router {name!r}: duplicate stage name(s) {duplicates}")
        self.name = name
        self.filters = list(filters)
        self.scorers = list(scorers)
        self.picker = picker
        self.observers = list(observers)
        #: The model constraint every call passes first (:meth:`eligible`).
        self.model_filter = ModelFilter()
        #: The round's candidate set last checked, and the models all of it serves.
        self._checked_set: CandidateSet | None = None
        self._checked_models: set[str] = set()
        #: Calls routed so far.
        self.routed_total = 0
        #: Calls that landed on another backend than their program's previous call.
        self.locality = LocalityStats()
        #: Per filter name: calls for which it would have removed every candidate (skipped).
        self.filter_skips: dict[str, int] = {n: 0 for n, _ in filters}
        #: Whether a stage reads ``CallFacts.block_hashes`` (drivers fill them only then).
        self.uses_block_hashes = any(isinstance(o, PrefixIndex) for o in self.observers)
        #: The pruned path, ``None`` when off or the stages do not allow it.
        self.pruning: PrefixPruning | None = None
        self.prune_min_candidates = prune_min_candidates
        if prune:
            self.pruning = PrefixPruning.for_stages(
                self.filters, [(s.scorer, s.weight) for s in self.scorers], picker
            )

    def route(self, call: CallEntry, candidates: Sequence[BackendView], now_s: float) -> str:
        """The chosen ``backend_id``. Raises ``ValueError`` when ``candidates`` is empty (the
        dispatcher never calls a router without one) or a stage breaks its contract."""
        count = len(candidates)  # once: a round's set counts in Python
        if not count:
            raise ValueError("route() needs at least one candidate backend")
        model = call.facts.model
        # :meth:`eligible` again only when it may narrow: the dispatcher asked it already
        # about this round's set (every one serves the model: it is the set itself).
        if model is not None and not (
            candidates is self._checked_set and model in self._checked_models
        ):
            eligible = self.eligible(call, candidates, now_s)
            if eligible is not candidates:
                candidates, count = eligible, len(eligible)
                if not count:
                    raise ValueError(f"no candidate backend serves the model {model!r}")
        pruning = self.pruning
        if (
            pruning is not None
            and count >= self.prune_min_candidates
            and isinstance(candidates, CandidateSet)
        ):
            pruned = pruning.route(call, candidates, now_s)
            if pruned is not None:
                for name in pruned.skipped:
                    self.filter_skips[name] += 1
                pruning.cost.lookups["estimate"] += pruned.estimate_lookups
                return self._routed(call, pruned.chosen, now_s)
        remaining = list(candidates)
        for filter_name, stage in self.filters:
            narrowed = stage.filter(call, remaining, now_s)
            if narrowed:
                remaining = narrowed
            else:
                self.filter_skips[filter_name] += 1
        if len(remaining) == 1:
            chosen = remaining[0].backend_id
        else:
            chosen = self.picker.pick(call, self._score(call, remaining, now_s), now_s)
            if all(b.backend_id != chosen for b in remaining):
                raise ValueError(f"router {self.name!r}: picker chose unknown backend {chosen!r}")
        return self._routed(call, chosen, now_s)

    def eligible(
        self, call: CallEntry, candidates: Sequence[BackendView], now_s: float
    ) -> Sequence[BackendView]:
        """The candidates serving the call's model (:class:`ModelFilter`, never skipped):
        ``candidates`` itself when all do (a round's :class:`CandidateSet` stays one, so the
        pruned path stays open)."""
        model = call.facts.model
        if model is None:
            return candidates
        if isinstance(candidates, CandidateSet):
            # A round's set only loses backends or gains in-flight calls (their models stay):
            # a model all of it serves stays served, so each model is checked once per round
            # (one decision among many backends stays cheap: "Cost at many backends").
            if candidates is not self._checked_set:
                self._checked_set, self._checked_models = candidates, set()
            if model in self._checked_models:
                return candidates
            if ModelFilter.keeps_all(call, candidates):
                self._checked_models.add(model)
                return candidates
        elif ModelFilter.keeps_all(call, candidates):
            return candidates
        return self.model_filter.filter(call, candidates, now_s)

    def _routed(self, call: CallEntry, chosen: str, now_s: float) -> str:
        self.routed_total += 1
        self.locality.on_routed(call, chosen, now_s)
        for observer in self.observers:
            observer.on_routed(call, chosen, now_s)
        return chosen

    def _score(self, call: CallEntry, backends: list[BackendView], now_s: float) -> list[Scored]:
        totals = [0.0] * len(backends)
        for weighted in self.scorers:
            if weighted.weight == 0:
                continue
            scores = weighted.scorer.score(call, backends, now_s)
            if len(scores) != len(backends):
                raise ValueError(
                    f"scorer {weighted.name!r} returned {len(scores)} scores "
                    f"for {len(backends)} backends"
                )
            weight = weighted.weight
            # ``0 <= v <= 1`` is false for NaN and out-of-range scores: only those pay the call.
            totals = [
                total + weight * (v if 0 <= v <= 1 else clamp_score(v))
                for total, v in zip(totals, scores, strict=True)
            ]
        return [Scored(b, t) for b, t in zip(backends, totals, strict=True)]

    def on_finish(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        for observer in self.observers:
            observer.on_finish(call, backend_id, now_s)

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        self.locality.on_program_end(program, now_s)
        for observer in self.observers:
            observer.on_program_end(program, now_s)

    def snapshot(self) -> dict[str, object]:
        """JSON-able configuration and counters, for introspection."""
        return {
            "router": self.name,
            "constraints": ["model"],
            "filters": [n for n, _ in self.filters],
            "scorers": {s.name: s.weight for s in self.scorers},
            "picker": type(self.picker).__name__,
            "routed_total": self.routed_total,
            "locality": self.locality.snapshot(),
            "filter_skips": dict(self.filter_skips),
            "pruning": (
                {
                    "min_candidates": self.prune_min_candidates,
                    "pruned_total": self.pruning.pruned_total,
                    "fallback_total": self.pruning.fallback_total,
                }
                if self.pruning is not None
                else None
            ),
        }
