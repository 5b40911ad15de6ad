"""build_router: names, parameters, pipeline specs — and every rejection is a ConfigError."""

from __future__ import annotations

from typing import Any

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.routing import ROUTER_NAMES, build_router
from agentrt_controller.routing.pipeline import PipelineRouter
from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.scheduling.api import BackendView
from tests.controller_policies.helpers import make_call

pytestmark = pytest.mark.timeout(30)


def test_every_named_router_builds_and_routes() -> None:
    views = [BackendView("b0", in_flight=1), BackendView("b1", in_flight=0)]
    for name in ROUTER_NAMES:
        params: dict[str, Any] = {"scorers": [{"type": "load"}]} if name == "pipeline" else {}
        router = build_router(name, params)
        assert router.route(make_call("p", prompt_tokens=10), views, 0.0) in {"b0", "b1"}
    assert isinstance(build_router(" Round_Robin "), RoundRobinRouter)


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("nearest", {}, "unknown router"),
        ("round_robin", {"x": 1}, "takes no parameters"),
        ("least_loaded", {"weight": 1}, "takes no parameters"),
        ("autellix", {"threshold": 10}, r"routing\.threshold: unknown key"),
        ("autellix", {"threshold_tokens": -1}, "threshold_tokens"),
        ("autellix", {"threshold_tokens": 2.5}, "threshold_tokens"),
        ("autellix", {"affinity_ttl_s": 0}, "affinity_ttl_s"),
        ("prefix", {"queued_tokens": 3}, r"routing\.queued_tokens: unknown key"),
        ("prefix", {"queued_tokens_per_call": -1}, "queued_tokens_per_call"),
        ("prefix", {"prefill_s_per_token": "fast"}, "prefill_s_per_token"),
        ("prefix", {"affinity_weight": float("nan")}, "affinity_weight"),
        ("prefix", {"max_kv_usage": 1.5}, "max_usage"),
        ("prefix", {"block_ttl_s": 0}, "ttl_s"),
        ("prefix", {"capacity_blocks": 0}, "capacity_blocks"),
        ("prefix", {"shared_weight": 2}, "shared_weight"),
        ("prefix", {"shared_programs": 1}, "shared_programs"),
        ("prefix", {"affinity_ttl_s": -5}, "ttl_s"),
    ],
)
def test_bad_names_and_parameters(name: str, params: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_router(name, params)


def test_pipeline_spec_builds_the_described_router() -> None:
    router = build_router(
        "pipeline",
        {
            "name": "custom",
            "filters": [{"type": "healthy"}, {"type": "kv_pressure", "max_usage": 0.9}],
            "scorers": [
                {"type": "prefix_cost", "weight": 1.0, "queued_tokens_per_call": 256},
                {"type": "affinity", "name": "stick", "weight": 0.3},
                {"type": "load", "weight": 0.1},
            ],
            "picker": {"type": "weighted_random", "seed": 7},
            "index": {"ttl_s": 300, "capacity_blocks": 1000},
            "affinity": {"ttl_s": 60},
        },
    )
    assert isinstance(router, PipelineRouter)
    snap = router.snapshot()
    assert snap["router"] == "custom"
    assert snap["filters"] == ["healthy", "kv_pressure"]
    assert snap["scorers"] == {"prefix_cost": 1.0, "stick": 0.3, "load": 0.1}
    assert snap["picker"] == "WeightedRandomPicker"
    assert len(router.observers) == 2  # the shared index and affinity


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"scorers": []}, "at least one scorer"),
        ({"scorers": [{"type": "magic"}]}, "unknown scorer type"),
        ({"scorers": [{"weight": 1}]}, "needs a 'type'"),
        ({"scorers": "load"}, "list of stage tables"),
        ({"scorers": [{"type": "load"}], "filters": [{"type": "nearby"}]}, "unknown filter"),
        ({"scorers": [{"type": "load"}, {"type": "load"}]}, "duplicate"),
        ({"scorers": [{"type": "load", "weight": -1}]}, "weight"),
        ({"scorers": [{"type": "load", "bias": 1}]}, "unknown scorer 'load' parameter"),
        ({"scorers": [{"type": "load"}], "picker": {"type": "weighted_random"}}, "seed"),
        ({"scorers": [{"type": "load"}], "picker": {"type": "best"}}, "unknown picker"),
        ({"scorers": [{"type": "load"}], "picker": {"type": "argmax", "x": 1}}, "unknown"),
        ({"scorers": [{"type": "load"}], "extra": 1}, "unknown pipeline"),
        ({"scorers": [{"type": "prefix_cost"}], "index": {"size": 3}}, "unknown index"),
        ({"scorers": [{"type": "prefix_cost"}], "index": []}, "must be a table"),
        (
            {"scorers": [{"type": "load"}], "filters": [{"type": "kv_pressure", "max_usage": 2}]},
            "max_usage",
        ),
        (
            {
                "scorers": [{"type": "load"}],
                "filters": [{"type": "autellix_long_call", "threshold_tokens": "x"}],
            },
            "threshold_tokens",
        ),
    ],
)
def test_bad_pipeline_specs(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_router("pipeline", spec)


def test_a_pipeline_can_rebuild_the_autellix_rule() -> None:
    router = build_router(
        "pipeline",
        {
            "filters": [
                {"type": "healthy"},
                {"type": "autellix_long_call", "threshold_tokens": 10},
            ],
            "scorers": [{"type": "load"}],
            "affinity": {"sticky_first": True},
        },
    )
    first = make_call("p", prompt_tokens=5)
    assert router.route(first, [BackendView("b0", 3), BackendView("b1", 0)], 0.0) == "b1"
    long = make_call("p", prompt_tokens=50)
    assert router.route(long, [BackendView("b0", 0), BackendView("b1", 9)], 1.0) == "b1"
