"""Structured parallelism and external waits inside a program.

* ``parallel()``: a task group whose every task is a new *thread* of the program (ids derived
  from the parent thread and fork order), optionally bounded in concurrency;
* ``gather()``: run callables as parallel threads and return their results in order;
* ``wait()``: an external (human or tool) wait as a DAG node, reported to the controller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

import anyio
from anyio.abc import TaskGroup

from agentrt.errors import AgentrtError
from agentrt.program.model import Node, NodeStatus
from agentrt.protocol import Objective, ToolWaitEnd, ToolWaitStart
from agentrt.runtime.frame import CURRENT_FRAME, Frame

__all__ = ["Branch", "Parallel", "gather", "parallel", "track_wait", "wait"]

T = TypeVar("T")


def _frame(what: str) -> Frame:
    frame = CURRENT_FRAME.get()
    if frame is None:
        raise AgentrtError(f"{what} must run inside a program (`async with rt.program(...)`)")
    return frame


@dataclass(slots=True)
class Branch(Generic[T]):
    """A thread started by ``Parallel.start``; ``value`` is set when it finishes."""

    thread_id: str
    _value: Any = None
    done: bool = False

    @property
    def value(self) -> T:
        if not self.done:
            raise AgentrtError(f"thread {self.thread_id} has not finished")
        return self._value  # type: ignore[no-any-return]


class Parallel:
    """``async with parallel(limit=4) as par: par.start(fn, x)`` — each task a new thread.

    Leaving the block waits for every thread (structured: no task outlives it). Afterwards the
    current chain continues from the leaves of all threads (a join). ``limit`` bounds how many
    threads run at once (None = no bound); thread ids are assigned at ``start`` time, in call
    order, so they are deterministic even when the run order is not. ``objective`` tags every
    call made in the threads (e.g. ``throughput`` for a map fan-out).
    """

    def __init__(self, *, limit: int | None = None, objective: Objective | None = None) -> None:
        if limit is not None and limit < 1:
            raise AgentrtError(f"limit must be >= 1 or None, got {limit}")
        self._limiter = anyio.CapacityLimiter(limit) if limit is not None else None
        self._objective = objective
        self._frame: Frame | None = None
        self._tg: TaskGroup | None = None
        self._base: list[str] = []
        self._children: list[Frame] = []

    async def __aenter__(self) -> Parallel:
        self._frame = _frame("parallel()")
        self._base = list(self._frame.chain.leaves)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    def start(self, fn: Callable[..., Awaitable[T]], *args: Any) -> Branch[T]:
        """Start ``fn(*args)`` in a new thread of the program."""
        if self._tg is None or self._frame is None:
            raise AgentrtError("Parallel.start outside its `async with` block")
        frame = self._frame
        thread = frame.graph.fork(frame.thread.id)
        child = frame.child(thread, self._objective)
        self._children.append(child)
        branch: Branch[T] = Branch(thread.id)
        self._tg.start_soon(self._run, child, branch, fn, args, name=f"agentrt:{thread.id}")
        return branch

    async def _run(
        self, child: Frame, branch: Branch[T], fn: Callable[..., Awaitable[T]], args: Any
    ) -> None:
        token = CURRENT_FRAME.set(child)
        try:
            if self._limiter is None:
                branch._value = await fn(*args)
            else:
                async with self._limiter:
                    branch._value = await fn(*args)
            branch.done = True
        finally:
            CURRENT_FRAME.reset(token)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None and self._frame is not None
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # One failing thread is the common case: raise its error itself, not a group.
            errors = [e for e in group.exceptions if not _is_cancel(e)]
            if len(errors) == 1 and isinstance(errors[0], Exception):
                raise errors[0] from group
            raise
        finally:
            self._frame.chain.join(self._base, [c.chain for c in self._children])
            self._tg = None


def _is_cancel(exc: BaseException) -> bool:
    return isinstance(exc, anyio.get_cancelled_exc_class())


def parallel(*, limit: int | None = None, objective: Objective | None = None) -> Parallel:
    """A ``Parallel`` block: see its docstring."""
    return Parallel(limit=limit, objective=objective)


async def gather(
    *fns: Callable[[], Awaitable[T]],
    limit: int | None = None,
    objective: Objective | None = None,
) -> list[T]:
    """Run each zero-argument async callable in its own thread; results in argument order."""
    async with Parallel(limit=limit, objective=objective) as par:
        branches = [par.start(fn) for fn in fns]
    return [b.value for b in branches]


@asynccontextmanager
async def track_wait(
    frame: Frame,
    node: Node,
    *,
    wire_kind: Literal["tool", "human"],
    predicted_s: float | None,
) -> AsyncIterator[None]:
    """Report ``node``'s wait to the controller (start, then end with its duration)."""
    run = frame.run
    link = run.runtime.link
    session = run.runtime.session_id
    await link.tool_start(
        frame.graph.id,
        ToolWaitStart(
            session_id=session,
            thread_id=frame.thread.id,
            node_id=node.id,
            tool_name=node.name[:200],
            predicted_duration_s=predicted_s,
            kind=wire_kind,
        ),
    )
    started = anyio.current_time()
    ok = False
    try:
        yield
        ok = True
    finally:
        await link.tool_end(
            frame.graph.id,
            ToolWaitEnd(
                session_id=session,
                thread_id=frame.thread.id,
                node_id=node.id,
                tool_name=node.name[:200],
                duration_s=max(0.0, anyio.current_time() - started),
                ok=ok,
            ),
        )


@asynccontextmanager
async def wait(
    name: str,
    *,
    kind: Literal["human", "tool"] = "human",
    predicted_s: float | None = None,
) -> AsyncIterator[Node]:
    """An external wait (a human's answer, an outside system) as a ``wait`` node.

    ``Program.cancel(node.id)`` cancels the work inside the block, which then exits normally
    with the node ``cancelled``.

    ``async with agentrt.wait("approval"): answer = await ask_human()`` — the controller is
    told the program waits (so it may retain its KV cache across the wait, as Continuum,
    arXiv 2511.02230, does for tool calls; docs/protocol.md) and for how long it is expected
    to (``predicted_s``, seconds; None = unknown).
    """
    frame = _frame("wait()")
    run = frame.run
    node = run.begin_node(frame, "wait", name)
    status: NodeStatus = "error"
    error: BaseException | None = None
    try:
        async with track_wait(frame, node, wire_kind=kind, predicted_s=predicted_s):
            # ``Program.cancel(node.id)`` ends the wait (and what runs in it) quietly.
            with anyio.CancelScope() as scope:
                node.scope = scope
                yield node
        status = "cancelled" if scope.cancelled_caught else "ok"
    except BaseException as exc:
        status = "cancelled" if _is_cancel(exc) else "error"
        error = exc
        raise
    finally:
        run.end_node(frame.chain, node, status, error)
