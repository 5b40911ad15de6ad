"""The whole ``agentrt demo`` run: controller phase, direct phase, summary, files.

1. **controller**: ``engines`` fresh emulated engines (FCFS, as a stock vLLM; priority
   scheduling with ``--priority on``) and a controller in front of them running the product
   defaults unless options chose otherwise; the planned programs arrive over time and run
   through the controller.
2. **direct** (unless ``--no-direct``): fresh FCFS engines again (cold caches), no
   controller; the same programs, each bound to one engine round-robin.
3. The summary table (stdout and ``summary.txt`` / ``summary.json``), the spans of each phase
   (``trace-<phase>.jsonl``, OTLP-JSON lines) and the timeline (``timeline.html`` /
   ``timeline.png``) in the output directory.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

import anyio
import anyio.to_thread

from agentrt_demo.agents import AgentFn, base_agents
from agentrt_demo.analysis import ProgramRecord, programs_from_spans
from agentrt_demo.cluster import (
    CpuTimes,
    EngineMetrics,
    backend_kinds,
    controller_setup,
    retention_decisions,
    run_controller,
    run_engines,
    scrape_engines,
    since,
)
from agentrt_demo.frameworks import FrameworkAgents, framework_agents
from agentrt_demo.models import (
    ProcessTableSample,
    backend_models,
    engine_models,
    model_figures,
    sample_process_table,
    scrape_engine_calls,
)
from agentrt_demo.progress import ProgressSink, make_progress
from agentrt_demo.report import PhaseReport, render_summary, summary_json
from agentrt_demo.runner import PhaseCapture, PhaseLabel, PhaseOutcome, run_phase
from agentrt_demo.settings import DemoSettings
from agentrt_demo.timeline import TimelineSection, build_sections, write_timeline
from agentrt_demo.traces import SpanRecord, read_trace, records_from_sdk, write_trace
from agentrt_demo.workload import ProgramSpec, plan_programs

__all__ = ["DemoResult", "run_demo"]


@dataclass(slots=True)
class DemoResult:
    """What a run produced (the CLI prints it; tests inspect it)."""

    phases: list[PhaseReport]
    files: list[Path]
    #: Base URLs of every server the run started (all stopped when it returns).
    endpoints: list[str]
    wall_s: float
    #: Exit status: 0, or 1 when a program failed with an error.
    status: int


async def run_demo(settings: DemoSettings, out: TextIO = sys.stdout) -> DemoResult:
    """Run the demo; print the summary to ``out``. Raises ``ConfigError`` for a controller
    option it does not know, ``DemoError`` when a server cannot start or fails."""
    started = time.monotonic()
    # A bad controller option fails now, before any server starts.
    controller_setup(settings, [f"http://127.0.0.1:{1 + i}" for i in range(settings.engines)])
    agents: dict[str, AgentFn] = dict(base_agents())
    frameworks = framework_agents() if settings.frameworks else FrameworkAgents()
    agents.update((str(kind), fn) for kind, fn in frameworks.agents.items())
    specs = plan_programs(settings, tuple(frameworks.agents))
    await anyio.Path(settings.out_dir).mkdir(parents=True, exist_ok=True)
    models = (
        f" serving {', '.join(settings.models)} (one engine per model in turn)"
        if settings.models
        else ""
    )
    _say(
        f"agentrt demo: {len(specs)} programs per phase, {settings.engines} engines{models}, "
        f"time scale {settings.time_scale:g}, seed {settings.seed}, output in {settings.out_dir}/"
    )
    for note in frameworks.notes:
        _say(f"  {note}")
    if frameworks.agents:
        from agentrt_demo.framework_agents import import_frameworks

        await anyio.to_thread.run_sync(import_frameworks, [str(k) for k in frameworks.agents])
    run = _Run(settings, specs, agents, make_progress(settings.progress))
    policies: dict[str, Literal["fcfs", "priority"]] = {
        "controller": "priority" if settings.priority else "fcfs"
    }
    if settings.direct:
        policies["direct"] = "fcfs"
    # Both phases' engines start at once (start-up is slow on a busy machine); the direct
    # phase's engines get no request, so their caches stay cold, until their phase.
    async with run_engines(settings, policies, run.log_dir) as urls:
        run.endpoints += [url for group in urls.values() for url in group]
        await run.controller_phase(urls["controller"])
        if settings.direct:
            await run.direct_phase(urls["direct"])
    files = await anyio.to_thread.run_sync(run.write_outputs, out)
    for path in files:
        _say(f"wrote {path}")
    failed = any(o.status == "error" for r in run.reports for o in r.outcome.outcomes)
    wall_s = time.monotonic() - started
    return DemoResult(run.reports, files, run.endpoints, wall_s, 1 if failed else 0)


class _Run:
    """The phases of one run and what they produced."""

    def __init__(
        self,
        settings: DemoSettings,
        specs: list[ProgramSpec],
        agents: dict[str, AgentFn],
        progress: ProgressSink,
    ) -> None:
        self.settings = settings
        self.specs = specs
        self.agents = agents
        self.progress = progress
        self.log_dir = settings.out_dir / "logs"
        self.reports: list[PhaseReport] = []
        self.endpoints: list[str] = []
        self._records: dict[str, list[SpanRecord]] = {}

    async def controller_phase(self, engine_urls: list[str]) -> None:
        setup = controller_setup(self.settings, engine_urls)
        _say(f"controller phase: {setup.describe()}")
        capture = PhaseCapture("controller")
        server_spans = self.log_dir / "controller-spans.jsonl"
        table = ProcessTableSample() if self.settings.models else None
        async with run_controller(setup, self.log_dir, server_spans) as controller:
            self.endpoints.append(controller.url)
            kinds = await backend_kinds(controller.url)
            _say(f"controller phase: backends detected as {', '.join(kinds)}")
            served = await backend_models(controller.url) if table is not None else {}
            before = controller.cpu_times()
            async with anyio.create_task_group() as sampler:
                if table is not None:
                    sampler.start_soon(sample_process_table, controller.url, table)
                outcome = await self._run("controller", [controller.url], capture)
                sampler.cancel_scope.cancel()
            cpu = since(before, controller.cpu_times())
            retention = await retention_decisions(controller.url)
        metrics = await scrape_engines(engine_urls)
        extra = await anyio.to_thread.run_sync(_read_if_there, server_spans)
        described = f"{setup.describe()}, backends {'/'.join(sorted(set(kinds)))}"
        self._finish(outcome, capture, metrics, described, extra, cpu)
        report = self.reports[-1]
        report.retention = retention
        if table is not None:
            calls = await scrape_engine_calls(engine_models(self.settings, engine_urls))
            report.models = model_figures(report.programs, calls, table, served)

    async def direct_phase(self, engine_urls: list[str]) -> None:
        _say("direct phase: fresh FCFS engines, no controller, programs round-robin")
        capture = PhaseCapture("direct")
        served = engine_models(self.settings, engine_urls)
        if served:  # each model's calls to its own engines: the client picks, by model
            planner, small = self._models()
            urls = [url for url, model in served.items() if model == planner]
            small_urls = [url for url, model in served.items() if model == small]
            outcome = await self._run("direct", urls, capture, small_urls)
        else:
            outcome = await self._run("direct", engine_urls, capture)
        metrics = await scrape_engines(engine_urls)
        self._finish(outcome, capture, metrics, "FCFS engines, no controller", [])
        if served:
            report = self.reports[-1]
            report.models = model_figures(report.programs, await scrape_engine_calls(served))

    def _models(self) -> tuple[str, str | None]:
        """The planner (the runtimes' model) and the small model (None: only one model)."""
        from agentrt_emulator.server.config import DEFAULT_MODEL_NAME

        models = self.settings.models
        if not models:
            return DEFAULT_MODEL_NAME, None
        return models[0], models[1] if len(models) > 1 else None

    async def _run(
        self,
        label: PhaseLabel,
        urls: list[str],
        capture: PhaseCapture,
        small_urls: Sequence[str] = (),
    ) -> PhaseOutcome:
        planner, small = self._models()
        return await run_phase(
            label,
            self.settings,
            self.specs,
            self.agents,
            urls,
            planner,
            capture,
            self.progress,
            small,
            small_urls,
        )

    def _finish(
        self,
        outcome: PhaseOutcome,
        capture: PhaseCapture,
        metrics: EngineMetrics,
        setup: str,
        extra: Sequence[SpanRecord],
        controller_cpu: CpuTimes | None = None,
    ) -> None:
        records = records_from_sdk(capture.spans()) + list(extra)
        records.sort(key=lambda r: r.start_ns)
        capture.shutdown()
        self._records[outcome.label] = records
        programs: list[ProgramRecord] = programs_from_spans(records)
        self.reports.append(
            PhaseReport(outcome.label, setup, outcome, programs, metrics, controller_cpu)
        )

    def write_outputs(self, out: TextIO) -> list[Path]:
        """Print the summary; write traces, timelines and the summary files (blocking I/O:
        runs in a worker thread)."""
        out_dir, settings = self.settings.out_dir, self.settings
        files: list[Path] = []
        for label, records in self._records.items():
            path = out_dir / f"trace-{label}.jsonl"
            write_trace(path, records)
            files.append(path)
        sections = build_sections([TimelineSection(r.label, r.programs) for r in self.reports])
        for fmt in settings.timeline_formats:
            path = out_dir / f"timeline.{fmt}"
            write_timeline(path, sections, fmt, title=_title(settings))
            files.append(path)
        text = render_summary(self.reports, settings)
        out.write(text)
        out.flush()
        summary_txt, summary = out_dir / "summary.txt", out_dir / "summary.json"
        summary_txt.write_text(text, encoding="utf-8")
        document = summary_json(self.reports, settings)
        summary.write_text(json.dumps(document, indent=2), encoding="utf-8")
        return [*files, summary_txt, summary]


def _read_if_there(path: Path) -> list[SpanRecord]:
    return read_trace(path) if path.exists() else []


def _title(settings: DemoSettings) -> str:
    return (
        f"agentrt demo — policy {settings.policy or 'default'}, {settings.engines} engines, "
        f"seed {settings.seed}, time scale {settings.time_scale:g}"
    )


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
