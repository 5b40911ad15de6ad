"""One phase of the demo: the planned programs arrive over time and run against one set of
endpoints, with every span captured in memory.

* **controller** phase: one ``Runtime`` whose ``base_url`` is the controller
  (``controller="required"``: program and tool-wait events are sent);
* **direct** phase: one ``Runtime`` per engine (``controller="off"``); program ``i`` (in
  arrival order) runs on engine ``i mod engines`` — round-robin, and sticky per program so its
  prefix cache works (the engines' loads can drift apart: docs/demo.md).

A program that fails or passes its deadline is recorded with its status; the phase goes on.
Past ``phase_budget_s`` the programs still running are cancelled (status ``unfinished``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Literal

import anyio
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentrt
from agentrt.errors import DeadlineExceeded
from agentrt_demo.agents import AgentContext, AgentFn
from agentrt_demo.progress import ProgressSink
from agentrt_demo.settings import DemoSettings
from agentrt_demo.workload import ProgramSpec

__all__ = [
    "ATTR_DEMO_INDEX",
    "ATTR_DEMO_KIND",
    "ATTR_DEMO_PHASE",
    "PhaseCapture",
    "PhaseLabel",
    "PhaseOutcome",
    "ProgramOutcome",
    "run_phase",
]

#: Attributes the demo adds to each program span (the timeline and the table read them).
ATTR_DEMO_KIND = "agentrt.demo.kind"
ATTR_DEMO_INDEX = "agentrt.demo.index"
ATTR_DEMO_PHASE = "agentrt.demo.phase"

PhaseLabel = Literal["controller", "direct"]


class PhaseCapture:
    """A tracer provider whose finished spans are kept in memory (one per phase; the
    controller of the phase gets it too, so its server spans join the programs' traces)."""

    def __init__(self, label: str) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": "agentrt-demo", ATTR_DEMO_PHASE: label})
        )
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def shutdown(self) -> None:
        self.provider.shutdown()


@dataclass(slots=True)
class ProgramOutcome:
    spec: ProgramSpec
    #: ``ok``, ``error``, ``deadline`` (passed its deadline), ``unfinished`` (phase budget).
    status: str = "unfinished"
    #: ``Type: message`` of the error, for ``error``.
    error: str = ""


@dataclass(slots=True)
class PhaseOutcome:
    label: str
    outcomes: list[ProgramOutcome]
    #: Wall seconds from the first arrival to the last program's end.
    wall_s: float
    #: True when the phase budget cut the phase short.
    cut_short: bool = False
    #: The machine's 1-minute load average (runnable processes) at the phase's start and end:
    #: on a busy machine the emulated engines run slower, and the comparison gets noisier.
    load_average: tuple[float, float] = (0.0, 0.0)


async def run_phase(
    label: PhaseLabel,
    settings: DemoSettings,
    specs: list[ProgramSpec],
    agents: dict[str, AgentFn],
    base_urls: list[str],
    model: str,
    capture: PhaseCapture,
    progress: ProgressSink,
    small_model: str | None = None,
    small_urls: Sequence[str] = (),
) -> PhaseOutcome:
    """Run ``specs`` against ``base_urls`` (one controller URL, or the engines' URLs) with
    ``model`` as the runtimes' model. ``small_model``: the small verifier / summariser the
    agents also call (several models); ``small_urls``: the engines serving it when no
    controller routes (the direct phase: program ``i`` sends its small-model calls to
    ``small_urls[i mod n]``), empty to send them with the rest."""
    outcomes = [ProgramOutcome(spec) for spec in specs]
    progress.phase_started(label, specs)
    started = time.monotonic()
    load_before = _load_average()
    cut_short = False
    try:
        async with AsyncExitStack() as stack:
            runtimes: list[agentrt.Runtime] = []
            small_runtimes: list[agentrt.Runtime] = []
            targets = [(url, model, runtimes) for url in base_urls]
            targets += [(url, small_model or model, small_runtimes) for url in small_urls]
            for url, url_model, group in targets:
                config = agentrt.RuntimeConfig(
                    base_url=url + "/v1",
                    model=url_model,
                    controller="required" if label == "controller" else "off",
                    tracer_provider=capture.provider,
                    request_timeout_s=settings.wall_s(settings.program_timeout_s) + 30.0,
                    # A busy machine can make the controller slow to answer an event; a
                    # program must not fail for that (default 2 s). 10 s was not enough at a
                    # load average of 15 on two cores (a tool-end event timed out).
                    event_timeout_s=30.0,
                )
                group.append(await stack.enter_async_context(agentrt.Runtime(config)))
            with anyio.move_on_after(settings.phase_budget_s) as budget:
                async with anyio.create_task_group() as tasks:
                    t0 = anyio.current_time()
                    for outcome in outcomes:
                        await anyio.sleep_until(t0 + settings.wall_s(outcome.spec.arrival_s))
                        index = outcome.spec.index
                        context = AgentContext(
                            outcome.spec,
                            runtimes[index % len(runtimes)],
                            settings.time_scale,
                            small_model,
                            small_runtimes[index % len(small_runtimes)] if small_runtimes else None,
                        )
                        tasks.start_soon(
                            _run_program, label, settings, context, agents, outcome, progress
                        )
            cut_short = budget.cancelled_caught
    finally:
        progress.phase_finished()
    wall_s = time.monotonic() - started
    return PhaseOutcome(label, outcomes, wall_s, cut_short, (load_before, _load_average()))


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform
        return math.nan


async def _run_program(
    label: str,
    settings: DemoSettings,
    context: AgentContext,
    agents: dict[str, AgentFn],
    outcome: ProgramOutcome,
    progress: ProgressSink,
) -> None:
    spec, runtime = outcome.spec, context.runtime
    progress.program_started(spec)
    try:
        async with runtime.program(
            spec.name,
            timeout_s=settings.wall_s(settings.program_timeout_s),
            operation="invoke_agent" if spec.kind != "map_reduce" else "invoke_workflow",
        ):
            trace.get_current_span().set_attributes(
                {ATTR_DEMO_KIND: spec.kind, ATTR_DEMO_INDEX: spec.index, ATTR_DEMO_PHASE: label}
            )
            await agents[spec.kind](context)
        outcome.status = "ok"
    except DeadlineExceeded:
        outcome.status = "deadline"
    except Exception as exc:  # one failed program must not stop the demo: it is reported
        outcome.status = "error"
        outcome.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        progress.program_finished(spec, outcome.status)
