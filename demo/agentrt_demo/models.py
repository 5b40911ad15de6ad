"""The demo's several-models case (``agentrt demo --models``): which engine serves which model,
where each model's calls went, and what the controller's process table held.

One emulated engine per model in turn (:func:`agentrt_demo.cluster.run_engines`); the first
model is the **planner** (every call that names no other model), the second the small
**verifier / summariser** that the ReAct agents check their answers with and the map-reduce
agents summarise their chunks with (:mod:`agentrt_demo.agents`). The figures here show that the
controller sent every call to an engine of its model — read from the engines themselves: each
counts the requests it ran and the ones it refused as naming a model it does not serve
(``agentrt_engine_unserved_model_requests_total``) — and that a program using both models
stayed one entry of the controller's process table (``GET /agentrt/v1/programs``, sampled
while the phase runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
import httpx

from agentrt_demo.analysis import ProgramRecord
from agentrt_demo.settings import DemoSettings

__all__ = [
    "EngineCalls",
    "ModelFigures",
    "ProcessTableSample",
    "backend_models",
    "engine_models",
    "model_figures",
    "model_lines",
    "sample_process_table",
    "scrape_engine_calls",
]

_REQUESTS = "vllm:request_success_total"
_UNSERVED = "agentrt_engine_unserved_model_requests_total"
#: How often the process table is read while the controller phase runs (wall seconds).
_SAMPLE_EVERY_S = 0.25


def engine_models(settings: DemoSettings, urls: Sequence[str]) -> dict[str, str]:
    """Engine URL → the model it serves (engine ``i`` of a group serves ``models[i % n]``, as
    :func:`agentrt_demo.cluster.run_engines` starts them); empty without ``settings.models``."""
    models = settings.models
    return {url: models[i % len(models)] for i, url in enumerate(urls)} if models else {}


@dataclass(frozen=True, slots=True)
class EngineCalls:
    """One engine's requests over a phase (from its ``/metrics``)."""

    url: str
    #: The model it serves.
    model: str
    #: Requests it ran to the end (``vllm:request_success_total``).
    requests: int
    #: Requests it refused because they named another model.
    unserved_model: int


async def scrape_engine_calls(served: Mapping[str, str]) -> list[EngineCalls]:
    """Each engine's :class:`EngineCalls` (``served``: URL → model); raises
    :class:`agentrt_demo.cluster.DemoError` when one cannot be scraped."""
    from agentrt_controller.backends.prometheus_text import sum_samples
    from agentrt_demo.cluster import DemoError

    out: list[EngineCalls] = []
    async with httpx.AsyncClient(timeout=10.0) as http:
        for url, model in served.items():
            try:
                response = await http.get(url + "/metrics")
                response.raise_for_status()
            except httpx.HTTPError as exc:
                raise DemoError(f"cannot read {url}/metrics: {exc}") from exc
            samples = sum_samples(response.text, (_REQUESTS, _UNSERVED))
            out.append(
                EngineCalls(
                    url, model, int(samples.get(_REQUESTS, 0)), int(samples.get(_UNSERVED, 0))
                )
            )
    return out


@dataclass(slots=True)
class ProcessTableSample:
    """What the controller's process table held over a phase, sampled."""

    #: Readings taken.
    readings: int = 0
    #: Program id → the backend ids its entry had calls admitted to (union over readings).
    backends: dict[str, set[str]] = field(default_factory=dict)
    #: Most entries one program id had in one reading (1 unless a program were split).
    max_entries_per_program: int = 0

    def add(self, entries: Iterable[Mapping[str, object]]) -> None:
        """Count one reading's ``entries`` (the listing's JSON objects)."""
        self.readings += 1
        seen: dict[str, int] = {}
        for entry in entries:
            program_id = str(entry.get("program_id"))
            seen[program_id] = seen.get(program_id, 0) + 1
            backends = entry.get("backends")
            if isinstance(backends, dict):
                self.backends.setdefault(program_id, set()).update(str(b) for b in backends)
        self.max_entries_per_program = max(self.max_entries_per_program, *seen.values(), 0)


