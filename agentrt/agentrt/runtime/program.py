"""``Program``: one run of an agent program — its DAG, deadline, span and controller events.

Used as ``async with runtime.program("name", timeout_s=30) as prog:``. The body runs inside a
cancel scope whose deadline is the program's (anyio style: an absolute time on the event loop
clock, ``math.inf`` for none); past it every node still running is cancelled — which closes its
HTTP stream, so the server aborts the request — and :class:`agentrt.DeadlineExceeded` is raised
when the block exits.
"""

from __future__ import annotations

import math
import uuid
from contextvars import Token
from types import TracebackType
from typing import Any, Literal

import anyio
import httpx
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from agentrt.errors import ConfigError, DeadlineExceeded
from agentrt.journal.api import LeasingJournal
from agentrt.program.chain import Chain
from agentrt.program.model import Node, NodeKind, NodeStatus, ProgramGraph
from agentrt.protocol import CallTags, ProgramEnd, ProgramStart
from agentrt.runtime.frame import CURRENT_FRAME, Frame, begin_graph_node
from agentrt.runtime.services import RuntimeServices
from agentrt.runtime.telemetry import ATTR_PROGRAM_ID, ATTR_SESSION_ID

__all__ = ["Program"]

#: ``invoke_workflow`` for a program of several steps, ``invoke_agent`` for a single agent.
ProgramOperation = Literal["invoke_workflow", "invoke_agent"]


