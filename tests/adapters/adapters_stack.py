"""What the adapter tests run against: a real engine emulator behind a real controller on
loopback, a runtime talking to it, and a watcher of the controller's process table; and the
plain tools both frameworks' tests give their agents.

(A plain module, not a conftest: this test folder shares its name with the ``adapters``
package, so it is not a package itself and its module names are kept unique.)"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentrt import DeadlineExceeded, IdempotencyKey, Program, Runtime, RuntimeConfig, Tool, tool
from agentrt.errors import JournalUnavailable
from agentrt.fasthttp import FastHTTPTransport
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_emulator.server import (
    DEFAULT_MODEL_NAME,
    EmulatorConfig,
    RunningEmulator,
    serve_engine,
)

#: The scripted model's calls take ~ms at this speed-up; the tests wait on tools, not on it.
TIME_SCALE = 200.0

#: Program deadline (seconds) of the tests in which the deadline must find work under way: a
#: call in flight at the emulator (a 4000-token answer at a modelled GPU's speed runs far
#: longer) or a hanging tool after one short call. A loaded CI machine can take over half a
#: second to get a call through the SDK, the controller and into the emulator, and a call
#: the deadline finds unsent is cancelled without the emulator ever seeing it.
DEADLINE_S = 3.0


@dataclass
class Stack:
    """A controller (``url``) in front of one emulated engine, and an open runtime on it."""

    url: str
    runtime: Runtime
    http: httpx.AsyncClient
    #: The emulated engine behind the controller (``engine.state.driver.metrics.aborted``
    #: counts the requests whose client left).
    engine: RunningEmulator

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
async def running_stack(
    *, time_scale: float = TIME_SCALE, **runtime_options: Any
) -> AsyncIterator[Stack]:
    """The stack; ``time_scale``: the emulator's speed-up (1.0: a modelled GPU's real speed,
    for calls that must still run when something happens); ``runtime_options`` are more
    ``RuntimeConfig`` fields (``model`` defaults to the emulator's; None: discovered)."""
    emulator = EmulatorConfig(time_scale=time_scale)
    async with serve_engine(emulator) as engine:
        config = ControllerConfig(
            port=0, backends=(BackendSpec(engine.base_url),), scrape_interval_s=0.2
        )
        async with serve_controller(config) as url:
            runtime_options.setdefault("model", DEFAULT_MODEL_NAME)
            runtime_config = RuntimeConfig(
                base_url=url + "/v1", controller="required", **runtime_options
            )
            async with Runtime(runtime_config) as rt, httpx.AsyncClient(timeout=10) as http:
                yield Stack(url, rt, http, engine)


class HeaderLog(httpx.AsyncBaseTransport):
    """A transport for ``RuntimeConfig.http_transport`` (under the runtime's stack): keeps the
    headers of every LLM request the runtime sends, after tagging."""

    def __init__(self) -> None:
        self.inner = FastHTTPTransport()
        self.llm_headers: list[httpx.Headers] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions"):
            self.llm_headers.append(request.headers.copy())
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def blocking_lookup(released: anyio.Event) -> Callable[[str], Awaitable[str]]:
    """A ``lookup`` tool that answers only once ``released`` is set (so the test can see its
    wait in the process table first)."""

    async def lookup(topic: str) -> str:
        """Look a topic up in the archive.

        Args:
            topic: what to look up
        """
        await released.wait()
        return f"{topic}: 42"

    return lookup


async def release_when_seen(
    stack: Stack,
    matches: Callable[[dict[str, Any]], bool],
    released: anyio.Event,
    seen: dict[str, Any],
) -> None:
    """Wait until a process table entry ``matches`` (:func:`tool_waiting`,
    :func:`tools_waiting`), keep it in ``seen["entry"]``, then set ``released``."""
    seen["entry"] = await stack.wait_for_entry(matches)
    released.set()


async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    return a + b


def tool_waiting(program_id: str, tool_name: str) -> Callable[[dict[str, Any]], bool]:
    """Matches the process table entry of ``program_id`` while it waits on ``tool_name``."""

    def matches(entry: dict[str, Any]) -> bool:
        return entry["program_id"] == program_id and any(
            w["tool_name"] == tool_name and w["kind"] == "tool" for w in entry["tool_waits"]
        )

    return matches


def tools_waiting(program_id: str, count: int) -> Callable[[dict[str, Any]], bool]:
    """Matches the process table entry of ``program_id`` while ``count`` tools wait at once."""

    def matches(entry: dict[str, Any]) -> bool:
        return entry["program_id"] == program_id and len(entry["tool_waits"]) == count

    return matches


def check_first_tool_wait(entry: dict[str, Any], *, name: str, session_id: str) -> None:
    """Assert what the process table ``entry`` of a program seen while its first tool ran
    shows: its name and session, its first LLM call already charged to it on thread ``main``
    (the call's tags arrived) and one tool wait, at node ``main:1``."""
    assert entry["name"] == name and entry["session_id"] == session_id, entry
    assert entry["calls_finished"] == 1 and entry["threads"] == {"main": 1}, entry
    (wait,) = entry["tool_waits"]
    assert wait["thread_id"] == "main" and wait["node_id"] == "main:1", entry


def check_llm_tool_llm(program: Program) -> list[dict[str, Any]]:
    """Assert that ``program``'s DAG is llm → tool ``lookup`` (with the model's tool call id)
    → llm, all ok; returns its nodes (``to_dict`` form) for more checks."""
    nodes: list[dict[str, Any]] = program.to_dict()["nodes"]
    kinds = [(n["kind"], n["status"]) for n in nodes]
    assert kinds == [("llm", "ok"), ("tool", "ok"), ("llm", "ok")], kinds
    assert nodes[1]["name"] == "lookup" and nodes[1]["tool_call_id"], nodes[1]
    return nodes


def agent_spans(model: str | None, agent: str) -> list[tuple[str, str]]:
    """The :func:`span_tree` of one agent run ``agent`` that called ``lookup`` once between
    two LLM calls: every span a child of the agent's."""
    return [
        (f"chat {model}", f"invoke_agent {agent}"),
        ("execute_tool lookup", f"invoke_agent {agent}"),
        (f"chat {model}", f"invoke_agent {agent}"),
        (f"invoke_agent {agent}", ""),
    ]


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


def gated_pair(gate: anyio.Event) -> list[Callable[[str], Awaitable[str]]]:
    """Two tools, ``lookup`` and ``fetch``, that answer only once ``gate`` is set (to see both
    waiting at once when a model turn calls them together)."""

    async def lookup(topic: str) -> str:
        """Look a topic up in the archive.

        Args:
            topic: what to look up
        """
        await gate.wait()
        return topic

    async def fetch(url: str) -> str:
        """Fetch a page.

        Args:
            url: the page's address
        """
        await gate.wait()
        return url

    return [lookup, fetch]


async def hang(topic: str) -> str:
    """Never answers.

    Args:
        topic: anything
    """
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


def log_writer(target: Path, keys: list[str]) -> Tool[Any]:
    """A side-effecting agentrt tool ``append_line``: appends a line to ``target`` and keeps the
    idempotency key of every run that really happened in ``keys``."""

    @tool(side_effect=True)
    async def append_line(text: str, key: IdempotencyKey) -> str:
        """Append a line to the team's log.

        Args:
            text: the line
        """
        keys.append(key)
        with target.open("a") as handle:
            handle.write("line\n")
        return "appended"

    return append_line


async def lookup(topic: str) -> str:
    """Look a topic up (answers the topic itself).

    Args:
        topic: anything
    """
    return topic


async def wait_for_upstream_abort(stack: Stack) -> None:
    """Wait (at most 10 s) until the emulator counted a request whose client left."""
    with anyio.fail_after(10):
        while stack.engine.state.driver.metrics.aborted < 1:  # noqa: ASYNC110 - a counter
            await anyio.sleep(0.02)


#: Runs one agent whose only tool is the given agentrt tool: ``(stack, tool, program_id)``,
#: the program's id None meaning "inside the current program"; returns the run's program (or
#: anything, when run inside the current program).
ToolAgentRun = Callable[[Stack, Tool[Any], str | None], Awaitable[Any]]


async def check_deadline_cancels_the_call_upstream(
    run_in_program: Callable[[Stack], Awaitable[object]], name: str
) -> None:
    """Inside a program with a ``DEADLINE_S`` deadline, ``run_in_program`` starts a
    4000-token answer at the modelled GPU's own speed: the program ends
    ``deadline_exceeded``, its one LLM node ``cancelled``, and the emulator sees the client
    leave."""
    async with running_stack(time_scale=1.0) as stack:
        with pytest.raises(DeadlineExceeded):
            async with stack.runtime.program(name, timeout_s=DEADLINE_S) as program:
                await run_in_program(stack)
        await wait_for_upstream_abort(stack)
    assert program.status == "deadline_exceeded"
    assert [(n.kind, n.status) for n in program.nodes.values()] == [("llm", "cancelled")]


async def check_hanging_tool_is_cancelled(
    run_in_program: Callable[[Stack], Awaitable[object]], program_id: str
) -> None:
    """Inside a program with a ``DEADLINE_S`` deadline, ``run_in_program`` runs an agent calling
    :func:`hang`: the tool node is cancelled and the controller's table forgets the program."""
    async with running_stack() as stack:
        with pytest.raises(DeadlineExceeded):
            async with stack.runtime.program(
                "hang", program_id=program_id, timeout_s=DEADLINE_S
            ) as p:
                await run_in_program(stack)
        after = await stack.programs()
    assert p.status == "deadline_exceeded"
    assert [(n.kind, n.status) for n in p.nodes.values()] == [("llm", "ok"), ("tool", "cancelled")]
    assert all(e["program_id"] != program_id for e in after)


async def check_side_effect_replayed_on_rerun(
    tmp_path: Path, run: ToolAgentRun, program_id: str
) -> None:
    """``run`` twice with the same program id and a journal: the side effect of
    :func:`log_writer` happens once, the rerun's tool node is ``replayed``, and the model's
    tool call id reached the node."""
    target, keys = tmp_path / "log.txt", []
    append_line = log_writer(target, keys)
    statuses = []
    async with running_stack(journal=str(tmp_path / "journal.sqlite")) as stack:
        for _ in range(2):
            program = await run(stack, append_line, program_id)
            statuses.append([(n.kind, n.status) for n in program.nodes.values()])
    assert target.read_text() == "line\n" and len(keys) == 1
    assert statuses == [
        [("llm", "ok"), ("tool", "ok"), ("llm", "ok")],
        [("llm", "ok"), ("tool", "replayed"), ("llm", "ok")],
    ]
    tool_node = next(n for n in program.nodes.values() if n.kind == "tool")
    assert tool_node.tool_call_id  # the model's call id reached the SDK's node


async def check_side_effect_without_journal_fails(run: ToolAgentRun) -> None:
    """``run`` inside a program with no journal: the side-effecting tool is not run, and the
    run ends with ``JournalUnavailable`` (not handed to the model, which might call the effect
    again); its tool node is ``error``."""
    keys: list[str] = []
    append_line = log_writer(Path("/nonexistent/never-written"), keys)
    async with running_stack() as stack, stack.runtime.program("no-journal") as program:
        with pytest.raises(JournalUnavailable):
            await run(stack, append_line, None)
    assert keys == []
    assert [(n.kind, n.status) for n in program.nodes.values()] == [
        ("llm", "ok"),
        ("tool", "error"),
    ]


async def check_spans_form_one_tree(
    run: Callable[[Stack], Awaitable[object]], agent_name: str
) -> None:
    """``run`` (an agent named ``agent_name`` calling :func:`lookup` once) under a recording
    tracer: its spans form :func:`agent_spans`' tree, the tool span carrying the call id."""
    provider, exporter = recording_tracer()
    async with running_stack(tracer_provider=provider) as stack:
        await run(stack)
    assert span_tree(exporter) == agent_spans(stack.runtime.config.model, agent_name)
    tool_span = exporter.get_finished_spans()[1]
    assert tool_span.attributes is not None and tool_span.attributes["gen_ai.tool.call.id"]


#: Runs an agent whose tool ``lookup`` is :func:`blocking_lookup` of the given gate.
GatedRun = Callable[[Stack, anyio.Event], Awaitable[Any]]


async def check_tool_wait_is_shown(run_in_program: GatedRun, name: str, program_id: str) -> Any:
    """Inside program ``name`` / ``program_id``, ``run_in_program`` runs an agent whose tool
    waits until the process table shows the wait: the wait was shown with the first call
    charged, both calls arrived tagged, the nodes chain llm → tool → llm, and the run (returned
    for more checks) answered in this program."""
    released = anyio.Event()
    seen: dict[str, Any] = {}
    async with running_stack() as stack:
        async with (
            anyio.create_task_group() as group,
            stack.runtime.program(name, program_id=program_id) as program,
        ):
            group.start_soon(
                release_when_seen, stack, tool_waiting(program_id, "lookup"), released, seen
            )
            run = await run_in_program(stack, released)
            entry = await stack.wait_for_entry(lambda e: e["program_id"] == program_id)
        after = await stack.programs()
    # While the tool ran, the process table showed the wait, the first call already charged.
    check_first_tool_wait(seen["entry"], name=name, session_id=stack.runtime.session_id)
    assert seen["entry"]["tool_waits"][0]["tool_name"] == "lookup"
    # Both calls arrived tagged with the program and its thread.
    assert entry["calls_finished"] == 2 and entry["threads"] == {"main": 2}
    assert all(e["program_id"] != program_id for e in after)
    nodes = check_llm_tool_llm(program)
    assert nodes[1]["parent_ids"] == ["main:0"] and nodes[2]["parent_ids"] == ["main:1"]
    assert run.stop_reason == "answer" and run.answer and run.program is program
    return run


async def check_tool_duration_is_predicted(
    run: Callable[[Stack, anyio.Event, str, str], Awaitable[object]], prefix: str
) -> None:
    """``run(stack, gate, program_id, prompt)`` twice, an agent with the gated ``lookup``:
    the first run's tool is held 0.3 s; the second's wait carries a predicted duration of at
    least that (programs ``<prefix>-1`` and ``<prefix>-2``)."""
    first, second, seen = anyio.Event(), anyio.Event(), dict[str, Any]()

    async def hold(gate: anyio.Event, program_id: str, hold_s: float) -> None:
        await stack.wait_for_entry(tool_waiting(program_id, "lookup"))  # the tool runs
        await anyio.sleep(hold_s)
        gate.set()

    async with running_stack() as stack:
        async with anyio.create_task_group() as group:
            group.start_soon(hold, first, f"{prefix}-1", 0.3)
            await run(stack, first, f"{prefix}-1", "Look it up.")
        async with anyio.create_task_group() as group:
            waiting = tool_waiting(f"{prefix}-2", "lookup")
            group.start_soon(release_when_seen, stack, waiting, second, seen)
            await run(stack, second, f"{prefix}-2", "Again.")
    (wait,) = seen["entry"]["tool_waits"]
    # The tool's first run took over 0.3 s; the controller was told so when the second began.
    assert wait["predicted_duration_s"] >= 0.3


async def check_parallel_tool_calls(run: GatedRun, program_id: str) -> None:
    """``run`` (in program ``program_id``) runs an agent with :func:`gated_pair` whose model
    calls both tools at once: both waited together in two threads, each chained off the first
    call, and the next call joined both threads."""
    both_seen = anyio.Event()
    seen: dict[str, Any] = {}
    async with running_stack() as stack, anyio.create_task_group() as group:
        group.start_soon(release_when_seen, stack, tools_waiting(program_id, 2), both_seen, seen)
        agent_run = await run(stack, both_seen)
    assert sorted(w["thread_id"] for w in seen["entry"]["tool_waits"]) == ["main", "main.0"]
    assert sorted(w["tool_name"] for w in seen["entry"]["tool_waits"]) == ["fetch", "lookup"]
    nodes = list(agent_run.program.nodes.values())
    first, tools, last = nodes[0], nodes[1:3], nodes[3]
    assert [n.kind for n in nodes] == ["llm", "tool", "tool", "llm"]
    assert sorted(n.thread_id for n in tools) == ["main", "main.0"]
    assert all(n.parent_ids == (first.id,) and n.tool_call_id for n in tools)
    # The next model call depends on both tool runs (the threads joined).
    assert sorted(last.parent_ids) == sorted(n.id for n in tools) and last.thread_id == "main"


def check_sub_agent_chain(program: Program) -> None:
    """A lead agent's tool ``research`` ran a sub-agent that called ``add``: the sub-agent's
    calls and tool chain off the ``research`` node, the lead answers after that tool, all in
    thread ``main`` and all ok."""
    nodes = list(program.nodes.values())
    shape = [(n.kind, n.name if n.kind == "tool" else "", n.parent_ids) for n in nodes]
    assert shape == [
        ("llm", "", ()),
        ("tool", "research", ("main:0",)),
        ("llm", "", ("main:1",)),  # the sub-agent's calls and tool chain off its tool node
        ("tool", "add", ("main:2",)),
        ("llm", "", ("main:3",)),
        ("llm", "", ("main:1",)),  # the lead answers after the research tool
    ]
    assert all(n.status == "ok" and n.thread_id == "main" for n in nodes)
