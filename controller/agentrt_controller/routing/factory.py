"""Build routers by name (docs/architecture.md, design rule 2: unknown names, unknown or bad
parameters and duplicate stages are :class:`~agentrt.errors.ConfigError`, never a silent fallback).

Names: ``round_robin``, ``least_loaded``, ``autellix``, ``prefix`` (:mod:`.routers`) and
``pipeline`` — a router assembled from stage specs::

    build_router("pipeline", {
        "filters": [{"type": "healthy"}, {"type": "kv_pressure", "max_usage": 0.9}],
        "scorers": [{"type": "prefix_cost", "weight": 1.0, "queued_tokens_per_call": 256},
                    {"type": "affinity", "weight": 0.3}],
        "picker": {"type": "weighted_random", "seed": 7},
        "index": {"ttl_s": 300},           # shared by prefix_cost scorers
        "affinity": {"ttl_s": 600},        # shared by affinity / autellix_long_call stages
    })

Each stage spec has a ``type``, an optional ``name`` (default: the type; names must be unique)
and the type's parameters. Stage types: filters ``healthy``, ``kv_pressure`` (``max_usage``),
``retained``, ``autellix_long_call`` (``threshold_tokens``); scorers ``load``, ``affinity``,
``prefix_cost`` (``prefill_s_per_token``, ``queued_tokens_per_call``), each with ``weight``;
pickers ``argmax``, ``weighted_random`` (``seed``, required).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from agentrt.errors import ConfigError
from agentrt_controller.config_check import parse_section
from agentrt_controller.routing.affinity import ProgramAffinity
from agentrt_controller.routing.api import Filter, Picker, RouteObserver, Router, Scorer
from agentrt_controller.routing.filters import (
    AutellixLongCallFilter,
    HealthyFilter,
    KvPressureFilter,
    RetainedFilter,
)
from agentrt_controller.routing.kv_index import ExactPrefixIndex
from agentrt_controller.routing.pickers import ArgmaxPicker, WeightedRandomPicker
from agentrt_controller.routing.pipeline import PipelineRouter, WeightedScorer
from agentrt_controller.routing.prefix_index import PrefixIndex
from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.routing.routers import (
    AutellixParams,
    PrefixParams,
    autellix_router,
    least_loaded_router,
    prefix_router,
)
from agentrt_controller.routing.scorers import AffinityScorer, LoadScorer, PrefixCostScorer

__all__ = ["DEFAULT_ROUTER", "ROUTER_NAMES", "build_router"]

#: Every name :func:`build_router` knows, baselines first.
ROUTER_NAMES = ("round_robin", "least_loaded", "autellix", "prefix", "pipeline")
#: The router agentrt recommends with several backends.
DEFAULT_ROUTER = "prefix"


#: A stage spec or table from the configuration: keys to values of any config type, checked
#: by the builder that reads them.
_Spec = dict[str, object]
_Stage = TypeVar("_Stage", Filter, Scorer)


def _no_params(name: str, params: Mapping[str, object]) -> None:
    if params:
        raise ConfigError(f"router {name!r} takes no parameters, got {sorted(params)}")


def build_router(name: str, params: Mapping[str, object] | None = None) -> Router:
    """A new router. ``params``: the router's parameters (see :class:`AutellixParams`,
    :class:`PrefixParams`, and the module docstring for ``pipeline``); ``None`` = defaults.

    Raises :class:`ConfigError` for an unknown name, unknown or invalid parameters.
    """
    key = name.strip().lower() if isinstance(name, str) else name
    params = dict(params or {})
    if key == "round_robin":
        _no_params("round_robin", params)
        return RoundRobinRouter()
    if key == "least_loaded":
        _no_params("least_loaded", params)
        return least_loaded_router()
    if key == "autellix":
        autellix = parse_section(AutellixParams, params, "routing")
        if not autellix.affinity_ttl_s > 0:
            raise ConfigError("autellix affinity_ttl_s must be > 0 seconds")
        _check_threshold(autellix.threshold_tokens)
        return autellix_router(autellix)
    if key == "prefix":
        return prefix_router(parse_section(PrefixParams, params, "routing"))
    if key == "pipeline":
        return _pipeline(params)
    raise ConfigError(f"unknown router {name!r}; valid: {', '.join(ROUTER_NAMES)}")


def _check_threshold(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"threshold_tokens must be an integer >= 0, got {value!r}")
    return value


# --- pipeline specs ---------------------------------------------------------------------------


class _Shared:
    """The stateful objects stages share, created on first use from the spec's tables."""

    def __init__(self, spec: Mapping[str, object]) -> None:
        self._index_spec = _table(spec.get("index", {}), "index")
        self._affinity_spec = _table(spec.get("affinity", {}), "affinity")
        self.index: PrefixIndex | None = None
        self.affinity: ProgramAffinity | None = None
        #: Fed by vLLM's KV events when backends publish them (prefix_cost scorers share it).
        self.exact = ExactPrefixIndex()

    def get_index(self) -> PrefixIndex:
        if self.index is None:
            spec = _only(self._index_spec, "index", {"ttl_s", "capacity_blocks", "shared_programs"})
            self.index = PrefixIndex(**_keywords(spec))
        return self.index

    def get_affinity(self) -> ProgramAffinity:
        if self.affinity is None:
            spec = _only(self._affinity_spec, "affinity", {"ttl_s", "sticky_first"})
            self.affinity = ProgramAffinity(**_keywords(spec))
        return self.affinity

    def observers(self) -> list[RouteObserver]:
        return [o for o in (self.index, self.affinity) if o is not None]