class Program:
    """A program run: the unit the controller schedules. Also its live, inspectable DAG.

    Implements ``agentrt.runtime.frame.ProgramRun``."""

    def __init__(
        self,
        runtime: RuntimeServices,
        name: str,
        *,
        program_id: str | None = None,
        deadline: float = math.inf,
        timeout_s: float | None = None,
        operation: ProgramOperation = "invoke_workflow",
    ) -> None:
        if timeout_s is not None and (math.isnan(timeout_s) or timeout_s < 0):
            raise ConfigError(f"timeout_s must be >= 0 seconds, got {timeout_s}")
        if math.isnan(deadline):
            raise ConfigError("deadline must be a number (math.inf for none)")
        self.id = program_id or f"p-{uuid.uuid4().hex[:20]}"
        CallTags("s", self.id, "main", "n")  # validates the id (ProtocolError)
        self.name = name
        self.runtime = runtime
        self._timeout_s = timeout_s
        self._deadline_arg = deadline
        self._operation = operation
        self.graph: ProgramGraph | None = None
        self._scope: anyio.CancelScope | None = None
        self._frame_token: Token[Frame | None] | None = None
        self._otel_token: object = None
        self._span: trace.Span | None = None
        #: The journal holding this run's program lease (released when the program ends).
        self._lease_journal: LeasingJournal | None = None
        #: Open response streams of raw client calls, closed when the program ends.
        self.open_streams: set[httpx.AsyncByteStream] = set()
        #: Seconds summed over nodes, by phase (llm_wait, llm_execution, tool, human).
        self.phase_s: dict[str, float] = {
            "llm_wait": 0.0,
            "llm_execution": 0.0,
            "tool": 0.0,
            "human": 0.0,
        }

    # ----------------------------------------------------------------- inspection
    @property
    def deadline(self) -> float:
        """Absolute deadline on the anyio clock (seconds); ``math.inf`` = none."""
        return self._graph().deadline_s

    def remaining_s(self) -> float:
        """Seconds left before the deadline (``math.inf`` without one; may be negative)."""
        return self._graph().deadline_s - anyio.current_time()

    @property
    def status(self) -> str:
        return self._graph().status

    @property
    def nodes(self) -> dict[str, Node]:
        return self._graph().nodes

    def to_dict(self) -> dict[str, Any]:
        """JSON-able DAG (see ``ProgramGraph.to_dict``)."""
        return self._graph().to_dict()

    def to_json(self, indent: int | None = 2) -> str:
        return self._graph().to_json(indent)

    def to_mermaid(self) -> str:
        return self._graph().to_mermaid()

    def cancel(self, node_id: str) -> None:
        """Cancel a running node and, with it, all work nested in it (its child calls)."""
        node = self._graph().nodes[node_id]
        if node.scope is not None:
            node.scope.cancel()

    def _graph(self) -> ProgramGraph:
        if self.graph is None:
            raise RuntimeError("the program has not started: use `async with runtime.program()`")
        return self.graph

    # ----------------------------------------------------------------- nodes
    def begin_node(
        self,
        frame: Frame,
        kind: NodeKind,
        name: str,
        *,
        parents: tuple[str, ...] | None = None,
        objective: str | None = None,
        tool_call_id: str = "",
        start: bool = True,
    ) -> Node:
        """Create the next node of ``frame``'s thread (parents: the chain's leaves)."""
        return begin_graph_node(
            self._graph(),
            frame,
            kind,
            name,
            parents=parents,
            objective=objective,
            tool_call_id=tool_call_id,
            start=start,
            now_s=anyio.current_time(),
        )

    def end_node(
        self, chain: Chain, node: Node, status: NodeStatus, error: BaseException | None = None
    ) -> None:
        """Finish ``node`` and advance ``chain`` past it; add its time to the phase totals."""
        node.finish(status, anyio.current_time(), error)
        chain.on_done(node)
        duration = node.duration_s or 0.0
        if status == "replayed":
            return
        if node.kind == "llm":
            wait = min(node.queue_s or 0.0, duration)
            self.phase_s["llm_wait"] += wait
            self.phase_s["llm_execution"] += duration - wait
        elif node.kind == "tool":
            self.phase_s["tool"] += duration
        else:
            self.phase_s["human"] += duration

    # ----------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> Program:
        rt = self.runtime
        rt.require_open()
        if isinstance(rt.journal, LeasingJournal):  # ProgramLeaseHeld: the id runs elsewhere
            await rt.journal.acquire_lease(self.id, required=False)
            self._lease_journal = rt.journal
        now = anyio.current_time()
        deadline = self._deadline_arg
        if self._timeout_s is not None:
            deadline = min(deadline, now + self._timeout_s)
        self.graph = ProgramGraph(self.id, self.name, rt.session_id, deadline, now)
        inst = rt.instruments
        self._span = inst.tracer.start_span(
            f"{self._operation} {self.name}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": self._operation,
                "gen_ai.provider.name": rt.config.provider_name,
                "gen_ai.conversation.id": self.id,
                ATTR_SESSION_ID: rt.session_id,
                ATTR_PROGRAM_ID: self.id,
                "agentrt.program.name": self.name,
            },
        )
        self._otel_token = otel_context.attach(trace.set_span_in_context(self._span))
        frame = Frame(self, self.graph, self.graph.threads["main"], Chain())
        self._frame_token = CURRENT_FRAME.set(frame)
        timeout_ms = None if math.isinf(deadline) else max(0, int((deadline - now) * 1000))
        try:
            await rt.link.program_start(
                self.id,
                ProgramStart(session_id=rt.session_id, name=self.name[:200], timeout_ms=timeout_ms),
            )
        except BaseException:
            self._teardown()
            await self._release_lease()
            raise
        self._scope = anyio.CancelScope(deadline=deadline)
        self._scope.__enter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._scope is not None and self.graph is not None
        scope, self._scope = self._scope, None
        swallowed = scope.__exit__(exc_type, exc, tb)
        graph = self.graph
        now = anyio.current_time()
        deadline_hit = (swallowed and now >= graph.deadline_s) or isinstance(exc, DeadlineExceeded)
        if deadline_hit:
            status = "deadline_exceeded"
        elif exc is None or swallowed:
            status = "ok"
        elif isinstance(exc, anyio.get_cancelled_exc_class()):
            status = "cancelled"
        else:
            status = "error"
        graph.status = status
        graph.ended_s = now
        graph.cancel_unfinished(now)
        with anyio.CancelScope(shield=True):
            for stream in list(self.open_streams):
                await stream.aclose()
            self.open_streams.clear()
        wire_status: Literal["ok", "error", "cancelled"] = (
            "ok" if status == "ok" else "error" if status == "error" else "cancelled"
        )
        try:
            await self.runtime.link.program_end(
                self.id, ProgramEnd(session_id=self.runtime.session_id, status=wire_status)
            )
        finally:
            self._record_metrics(status, now)
            self._teardown(status, exc)
            await self._release_lease()
        if deadline_hit and not isinstance(exc, DeadlineExceeded):
            raise DeadlineExceeded(
                f"program {self.id} ({self.name}) passed its deadline; "
                f"{sum(1 for n in graph.nodes.values() if n.status == 'cancelled')} nodes cancelled"
            ) from None
        return swallowed

    async def _release_lease(self) -> None:
        journal, self._lease_journal = self._lease_journal, None
        if journal is not None:
            await journal.release_lease(self.id)  # shielded inside; never raises if unreachable

    def _record_metrics(self, status: str, now: float) -> None:
        assert self.graph is not None
        inst = self.runtime.instruments
        attrs = {"agentrt.program.name": self.name, "agentrt.program.status": status}
        inst.program_duration.record(now - self.graph.started_s, attrs)
        for phase, seconds in self.phase_s.items():
            inst.program_phase.record(seconds, {**attrs, "agentrt.phase": phase})

    def _teardown(self, status: str = "error", exc: BaseException | None = None) -> None:
        if self._frame_token is not None:
            CURRENT_FRAME.reset(self._frame_token)
            self._frame_token = None
        if self._otel_token is not None:
            otel_context.detach(self._otel_token)  # type: ignore[arg-type]
            self._otel_token = None
        if self._span is not None:
            self._span.set_attribute("agentrt.program.status", status)
            if status != "ok":
                self._span.set_status(Status(StatusCode.ERROR, status))
                if exc is not None:
                    self._span.set_attribute("error.type", type(exc).__qualname__)
            self._span.end()
            self._span = None

    def __repr__(self) -> str:
        return f"Program(id={self.id!r}, name={self.name!r})"
