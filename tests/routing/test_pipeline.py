"""Pipeline contracts (clamping, weights, filter skips, stage errors) and the pickers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.routing.api import Scored
from agentrt_controller.routing.pickers import ArgmaxPicker, WeightedRandomPicker
from agentrt_controller.routing.pipeline import PipelineRouter, WeightedScorer, clamp_score
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallEntry
from tests.controller_policies.helpers import make_call

pytestmark = pytest.mark.timeout(30)


def _views(*ids: str, **kw: object) -> list[BackendView]:
    return [BackendView(i, in_flight=0, **kw) for i in ids]  # type: ignore[arg-type]


class Fixed:
    """A scorer returning fixed values per backend id."""

    def __init__(self, values: dict[str, float]) -> None:
        self.values = values

    def score(self, call: CallEntry, backends: Sequence[BackendView], now_s: float) -> list[float]:
        return [self.values[b.backend_id] for b in backends]


class DropAll:
    def filter(
        self, call: CallEntry, backends: Sequence[BackendView], now_s: float
    ) -> list[BackendView]:
        return []


class KeepOnly:
    def __init__(self, backend_id: str) -> None:
        self.backend_id = backend_id

    def filter(
        self, call: CallEntry, backends: Sequence[BackendView], now_s: float
    ) -> list[BackendView]:
        return [b for b in backends if b.backend_id == self.backend_id]


@pytest.mark.parametrize(
    ("value", "clamped"),
    [(-3.0, 0.0), (0.0, 0.0), (0.25, 0.25), (1.0, 1.0), (7.0, 1.0), (float("nan"), 0.0)],
)
def test_clamp(value: float, clamped: float) -> None:
    assert clamp_score(value) == clamped


@pytest.mark.parametrize(
    ("a_values", "b_values", "weights", "winner"),
    [
        # Out-of-range scores are clamped before weighting: 5 counts as 1, so b wins on the
        # second scorer.
        ({"x": 5.0, "y": 0.9}, {"x": 0.0, "y": 0.5}, (1.0, 1.0), "y"),
        # A weight of 3 on the second scorer overturns the first.
        ({"x": 1.0, "y": 0.0}, {"x": 0.0, "y": 0.5}, (1.0, 3.0), "y"),
        ({"x": 1.0, "y": 0.0}, {"x": 0.0, "y": 0.5}, (1.0, 1.0), "x"),
        # NaN and negatives count as 0; the tie goes to the smaller id.
        ({"x": float("nan"), "y": -1.0}, {"x": 0.0, "y": 0.0}, (1.0, 1.0), "x"),
        # A weight of 0 switches a scorer off.
        ({"x": 0.0, "y": 1.0}, {"x": 1.0, "y": 0.0}, (0.0, 1.0), "x"),
    ],
)
def test_scores_are_clamped_weighted_and_summed(
    a_values: dict[str, float],
    b_values: dict[str, float],
    weights: tuple[float, float],
    winner: str,
) -> None:
    router = PipelineRouter(
        "t",
        scorers=[
            WeightedScorer("a", Fixed(a_values), weights[0]),
            WeightedScorer("b", Fixed(b_values), weights[1]),
        ],
        picker=ArgmaxPicker(),
    )
    assert router.route(make_call("p"), _views("x", "y"), 0.0) == winner


def test_a_filter_that_would_empty_the_set_is_skipped_and_counted() -> None:
    router = PipelineRouter(
        "t",
        filters=[("drop", DropAll()), ("keep_y", KeepOnly("y"))],
        scorers=[WeightedScorer("a", Fixed({"x": 1.0, "y": 0.0}))],
        picker=ArgmaxPicker(),
    )
    assert router.route(make_call("p"), _views("x", "y"), 0.0) == "y"
    assert router.filter_skips == {"drop": 1, "keep_y": 0}
    assert router.snapshot()["routed_total"] == 1


def test_stage_contract_violations_raise() -> None:
    short = PipelineRouter(
        "t", scorers=[WeightedScorer("a", Fixed({"x": 1.0}))], picker=ArgmaxPicker()
    )
    short.scorers[0] = WeightedScorer("a", _Short())
    with pytest.raises(ValueError, match="returned 1 scores"):
        short.route(make_call("p"), _views("x", "y"), 0.0)
    liar = PipelineRouter(
        "t", scorers=[WeightedScorer("a", Fixed({"x": 1, "y": 1}))], picker=_Liar()
    )
    with pytest.raises(ValueError, match="unknown backend"):
        liar.route(make_call("p"), _views("x", "y"), 0.0)
    with pytest.raises(ValueError):
        liar.route(make_call("p"), [], 0.0)


class _Short:
    def score(self, call: CallEntry, backends: Sequence[BackendView], now_s: float) -> list[float]:
        return [1.0]


class _Liar:
    def pick(self, call: CallEntry, scored: Sequence[Scored], now_s: float) -> str:
        return "nowhere"


@pytest.mark.parametrize("weight", [-1.0, float("inf"), float("nan"), "1", True])
def test_bad_weights_are_config_errors(weight: object) -> None:
    with pytest.raises(ConfigError):
        WeightedScorer("a", Fixed({}), weight)  # type: ignore[arg-type]


def test_duplicate_stage_names_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="duplicate"):
        PipelineRouter(
            "t",
            filters=[("a", DropAll())],
            scorers=[WeightedScorer("a", Fixed({}))],
            picker=ArgmaxPicker(),
        )


def test_argmax_breaks_ties_by_backend_id() -> None:
    views = _views("c", "a", "b")
    scored = [Scored(views[0], 1.0), Scored(views[1], 1.0 - 1e-12), Scored(views[2], 0.5)]
    assert ArgmaxPicker().pick(make_call("p"), scored, 0.0) == "a"


def test_weighted_random_is_reproducible_and_proportional() -> None:
    views = _views("a", "b", "c")
    scored = [Scored(views[0], 3.0), Scored(views[1], 1.0), Scored(views[2], 0.0)]
    call = make_call("p")
    draws = [WeightedRandomPicker(7).pick(call, scored, 0.0) for _ in range(3)]
    assert len(set(draws)) == 1  # same seed, same first draw
    picker = WeightedRandomPicker(11)
    counts = Counter(picker.pick(call, scored, 0.0) for _ in range(4000))
    assert counts["c"] == 0
    assert 2.5 < counts["a"] / counts["b"] < 3.5
    zero = [Scored(views[0], 0.0), Scored(views[1], 0.0)]
    assert {WeightedRandomPicker(3).pick(call, zero, 0.0) for _ in range(1)} <= {"a", "b"}
    with pytest.raises(ConfigError):
        WeightedRandomPicker("x")  # type: ignore[arg-type]