def _keywords(spec: _Spec) -> dict[str, Any]:
    """``spec`` as keyword arguments of a constructor that checks their values itself (the
    keys were checked by :func:`_only`)."""
    return spec


def _table(value: object, what: str) -> _Spec:
    if not isinstance(value, Mapping):
        raise ConfigError(f"pipeline {what} must be a table, got {type(value).__name__}")
    return dict(value)


def _only(spec: Mapping[str, object], what: str, allowed: set[str]) -> _Spec:
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ConfigError(f"unknown {what} parameter(s) {unknown}; valid: {sorted(allowed)}")
    return dict(spec)


def _number(spec: Mapping[str, object], key: str, default: float, what: str) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{what}: {key} must be a finite number, got {value!r}")
    return float(value)


_FilterBuilder = Callable[[_Spec, _Shared, str], Filter]
_ScorerBuilder = Callable[[_Spec, _Shared, str], Scorer]


def _kv_pressure(spec: _Spec, shared: _Shared, what: str) -> Filter:
    return KvPressureFilter(_number(_only(spec, what, {"max_usage"}), "max_usage", 0.95, what))


def _long_call(spec: _Spec, shared: _Shared, what: str) -> Filter:
    spec = _only(spec, what, {"threshold_tokens"})
    threshold = _check_threshold(spec.get("threshold_tokens", 2048))
    return AutellixLongCallFilter(shared.get_affinity(), threshold)


def _simple(factory: Callable[[], _Stage]) -> Callable[[_Spec, _Shared, str], _Stage]:
    def build(spec: _Spec, shared: _Shared, what: str) -> _Stage:
        _only(spec, what, set())
        return factory()

    return build


_FILTERS: Mapping[str, _FilterBuilder] = {
    "healthy": _simple(HealthyFilter),
    "kv_pressure": _kv_pressure,
    "retained": _simple(RetainedFilter),
    "autellix_long_call": _long_call,
}


def _prefix_cost(spec: _Spec, shared: _Shared, what: str) -> Scorer:
    allowed = {"prefill_s_per_token", "queued_tokens_per_call", "shared_weight"}
    spec = _only(spec, what, allowed)
    prefill = _number(spec, "prefill_s_per_token", 1.0e-4, what)
    queued = _number(spec, "queued_tokens_per_call", 128.0, what)
    return PrefixCostScorer(
        shared.get_index(),
        prefill_s_per_token=prefill,
        queued_s_per_call=queued * prefill,
        shared_weight=_number(spec, "shared_weight", 0.1, what),
        exact=shared.exact,
    )


def _affinity(spec: _Spec, shared: _Shared, what: str) -> Scorer:
    _only(spec, what, set())
    return AffinityScorer(shared.get_affinity())


_SCORERS: Mapping[str, _ScorerBuilder] = {
    "load": _simple(LoadScorer),
    "affinity": _affinity,
    "prefix_cost": _prefix_cost,
}


def _stage_specs(value: object, what: str) -> list[_Spec]:
    if value is None:
        return []
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ConfigError(f"pipeline {what} must be a list of stage tables")
    specs = []
    for item in value:
        if not isinstance(item, Mapping) or "type" not in item:
            raise ConfigError(f"each pipeline {what} entry needs a 'type', got {item!r}")
        specs.append(dict(item))
    return specs


def _picker(value: object) -> Picker:
    spec = _table(value if value is not None else {"type": "argmax"}, "picker")
    kind = spec.pop("type", None)
    if kind == "argmax":
        _only(spec, "argmax picker", set())
        return ArgmaxPicker()
    if kind == "weighted_random":
        _only(spec, "weighted_random picker", {"seed"})
        if "seed" not in spec:
            raise ConfigError("the weighted_random picker needs an explicit integer 'seed'")
        seed = spec["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"the weighted random picker needs an integer seed, got {seed!r}")
        return WeightedRandomPicker(seed)
    raise ConfigError(f"unknown picker type {kind!r}; valid: argmax, weighted_random")


def _weight(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{what}: weight must be a number, got {value!r}")
    return float(value)


def _pipeline(spec: Mapping[str, object]) -> PipelineRouter:
    _only(spec, "pipeline", {"filters", "scorers", "picker", "index", "affinity", "name"})
    shared = _Shared(spec)
    filters: list[tuple[str, Filter]] = []
    for item in _stage_specs(spec.get("filters"), "filters"):
        kind, name = str(item.pop("type")), str(item.pop("name", "") or "")
        builder = _FILTERS.get(kind)
        if builder is None:
            raise ConfigError(f"unknown filter type {kind!r}; valid: {', '.join(_FILTERS)}")
        filters.append((name or kind, builder(item, shared, f"filter {name or kind!r}")))
    scorers: list[WeightedScorer] = []
    for item in _stage_specs(spec.get("scorers"), "scorers"):
        kind, name = str(item.pop("type")), str(item.pop("name", "") or "")
        weight = _weight(item.pop("weight", 1.0), f"scorer {name or kind!r}")
        scorer_builder = _SCORERS.get(kind)
        if scorer_builder is None:
            raise ConfigError(f"unknown scorer type {kind!r}; valid: {', '.join(_SCORERS)}")
        label = name or kind
        scorers.append(
            WeightedScorer(label, scorer_builder(item, shared, f"scorer {label!r}"), weight)
        )
    if not scorers:
        raise ConfigError("a pipeline router needs at least one scorer")
    return PipelineRouter(
        str(spec.get("name", "pipeline")),
        filters=filters,
        scorers=scorers,
        picker=_picker(spec.get("picker")),
        observers=shared.observers(),
    )