async def sample_process_table(controller_url: str, sample: ProcessTableSample) -> None:
    """Read ``GET /agentrt/v1/programs`` into ``sample`` every 0.25 s until cancelled; a failed
    reading is skipped (the figures then rest on fewer readings)."""
    async with httpx.AsyncClient(timeout=5.0) as http:
        while True:
            try:
                response = await http.get(controller_url + "/agentrt/v1/programs")
                response.raise_for_status()
                entries = response.json().get("entries", [])
                if isinstance(entries, list):
                    sample.add(e for e in entries if isinstance(e, dict))
            except (httpx.HTTPError, ValueError, AttributeError):
                pass
            await anyio.sleep(_SAMPLE_EVERY_S)


async def backend_models(controller_url: str) -> dict[str, str]:
    """The controller's backend id → the model it found its engine serving (its backend
    listing's ``models``, discovered from each engine's ``/v1/models``); empty when the
    listing cannot be read."""
    async with httpx.AsyncClient(timeout=10.0) as http:
        try:
            response = await http.get(controller_url + "/agentrt/v1/backends")
            response.raise_for_status()
            listed = response.json()["backends"]
            return {
                str(b["backend_id"]): ",".join(str(m) for m in b.get("models") or ())
                for b in listed
            }
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
            return {}


@dataclass(frozen=True, slots=True)
class ModelFigures:
    """Where one phase's calls went, per model."""

    #: LLM calls the programs sent, by the model they named (from their spans).
    sent: dict[str, int]
    #: Calls answered with an error, by model.
    failed: dict[str, int]
    engines: list[EngineCalls]
    #: Programs whose calls named two or more models (from their spans).
    programs_using_both: int = 0
    #: Controller phase: programs whose one process-table entry had calls on engines of two
    #: or more models; None in the direct phase (no controller) or when not sampled.
    two_model_programs: int | None = None
    #: Controller phase: most entries one program id held in one reading of the table.
    max_entries_per_program: int | None = None
    #: Controller phase: readings of the process table taken.
    readings: int = 0

    @property
    def wrong_routes(self) -> int:
        """Requests an engine refused because it does not serve their model."""
        return sum(e.unserved_model for e in self.engines)


def model_figures(
    programs: Sequence[ProgramRecord],
    engines: list[EngineCalls],
    table: ProcessTableSample | None = None,
    backend_model: Mapping[str, str] | None = None,
) -> ModelFigures:
    """The phase's :class:`ModelFigures` from its programs' spans, its engines' counts and
    (controller phase) the process-table sample with the backend id → model map."""
    sent: dict[str, int] = {}
    failed: dict[str, int] = {}
    using_both = 0
    for program in programs:
        named = set()
        for node in program.nodes:
            if node.kind != "llm":
                continue
            named.add(node.name)
            sent[node.name] = sent.get(node.name, 0) + 1
            if node.error:
                failed[node.name] = failed.get(node.name, 0) + 1
        using_both += len(named) >= 2
    if table is None:
        return ModelFigures(sent, failed, engines, using_both)
    to_model = backend_model or {}
    two_model = sum(
        1
        for backends in table.backends.values()
        if len({to_model.get(b, b) for b in backends}) >= 2
    )
    return ModelFigures(
        sent, failed, engines, using_both, two_model, table.max_entries_per_program, table.readings
    )


def model_lines(label: str, figures: ModelFigures) -> list[str]:
    """The summary's lines for one phase's models."""
    lines: list[str] = []
    for model in sorted({e.model for e in figures.engines} | set(figures.sent)):
        engines = [e for e in figures.engines if e.model == model]
        ran = ", ".join(f"{e.requests} on :{e.url.rsplit(':', 1)[-1]}" for e in engines)
        failed = figures.failed.get(model, 0)
        lines.append(
            f"{label}: {model}: {figures.sent.get(model, 0)} calls sent"
            + (f" ({failed} failed)" if failed else "")
            + f"; its engines ran {ran or 'none'}"
        )
    lines.append(
        f"{label}: calls that reached an engine not serving their model: {figures.wrong_routes} "
        "(the engines' agentrt_engine_unserved_model_requests_total)"
    )
    if figures.two_model_programs is not None:
        lines.append(
            f"{label}: {figures.programs_using_both} programs called both models; "
            f"{figures.two_model_programs} were seen in the process table as one entry with "
            f"calls on both models' engines (at most {figures.max_entries_per_program} entry "
            f"per program in {figures.readings} readings of GET /agentrt/v1/programs)"
        )
    return lines
