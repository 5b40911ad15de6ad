"""The program plan: deterministic, the documented mix, arrivals in order."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections import Counter

import pytest

from agentrt.errors import ConfigError
from agentrt_demo.settings import DemoSettings
from agentrt_demo.workload import (
    CODING_REPOS,
    coding_tool_duration_s,
    filler_text,
    plan_programs,
    tool_duration_s,
)

pytestmark = pytest.mark.timeout(30)


def test_the_plan_is_deterministic_in_the_seed() -> None:
    settings = DemoSettings(programs=40, seed=3)
    assert plan_programs(settings) == plan_programs(settings)
    assert plan_programs(settings) != plan_programs(dataclasses.replace(settings, seed=4))


def test_mix_arrivals_and_framework_programs() -> None:
    settings = DemoSettings(programs=40, seed=1, arrival_rate=2.0)
    plan = plan_programs(settings, ("langgraph", "autogen"))
    kinds = Counter(p.kind for p in plan)
    assert kinds == {
        "react": 20,
        "map_reduce": 8,
        "mcts": 6,
        "coding": 6,
        "langgraph": 1,
        "autogen": 1,
    }
    assert [p.index for p in plan] == list(range(42))
    assert plan[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(plan))
    assert plan[0].kind not in ("langgraph", "autogen")
    assert {p.name for p in plan} == {f"{p.kind}-{p.index:02d}" for p in plan}
    sizes = {
        k: [p.size for p in plan if p.kind == k] for k in ("react", "map_reduce", "mcts", "coding")
    }
    assert all(1 <= s <= 24 for s in sizes["react"]) and all(
        3 <= s <= 6 for s in sizes["map_reduce"]
    )
    assert all(4 <= s <= 12 for s in sizes["mcts"])
    assert all(4 <= s <= 8 for s in sizes["coding"])
    # Coding programs share the context of one of a few repositories.
    repos = {p.repo for p in plan if p.kind == "coding"}
    assert repos <= set(range(CODING_REPOS)) and len(repos) > 1


def test_small_plans_still_hold_every_kind() -> None:
    plan = plan_programs(DemoSettings(programs=4))
    assert sorted(p.kind for p in plan) == ["coding", "map_reduce", "mcts", "react"]
    assert [p.kind for p in plan_programs(DemoSettings(programs=1))] == ["react"]
    quick = plan_programs(DemoSettings().quick_variant())
    assert len(quick) == 6 and all(p.size <= 3 for p in quick)


def test_tool_durations_and_texts() -> None:
    rng = random.Random(0)
    durations = [tool_duration_s(rng) for _ in range(2000)]
    assert min(durations) >= 0.05 and max(durations) <= 6.0
    assert 0.45 < sorted(durations)[1000] < 0.8  # median ~0.6 s
    coding = sorted(coding_tool_duration_s(rng) for _ in range(2000))
    assert coding[0] >= 0.05 and coding[-1] <= 10.0
    assert 0.4 < coding[1000] < 0.6 and 2.5 < coding[1800] < 4.5  # median 0.5 s, p90 ~3.4 s
    text = filler_text(random.Random(1), 120)
    assert len(text.split()) == 120 and text.endswith(".")


@pytest.mark.parametrize(
    "bad",
    [
        {"programs": 0},
        {"time_scale": 0.0},
        {"policy": "srpt"},
        {"arrival_rate": -1.0},
        {"admission_window": 0},
        {"progress": "loud"},
        {"timeline_formats": ("svg",)},
    ],
)
def test_bad_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        DemoSettings(**bad)  # type: ignore[arg-type]
