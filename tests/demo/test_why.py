"""What the KV cache did per kind: prompt tokens not recomputed, and the controller's pins."""

from __future__ import annotations

import json

import pytest

from agentrt_demo.agents import ATTR_CACHED_TOKENS, ATTR_PROMPT_TOKENS
from agentrt_demo.analysis import Ratios, programs_from_spans
from agentrt_demo.cluster import EngineMetrics
from agentrt_demo.report import PhaseReport, render_summary, summary_json
from agentrt_demo.runner import PhaseOutcome
from agentrt_demo.settings import DemoSettings
from agentrt_demo.why import CacheFigures, cache_figures, why_lines

from .spans import SpanFactory

pytestmark = pytest.mark.timeout(30)


def _programs(cached: dict[str, int], e2e: float) -> SpanFactory:
    """Three programs: two coding ones with 10,000 prompt tokens each (``cached`` by name)
    and a map-reduce one that reports no usage."""
    f = SpanFactory()
    for name, hits in cached.items():
        f.program(name, 0.0, e2e, kind="coding", usage=(10_000, hits))
    f.program("map_reduce-02", 0.0, e2e, kind="map_reduce")
    return f


def test_the_agents_attributes_are_the_ones_the_analysis_reads() -> None:
    f = _programs({"coding-00": 9_000}, 1.0)
    [coding, _] = programs_from_spans(f.spans)
    assert (ATTR_PROMPT_TOKENS, ATTR_CACHED_TOKENS) == (
        "agentrt.demo.prompt_tokens",
        "agentrt.demo.cached_tokens",
    )
    assert (coding.prompt_tokens, coding.cached_tokens) == (10_000, 9_000)


def test_cache_figures_match_programs_finished_in_both_phases() -> None:
    direct = programs_from_spans(_programs({"coding-00": 4_000, "coding-01": 5_000}, 2.0).spans)
    controller = programs_from_spans(_programs({"coding-00": 9_000, "coding-01": 9_500}, 1.0).spans)
    figure = cache_figures(direct, controller, "coding")
    assert figure == CacheFigures("coding", 2, 20_000, 18_500, 9_000)
    assert figure.not_recomputed == 9_500
    assert cache_figures(direct, controller, "map_reduce") is None  # no usage reported
    controller[0].status = "error"  # a program that failed in one phase is left out
    assert cache_figures(direct, controller, "coding") == CacheFigures(
        "coding", 1, 10_000, 9_500, 5_000
    )


@pytest.mark.parametrize(
    ("retention", "cached_controller", "expected"),
    [
        (
            {"retain": 12, "drop": 3},
            18_500,
            "coding 2.00x mean E2E (2 programs): contexts kept during tool waits: 12 pins over "
            "the phase (other decisions: drop 3); the engines found 92% of its prompt tokens "
            "in their prefix cache through the controller vs 45% straight: 9,500 tokens not "
            "recomputed (4,750 per program).",
        ),
        (
            None,
            8_000,
            "coding 2.00x mean E2E (2 programs): no context kept during tool waits (retention "
            "off); the engines found 40% of its prompt tokens in their prefix cache through "
            "the controller vs 45% straight (1,000 tokens fewer): the KV cache does not explain "
            "its change.",
        ),
    ],
)
def test_why_lines(retention: dict[str, int] | None, cached_controller: int, expected: str) -> None:
    figures = {"coding": CacheFigures("coding", 2, 20_000, cached_controller, 9_000)}
    ratios = {"coding": Ratios("coding", 2, 2.0, 1.5, 2.0)}
    assert why_lines(ratios, figures, retention, ["coding", "react"]) == [expected]


def test_the_summary_says_what_the_cache_did_per_kind() -> None:
    def phase(label: str, cached: dict[str, int], e2e: float) -> PhaseReport:
        programs = programs_from_spans(_programs(cached, e2e).spans)
        outcome = PhaseOutcome(label, [], 10.0)
        report = PhaseReport(label, f"{label} setup", outcome, programs, EngineMetrics())
        if label == "controller":
            report.retention = {"retain": 7}
        return report

    reports = [
        phase("controller", {"coding-00": 9_000, "coding-01": 9_500}, 1.0),
        phase("direct", {"coding-00": 4_000, "coding-01": 5_000}, 2.0),
    ]
    text = render_summary(reports, DemoSettings())
    assert "What the KV cache did, per kind:" in text
    assert "  coding 2.00x mean E2E (2 programs): contexts kept during tool waits: 7 pins" in text
    assert "9,500 tokens not recomputed" in text
    document = json.loads(json.dumps(summary_json(reports, DemoSettings())))
    assert document["retention_decisions"] == {"retain": 7}
    assert document["cache"]["coding"]["not_recomputed"] == 9_500
    assert "map_reduce" not in document["cache"]
