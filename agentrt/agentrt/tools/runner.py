"""Running tools as program steps: node, ``execute_tool`` span, controller tool-wait events,
timeout, and — with a journal — durable execution (docs/journal.md).

Failures a model can react to (``ToolError`` and its subclasses: bad arguments, timeouts, a
tool's own ``ToolError``) become a :class:`ToolResult` with ``error`` set, whose message goes
back to the model. Any other exception the tool's function raises does too, as a
``ToolFailed`` (the exception its cause), unless the tool's error mode is ``raise``
(``Tool.error_mode``: ``@tool(on_error=...)``, else ``RuntimeConfig.tool_on_error`` for a
read-only tool, else ``raise`` for a side effect). Never returned, always propagated: a journal
error such as ``UnknownOutcome`` (an effect that may have happened is surfaced, never retried
blindly), the program's deadline, cancellation, and failures outside the tool's function.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from agentrt.errors import (
    DeadlineExceeded,
    JournalError,
    JournalUnavailable,
    ResultNotSerializable,
    ToolArgumentsInvalid,
    ToolError,
    ToolFailed,
    ToolTimeout,
)
from agentrt.journal.api import StepSpec
from agentrt.json_types import JSONValue
from agentrt.program.model import Node, NodeStatus
from agentrt.runtime.flow import Parallel, track_wait
from agentrt.runtime.frame import CURRENT_FRAME, Frame
from agentrt.runtime.runtime import current_runtime
from agentrt.runtime.telemetry import (
    ATTR_NODE_ID,
    ATTR_NODE_PARENT_IDS,
    ATTR_PROGRAM_ID,
    ATTR_SESSION_ID,
    ATTR_THREAD_ID,
)
from agentrt.tools.runnable import RunnableTool

__all__ = ["ToolResult", "execute_tool_calls", "run_tool"]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """Outcome of one tool call."""

    tool_call_id: str
    name: str
    #: JSON-able result (None on error).
    value: Any
    #: The error fed back to the model, None on success.
    error: ToolError | None = None
    #: The node that ran the call.
    node_id: str = ""

    @property
    def content(self) -> str:
        """Text for the model: the result (JSON unless a string) or ``Error: ...``."""
        if self.error is not None:
            return f"Error: {self.error}"
        if isinstance(self.value, str):
            return self.value
        return json.dumps(self.value)

    def message(self) -> dict[str, Any]:
        """The ``role: tool`` message answering the call."""
        return {"role": "tool", "tool_call_id": self.tool_call_id, "content": self.content}

    def __repr__(self) -> str:  # results may hold user data
        return f"ToolResult(name={self.name!r}, ok={self.error is None}, node_id={self.node_id!r})"


async def run_tool(
    tool: RunnableTool,
    arguments: str | Mapping[str, Any] | BaseModel | None,
    *,
    tool_call_id: str = "",
) -> ToolResult:
    """Run ``tool`` as a ``tool`` node of the current program (ad-hoc program outside one)."""
    frame = CURRENT_FRAME.get()
    if frame is None:
        async with current_runtime().program(f"tool {tool.name}"):
            return await run_tool(tool, arguments, tool_call_id=tool_call_id)
    return await _run_in(frame, tool, arguments, tool_call_id)


async def _run_in(
    frame: Frame,
    tool: RunnableTool,
    arguments: str | Mapping[str, Any] | BaseModel | None,
    tool_call_id: str,
) -> ToolResult:
    run = frame.run
    rt = run.runtime
    node = run.begin_node(frame, "tool", tool.name, tool_call_id=tool_call_id)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool.name,
        "gen_ai.tool.type": "function",
        ATTR_SESSION_ID: rt.session_id,
        ATTR_PROGRAM_ID: frame.graph.id,
        ATTR_THREAD_ID: frame.thread.id,
        ATTR_NODE_ID: node.id,
        ATTR_NODE_PARENT_IDS: list(node.parent_ids),
    }
    if tool_call_id:
        attributes["gen_ai.tool.call.id"] = tool_call_id
    if tool.description:
        attributes["gen_ai.tool.description"] = tool.description[:500]
    span = rt.instruments.tracer.start_span(
        f"execute_tool {tool.name}", kind=SpanKind.INTERNAL, attributes=attributes
    )
    status: NodeStatus = "error"
    failure: BaseException | None = None
    try:
        with trace.use_span(span, end_on_exit=False, record_exception=False):
            try:
                parsed = (
                    arguments
                    if isinstance(arguments, tool.args_model)
                    else tool.parse(_as_json_input(arguments))
                )
                if rt.config.capture_content:
                    span.set_attribute("gen_ai.tool.call.arguments", parsed.model_dump_json())
                value, executed = await _execute(frame, tool, node, parsed)
            except ToolError as exc:
                failure = exc
                # A returned ToolFailed is labelled with the tool's own exception class.
                error_type = type(exc.__cause__ if isinstance(exc, ToolFailed) else exc)
                span.set_attribute("error.type", error_type.__qualname__)
                span.set_status(Status(StatusCode.ERROR, error_type.__qualname__))
                return ToolResult(tool_call_id, tool.name, None, exc, node.id)
        if rt.config.capture_content:
            span.set_attribute("gen_ai.tool.call.result", json.dumps(value)[:65536])
        status = "ok" if executed else "replayed"
        return ToolResult(tool_call_id, tool.name, value, None, node.id)
    except BaseException as exc:
        failure = exc
        status = "cancelled" if isinstance(exc, anyio.get_cancelled_exc_class()) else "error"
        span.set_attribute("error.type", type(exc).__qualname__)
        span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
        raise
    finally:
        run.end_node(frame.chain, node, status, failure)
        span.end()
        if node.duration_s is not None and node.started_s is not None and status == "ok":
            rt.instruments.tool_duration.record(node.duration_s, {"gen_ai.tool.name": tool.name})


async def _execute(
    frame: Frame, tool: RunnableTool, node: Node, arguments: BaseModel
) -> tuple[JSONValue, bool]:
    """Run the validated call: events, timeout, journal. Returns the JSON-able result and
    whether the tool really ran (False: the journal replayed a recorded result)."""
    rt = frame.run.runtime
    journal = rt.journal
    if tool.side_effect and journal is None:
        raise JournalUnavailable(
            f"tool {tool.name} has side effects and no journal is configured: it refuses to "
            "run (set RuntimeConfig.journal)"
        )
    predicted = rt.tool_history.predict(tool.name)
    if journal is not None:
        predicted = await journal.predict_tool_duration(tool.name)
    timeout_s = tool.timeout_s if tool.timeout_s is not None else rt.config.tool_timeout_s
    nested = frame.nested(node)

    executed = False
    returns_errors = tool.error_mode(rt.config.tool_on_error) == "return"

    async def execute(key: str) -> JSONValue:
        nonlocal executed
        executed = True
        token = CURRENT_FRAME.set(nested)
        try:
            result = await tool.invoke(arguments, key)
        except (ToolError, JournalError, DeadlineExceeded):
            raise
        except Exception as exc:
            # Raised inside ``execute``, so the journal records the step FAILED (an ordinary
            # exception), and the model gets the message.
            if returns_errors:
                raise ToolFailed(_failure_message(tool.name, exc)) from exc
            raise
        finally:
            CURRENT_FRAME.reset(token)
        try:
            jsonable: JSONValue = to_jsonable_python(result)
        except PydanticSerializationError as exc:
            raise ResultNotSerializable(
                f"tool {tool.name} returned a {type(result).__name__}, not JSON-able"
            ) from exc
        return jsonable

    async with track_wait(frame, node, wire_kind="tool", predicted_s=predicted):
        started = anyio.current_time()
        with anyio.CancelScope() as scope:
            node.scope = scope
            try:
                with anyio.fail_after(timeout_s if timeout_s is not None else float("inf")):
                    if journal is None:
                        value = await execute("")
                    else:
                        step = StepSpec(
                            program_id=frame.graph.id,
                            thread_id=frame.thread.id,
                            seq=node.seq,
                            kind="tool",
                            name=tool.name,
                            arguments=arguments.model_dump(mode="json"),
                            side_effect=tool.side_effect,
                            idempotent=tool.idempotent,
                            node_id=node.id,
                        )
                        value = await journal.run_step(step, execute, reconcile=tool.reconcile)
            except TimeoutError as exc:
                raise ToolTimeout(f"tool {tool.name} ran past its {timeout_s} s timeout") from exc
        if scope.cancelled_caught:
            raise ToolError(f"tool {tool.name} was cancelled")
        duration = anyio.current_time() - started
    if executed:  # a replayed result says nothing about the tool's speed
        rt.tool_history.record(tool.name, duration)
        if journal is not None:
            await journal.record_tool_duration(tool.name, duration)
    return value, executed


def _failure_message(name: str, exc: Exception) -> str:
    """What the model reads for an exception of tool ``name``: its class and message."""
    detail = str(exc)[:2000]
    kind = type(exc).__name__
    return f"tool {name} failed: {kind}: {detail}" if detail else f"tool {name} failed: {kind}"


def _as_json_input(arguments: str | Mapping[str, Any] | BaseModel | None) -> Any:
    if isinstance(arguments, BaseModel):
        return arguments.model_dump()
    if arguments is None or isinstance(arguments, str):
        return arguments
    return dict(arguments)


async def execute_tool_calls(
    tool_calls: Iterable[Any], tools: Sequence[RunnableTool]
) -> list[ToolResult]:
    """Run the tool calls of one assistant message; results in call order.

    ``tool_calls``: the message's ``tool_calls`` (openai objects or dicts with ``id`` and
    ``function.name`` / ``function.arguments``). A single call runs in the current thread;
    several run concurrently, each in a thread of its own. Unknown tools and malformed or
    invalid arguments come back as ``ToolArgumentsInvalid`` results, for the model to fix.
    """
    calls = [_call_fields(c) for c in tool_calls]
    by_name = {t.name: t for t in tools}
    if CURRENT_FRAME.get() is None and len(calls) > 1:
        async with current_runtime().program("tool calls"):
            return await execute_tool_calls(calls_as_dicts(calls), tools)

    async def one(call_id: str, name: str, arguments: str) -> ToolResult:
        tool = by_name.get(name)
        if tool is None:
            known = ", ".join(sorted(by_name)) or "none"
            error = ToolArgumentsInvalid(f"unknown tool {name!r}; available tools: {known}")
            return ToolResult(call_id, name, None, error)
        return await run_tool(tool, arguments, tool_call_id=call_id)

    if len(calls) == 1:
        return [await one(*calls[0])]
    async with Parallel() as par:
        branches = [par.start(one, *call) for call in calls]
    return [b.value for b in branches]


def calls_as_dicts(calls: Sequence[tuple[str, str, str]]) -> list[dict[str, Any]]:
    return [{"id": i, "function": {"name": n, "arguments": a}} for i, n, a in calls]


def _call_fields(call: Any) -> tuple[str, str, str]:
    if isinstance(call, Mapping):
        function = call.get("function") or {}
        arguments = function.get("arguments")
        return str(call.get("id", "")), str(function.get("name", "")), arguments or ""
    function = call.function
    return str(call.id), str(function.name), function.arguments or ""
