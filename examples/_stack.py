"""Plumbing of the framework examples: an embedded engine emulator *behind a controller*, and a
watcher that samples the controller's process table while the agent runs.

Without ``--base-url`` an engine emulator and an agentrt controller are started in-process on
loopback (the controller is what keeps the process table); with ``--base-url`` the example
talks to that server — our controller shows its process table, a plain OpenAI-compatible
server (vLLM) has none, and the example says so.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import _common
import anyio
import httpx

from agentrt import Runtime, RuntimeConfig
from agentrt_adapters import AgentRun

#: How often the watcher samples the process table (seconds).
POLL_S = 0.02


@asynccontextmanager
async def stack(args: argparse.Namespace) -> AsyncIterator[_common.Endpoint]:
    """``--base-url``, or an emulated engine behind an embedded controller."""
    if args.base_url:
        yield _common.Endpoint(args.base_url, await _common.model_for(args), embedded=False)
        return
    from agentrt_controller.backends.spec import BackendSpec
    from agentrt_controller.service import ControllerConfig, serve_controller
    from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine

    async with serve_engine(EmulatorConfig(time_scale=args.time_scale)) as engine:
        config = ControllerConfig(
            port=0, policy="atlas", backends=(BackendSpec(engine.base_url, priority=True),)
        )
        async with serve_controller(config) as url:
            yield _common.Endpoint(url + "/v1", args.model or DEFAULT_MODEL_NAME, embedded=True)


async def run_watched(
    args: argparse.Namespace, run_agent: Callable[[Runtime], Awaitable[AgentRun]]
) -> int:
    """Run one framework agent (``run_agent(rt)``) against :func:`stack`, sample the process
    table while it runs, then print the run, what the table showed, the answer and the DAG.

    Returns the process exit status (0)."""
    telemetry = _common.telemetry_for(args)
    async with stack(args) as where:
        config = _common.runtime_config(args, where, telemetry)
        watcher = ProcessTableWatcher(config)
        async with Runtime(config) as rt, anyio.create_task_group() as group:
            group.start_soon(watcher.run)
            try:
                run = await run_agent(rt)
            finally:
                watcher.stop()
    program = run.program
    print(
        f"program {program.id}: {program.status}, {run.llm_calls} LLM calls, "
        f"{run.tool_calls} tool calls ({run.stop_reason})"
    )
    print(watcher.report(program.id))
    print(f"answer: {(run.answer or '(none)')[:300]}")
    print("DAG (mermaid):")
    print(program.to_mermaid())
    return _common.finish(where, telemetry)


@dataclass
class Sighting:
    """What the process table showed about one program while it ran."""

    name: str
    #: Most LLM calls seen finished at once.
    calls_finished: int = 0
    #: Threads seen (thread id → calls).
    threads: dict[str, int] = field(default_factory=dict)
    #: Tool waits seen: (tool name, thread id, node id).
    tool_waits: set[tuple[str, str, str]] = field(default_factory=set)


class ProcessTableWatcher:
    """Samples ``GET /agentrt/v1/programs`` until :meth:`stop`; ``available`` is False when
    the server has no process table (not an agentrt controller)."""

    def __init__(self, config: RuntimeConfig) -> None:
        self._url = config.events_url + "/agentrt/v1/programs"
        self._auth = {"authorization": f"Bearer {config.api_key}"}
        self._done = anyio.Event()
        self.available = True
        self.seen: dict[str, Sighting] = {}

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=5, headers=self._auth) as http:
            while not self._done.is_set():
                try:
                    response = await http.get(self._url)
                except httpx.HTTPError:
                    self.available = False
                    return
                if response.status_code != 200:
                    self.available = False
                    return
                for entry in response.json().get("entries", []):
                    self._note(entry)
                with anyio.move_on_after(POLL_S):
                    await self._done.wait()

    def stop(self) -> None:
        self._done.set()

    def _note(self, entry: dict[str, Any]) -> None:
        sighting = self.seen.setdefault(entry["program_id"], Sighting(entry.get("name", "")))
        sighting.calls_finished = max(sighting.calls_finished, entry["calls_finished"])
        for thread, calls in entry.get("threads", {}).items():
            sighting.threads[thread] = max(sighting.threads.get(thread, 0), calls)
        for wait in entry.get("tool_waits", []):
            sighting.tool_waits.add((wait["tool_name"], wait["thread_id"], wait["node_id"]))

    def report(self, program_id: str) -> str:
        """Lines describing what the table showed about ``program_id``."""
        if not self.available:
            return "process table: none here (not an agentrt controller)"
        sighting = self.seen.get(program_id)
        if sighting is None:
            return f"process table: program {program_id} was not seen"
        lines = [
            f"process table: program {program_id} ({sighting.name}), "
            f"{sighting.calls_finished} LLM calls charged, threads {sorted(sighting.threads)}"
        ]
        for tool, thread, node in sorted(sighting.tool_waits, key=lambda w: w[2]):
            lines.append(f"  tool wait: {tool} (thread {thread}, node {node})")
        if not sighting.tool_waits:
            lines.append("  no tool wait seen (the model called no tool)")
        return "\n".join(lines)


async def slow_search(query: str) -> str:
    """Search the team's archive (a remote service: takes a moment).

    Args:
        query: what to look for
    """
    await anyio.sleep(0.4)
    return f"archive: 3 notes about {query[:40]!r}; the newest says the answer is 42"
