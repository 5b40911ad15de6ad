"""The demo's summary: a fixed-width table per program kind and phase, and the same as JSON.

Columns (seconds of wall time): ``n`` programs / ``ok`` finished without error; ``calls`` LLM
calls per program; ``E2E p50 / p95 / mean`` program end-to-end latency; ``ms/tok`` mean
program token latency (E2E per generated token, milliseconds); ``wait / exec / tool`` mean per
program of the time split defined in :mod:`agentrt_demo.analysis`; ``prefix hit`` the engines'
prefix-cache hit rate over the phase (``vllm:prefix_cache_hits_total /
vllm:prefix_cache_queries_total``; per phase, so shown on the ``all`` rows); on the controller
rows, direct ÷ controller over the programs that finished in both: ``tok x`` mean token
latency, ``p95 x`` E2E p95 and ``speed-up`` mean E2E. Under the table, the verdict in words
(:mod:`agentrt_demo.verdict`) and, per kind that reports its prompt usage, what the KV cache
did for it (:mod:`agentrt_demo.why`), then one note per phase.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from agentrt_demo.analysis import KindStats, ProgramRecord, Ratios, kind_stats, ratios
from agentrt_demo.cluster import CpuTimes, EngineMetrics
from agentrt_demo.models import ModelFigures, model_lines
from agentrt_demo.runner import PhaseOutcome
from agentrt_demo.settings import DemoSettings
from agentrt_demo.verdict import verdict
from agentrt_demo.why import CacheFigures, cache_figures, why_lines
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
    #: The controller process's CPU use while the phase's programs ran (controller phase,
    #: Linux); None else.
    controller_cpu: CpuTimes | None = None
    #: The controller's retention decisions over the phase by kind (``{"retain": 57}``;
    #: controller phase with retention on); None else.
    retention: dict[str, int] | None = None
    #: Where each model's calls went (``agentrt demo --models``); None with one model.
    models: ModelFigures | None = None

    def stats(self) -> list[KindStats]:
        present = {p.kind for p in self.programs}
        kinds = [k for k in _KIND_ORDER if k in present]
        kinds += sorted(present - set(kinds))
        return kind_stats(self.programs, kinds)


def _f(value: float, digits: int = 2) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _ratios(reports: Sequence[PhaseReport]) -> dict[str, Ratios]:
    """Direct ÷ controller per kind (empty unless both phases ran)."""
    by_label = {r.label: r for r in reports}
    controller, direct = by_label.get("controller"), by_label.get("direct")
    if controller is None or direct is None:
        return {}
    kinds = [s.kind for s in controller.stats()]
    return {kind: ratios(direct.programs, controller.programs, kind) for kind in kinds}


def _cache(reports: Sequence[PhaseReport]) -> dict[str, CacheFigures]:
    """Per kind, prompt tokens cached in each phase (empty unless both phases ran)."""
    by_label = {r.label: r for r in reports}
    controller, direct = by_label.get("controller"), by_label.get("direct")
    if controller is None or direct is None:
        return {}
    figures: dict[str, CacheFigures] = {}
    for row in controller.stats():
        figure = cache_figures(direct.programs, controller.programs, row.kind)
        if figure is not None:
            figures[row.kind] = figure
    return figures


def _x(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}x"


def render_summary(reports: Sequence[PhaseReport], settings: DemoSettings) -> str:
    """The summary as text (a table, the verdict, then notes)."""
    header = (
        f"{'kind':<11} {'phase':<10} {'n':>3} {'ok':>3} {'calls':>5} {'E2E p50':>8} "
        f"{'E2E p95':>8} {'E2E mean':>8} {'ms/tok':>6} {'wait':>6} {'exec':>6} {'tool':>6} "
        f"{'prefix hit':>10} {'tok x':>6} {'p95 x':>6} {'speed-up':>8}"
    )
    lines = [
        "",
        "Summary (wall seconds; wait/exec/tool = mean per program, summed over its calls)",
        "",
        header,
        "-" * len(header),
    ]
    compared = _ratios(reports)
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
            gains = ["", "", ""]
            if report.label == "controller" and kind in compared:
                r = compared[kind]
                gains = [_x(r.token_latency_mean), _x(r.e2e_p95), _x(r.e2e_mean)]
            lines.append(
                f"{kind if i == 0 else '':<11} {report.label:<10} {row.count:>3} {row.ok:>3} "
                f"{_f(row.llm_calls_mean, 1):>5} {_f(row.e2e_p50_s):>8} {_f(row.e2e_p95_s):>8} "
                f"{_f(row.e2e_mean_s):>8} {_f(1000 * row.token_latency_mean_s, 1):>6} "
                f"{_f(row.wait_mean_s):>6} {_f(row.exec_mean_s):>6} {_f(row.tool_mean_s):>6} "
                f"{hit:>10} {gains[0]:>6} {gains[1]:>6} {gains[2]:>8}".rstrip()
            )
        if kind == "all" or len(reports) > 1:
            lines.append("")
    lines += _notes(reports, settings, compared)
    return "\n".join(lines).rstrip() + "\n"


def _notes(
    reports: Sequence[PhaseReport], settings: DemoSettings, compared: dict[str, Ratios]
) -> list[str]:
    from agentrt_controller import defaults

    notes: list[str] = []
    if compared:
        notes.append(
            "tok x / p95 x / speed-up = mean token latency / E2E p95 / mean E2E, direct ÷ "
            "through the controller (same programs, finished in both phases; above 1x = faster)"
        )
        controller = next(r for r in reports if r.label == "controller")
        rows = {s.kind: s for s in controller.stats()}
        kinds = [k for k in rows if k != "all"]
        policy = settings.policy or defaults.POLICY
        notes += ["", *verdict(policy, compared, rows, kinds, controller.controller_cpu)]
        why = why_lines(compared, _cache(reports), controller.retention, kinds)
        if why:
            notes += ["What the KV cache did, per kind:", *(f"  {line}" for line in why)]
        notes.append("")
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
        cpu = report.controller_cpu
        if cpu is not None:
            notes.append(
                f"{report.label}: the controller process ran {cpu.running_s:.1f} s on a CPU and "
                f"waited {cpu.waiting_s:.1f} s for one (/proc/PID/schedstat)"
            )
        if outcome.cut_short:
            notes.append(
                f"{report.label}: the phase budget ({settings.phase_budget_s:.0f} s) ran out; "
                "unfinished programs were cancelled"
            )
        if report.models is not None:
            notes += model_lines(report.label, report.models)
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
            "controller_cpu": None
            if report.controller_cpu is None
            else asdict(report.controller_cpu),
        }
        if report.models is not None:
            phases[report.label]["models"] = {
                **asdict(report.models),
                "wrong_routes": report.models.wrong_routes,
            }
    result: dict[str, Any] = {
        "settings": {
            "programs": settings.programs,
            "seed": settings.seed,
            "time_scale": settings.time_scale,
            "policy": settings.policy,
            "router": settings.router,
            "retention": settings.retention,
            "priority": settings.priority,
            "engines": settings.engines,
            "models": list(settings.models),
            "arrival_rate_per_model_s": settings.arrival_rate,
            "max_num_seqs": settings.max_num_seqs,
            "num_gpu_blocks": settings.num_gpu_blocks,
            "admission_window": settings.window_choice(),
            "quick": settings.quick,
        },
        "phases": phases,
    }
    compared = _ratios(reports)
    controller = next((r for r in reports if r.label == "controller"), None)
    if controller is not None and controller.retention is not None:
        result["retention_decisions"] = dict(controller.retention)
    figures = _cache(reports)
    if figures:
        result["cache"] = {
            kind: {**asdict(f), "not_recomputed": f.not_recomputed} for kind, f in figures.items()
        }
    if compared:
        result["speedup"] = {kind: _clean_value(r.e2e_mean) for kind, r in compared.items()}
        result["ratios"] = {kind: _clean(asdict(r)) for kind, r in compared.items()}
    return result


def _clean(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _clean_value(v) for k, v in data.items()}


def _clean_value(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value
