"""The demo's summary: a fixed-width table per program kind and phase, and the same as JSON.

Columns (seconds of wall time): ``n`` programs / ``ok`` finished without error; ``calls`` LLM
calls per program; ``E2E p50 / p95 / mean`` program end-to-end latency; ``wait / exec / tool``
mean per program of the time split defined in :mod:`agentrt_demo.analysis`; ``prefix hit``
the engines' prefix-cache hit rate over the phase (``vllm:prefix_cache_hits_total /
vllm:prefix_cache_queries_total``; per phase, so shown on the ``all`` rows); ``speed-up``
mean E2E direct / mean E2E through the controller over the programs that finished in both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from agentrt_demo.analysis import KindStats, ProgramRecord, kind_stats, speedup
from agentrt_demo.cluster import EngineMetrics
from agentrt_demo.runner import PhaseOutcome
from agentrt_demo.settings import DemoSettings
from agentrt_demo.workload import BASE_KINDS, FRAMEWORK_KINDS

__all__ = ["PhaseReport", "render_summary", "summary_json"]

_KIND_ORDER: tuple[str, ...] = (*BASE_KINDS, *FRAMEWORK_KINDS)


@dataclass(slots=True)
class PhaseReport:
    """One finished phase: how it ran, its programs (from its spans) and its engines."""

    label: str
    #: How the endpoints were set up (printed under the table).
    setup: str
    outcome: PhaseOutcome
    programs: list[ProgramRecord]
    engines: EngineMetrics

    def stats(self) -> list[KindStats]:
        present = {p.kind for p in self.programs}
        kinds = [k for k in _KIND_ORDER if k in present]
        kinds += sorted(present - set(kinds))
        return kind_stats(self.programs, kinds)


def _f(value: float, digits: int = 2) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def render_summary(reports: Sequence[PhaseReport], settings: DemoSettings) -> str:
    """The summary as text (a table, then notes)."""
    header = (
        f"{'kind':<11} {'phase':<10} {'n':>3} {'ok':>3} {'calls':>5} {'E2E p50':>8} "
        f"{'E2E p95':>8} {'E2E mean':>8} {'wait':>6} {'exec':>6} {'tool':>6} "
        f"{'prefix hit':>10} {'speed-up':>8}"
    )
    lines = [
        "",
        "Summary (wall seconds; wait/exec/tool = mean per program, summed over its calls)",
        "",
        header,
        "-" * len(header),
    ]
    by_label = {r.label: r for r in reports}
    controller, direct = by_label.get("controller"), by_label.get("direct")
    stats = {r.label: {s.kind: s for s in r.stats()} for r in reports}
    kinds = list(stats[reports[0].label]) if reports else []
    for kind in kinds:
        for i, report in enumerate(reports):
            row = stats[report.label].get(kind)
            if row is None:
                continue
            hit = ""
            if kind == "all":
                rate = report.engines.prefix_hit_rate
                hit = "-" if rate is None else f"{100 * rate:.1f} %"
            gain = ""
            if report.label == "controller" and direct is not None and controller is not None:
                value = speedup(direct.programs, controller.programs, kind)
                gain = "-" if math.isnan(value) else f"{value:.2f}x"
            lines.append(
                f"{kind if i == 0 else '':<11} {report.label:<10} {row.count:>3} {row.ok:>3} "
                f"{_f(row.llm_calls_mean, 1):>5} {_f(row.e2e_p50_s):>8} {_f(row.e2e_p95_s):>8} "
                f"{_f(row.e2e_mean_s):>8} {_f(row.wait_mean_s):>6} {_f(row.exec_mean_s):>6} "
                f"{_f(row.tool_mean_s):>6} {hit:>10} {gain:>8}"
            )
        if kind == "all" or len(reports) > 1:
            lines.append("")
    lines += _notes(reports, settings)
    return "\n".join(lines).rstrip() + "\n"


def _notes(reports: Sequence[PhaseReport], settings: DemoSettings) -> list[str]:
    notes: list[str] = []
    if any(r.label == "direct" for r in reports) and any(r.label == "controller" for r in reports):
        notes.append(
            "speed-up = mean E2E direct / mean E2E through the controller "
            "(same programs, finished in both phases)"
        )
    for report in reports:
        engines = report.engines
        queued = engines.queue_time_s / settings.time_scale
        per_call = queued / engines.requests if engines.requests else math.nan
        outcome = report.outcome
        statuses = _status_counts(outcome)
        load = outcome.load_average
        notes.append(
            f"{report.label}: {report.setup}; phase wall time {outcome.wall_s:.1f} s "
            f"(machine load average {_f(load[0], 1)} → {_f(load[1], 1)}); "
            f"{engines.requests:.0f} engine requests waited {queued:.1f} s in the engines' "
            f"queues ({_f(per_call, 3)} s each), {engines.preemptions:.0f} preemptions"
            + (f"; programs: {statuses}" if statuses else "")
        )
        if outcome.cut_short:
            notes.append(
                f"{report.label}: the phase budget ({settings.phase_budget_s:.0f} s) ran out; "
                "unfinished programs were cancelled"
            )
        errors = [o for o in outcome.outcomes if o.status == "error"]
        for failed in errors[:3]:
            notes.append(f"{report.label}: {failed.spec.name} failed: {failed.error}")
    return notes


def _status_counts(outcome: PhaseOutcome) -> str:
    counts: dict[str, int] = {}
    for o in outcome.outcomes:
        if o.status != "ok":
            counts[o.status] = counts.get(o.status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))


def summary_json(reports: Sequence[PhaseReport], settings: DemoSettings) -> dict[str, Any]:
    """The summary as a JSON-able dict (``summary.json``); NaN becomes null."""
    by_label = {r.label: r for r in reports}
    phases: dict[str, Any] = {}
    for report in reports:
        phases[report.label] = {
            "setup": report.setup,
            "wall_s": report.outcome.wall_s,
            "load_average": list(report.outcome.load_average),
            "cut_short": report.outcome.cut_short,
            "kinds": [_clean(asdict(s)) for s in report.stats()],
            "engines": {
                **asdict(report.engines),
                "prefix_hit_rate": report.engines.prefix_hit_rate,
            },
            "programs": {o.spec.name: o.status for o in report.outcome.outcomes},
        }
    result: dict[str, Any] = {
        "settings": {
            "programs": settings.programs,
            "seed": settings.seed,
            "time_scale": settings.time_scale,
            "policy": settings.policy,
            "engines": settings.engines,
            "arrival_rate_per_model_s": settings.arrival_rate,
            "max_num_seqs": settings.max_num_seqs,
            "num_gpu_blocks": settings.num_gpu_blocks,
            "admission_window": settings.admission_window,
            "quick": settings.quick,
        },
        "phases": phases,
    }
    if "controller" in by_label and "direct" in by_label:
        kinds = [s.kind for s in by_label["controller"].stats()]
        result["speedup"] = {
            kind: _clean_value(
                speedup(by_label["direct"].programs, by_label["controller"].programs, kind)
            )
            for kind in kinds
        }
    return result


def _clean(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _clean_value(v) for k, v in data.items()}


def _clean_value(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value
