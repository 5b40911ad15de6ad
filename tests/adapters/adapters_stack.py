"""What the adapter tests run against: a real engine emulator behind a real controller on
loopback, a runtime talking to it, and a watcher of the controller's process table.

(A plain module, not a conftest: this test folder shares its name with the ``adapters``
package, so it is not a package itself and its module names are kept unique.)"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentrt import Runtime, RuntimeConfig
from controller.backends.spec import BackendSpec
from controller.service import ControllerConfig, serve_controller
from emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine

#: The scripted model's calls take ~ms at this speed-up; the tests wait on tools, not on it.
TIME_SCALE = 200.0


@dataclass
class Stack:
    """A controller (``url``) in front of one emulated engine, and an open runtime on it."""

    url: str
    runtime: Runtime
    http: httpx.AsyncClient

    async def programs(self) -> list[dict[str, Any]]:
        """The controller's process table entries."""
        response = await self.http.get(self.url + "/agentrt/v1/programs")
        response.raise_for_status()
        entries: list[dict[str, Any]] = response.json()["entries"]
        return entries

    async def wait_for_entry(
        self, matches: Callable[[dict[str, Any]], bool], timeout_s: float = 20.0
    ) -> dict[str, Any]:
        """Poll the process table until an entry ``matches``; returns it."""
        with anyio.fail_after(timeout_s):
            while True:
                for entry in await self.programs():
                    if matches(entry):
                        return entry
                await anyio.sleep(0.01)


@contextlib.asynccontextmanager
async def running_stack(**runtime_options: Any) -> AsyncIterator[Stack]:
    """The stack; ``runtime_options`` are more ``RuntimeConfig`` fields."""
    emulator = EmulatorConfig(time_scale=TIME_SCALE)
    async with serve_engine(emulator) as engine:
        config = ControllerConfig(
            port=0, backends=(BackendSpec(engine.base_url),), scrape_interval_s=0.2
        )
        async with serve_controller(config) as url:
            runtime_config = RuntimeConfig(
                base_url=url + "/v1",
                model=DEFAULT_MODEL_NAME,
                controller="required",
                **runtime_options,
            )
            async with Runtime(runtime_config) as rt, httpx.AsyncClient(timeout=10) as http:
                yield Stack(url, rt, http)


def tool_waiting(program_id: str, tool_name: str) -> Callable[[dict[str, Any]], bool]:
    """Matches the process table entry of ``program_id`` while it waits on ``tool_name``."""

    def matches(entry: dict[str, Any]) -> bool:
        return entry["program_id"] == program_id and any(
            w["tool_name"] == tool_name and w["kind"] == "tool" for w in entry["tool_waits"]
        )

    return matches


def span_tree(exporter: InMemorySpanExporter) -> list[tuple[str, str]]:
    """(span name, parent span name) of the finished spans, in end order; all spans must be
    in one trace."""
    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1, "spans in more than one trace"
    names = {s.context.span_id: s.name for s in spans}
    return [(s.name, names.get(s.parent.span_id, "?") if s.parent else "") for s in spans]


def recording_tracer() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter
