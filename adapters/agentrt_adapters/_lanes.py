"""Which agentrt thread a framework's step runs in: parallel branches become threads.

Frameworks run concurrent work (LangGraph tasks of one superstep, parallel tool calls) in
asyncio tasks that all inherit the same program frame. Left alone, their calls would share one
thread and one chain, and the DAG would be wrong. ``Lanes`` assigns each piece of work a frame:

* a **lane** is a sequence of work on one frame (a thread and its chain): the program itself
  (the root lane) or one LangGraph task;
* a new **task** runs directly on its parent's frame when the parent is idle (nothing in flight,
  no other task on it) — sequential steps stay in one thread — otherwise on a thread forked
  from the parent's thread (``main.0``, ``main.1``, ...);
* a **unit** (one LLM call or tool run) runs on its lane's frame when the lane is idle,
  otherwise on a forked thread (two tool calls of one step → two threads);
* when forked work ends, its leaves join the parent's chain (``Chain.join``), so the next step
  depends on every branch.

No I/O and no clock: only the program graph and frames are touched. Not thread-safe (one
event loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrt.runtime.frame import Frame

__all__ = ["Lane", "Lanes", "Unit"]

#: LangGraph separates nested (subgraph) namespaces with this character.
_NS_SEP = "|"


@dataclass(eq=False, slots=True)
class Lane:
    """A sequence of work on one frame."""

    frame: Frame
    parent: Lane | None
    #: True: the lane runs on its parent's frame (no thread of its own).
    direct: bool
    #: Parent chain leaves when the lane was forked (for the join); unused when direct.
    base: list[str] = field(default_factory=list)
    #: Units (LLM calls, tool runs) running now.
    in_flight: int = 0
    #: Child lanes that run directly on this lane's frame (0 or 1).
    holders: int = 0

    @property
    def idle(self) -> bool:
        return self.in_flight == 0 and self.holders == 0


@dataclass(eq=False, slots=True)
class Unit:
    """One LLM call or tool run placed by :meth:`Lanes.begin_unit`."""

    lane: Lane
    frame: Frame
    #: True: the unit got a thread of its own (``frame`` is a fork of the lane's).
    forked: bool
    base: list[str]


class Lanes:
    """Thread assignment for one program run; ``root`` is the program's own frame."""

    def __init__(self, root: Frame) -> None:
        self.root = Lane(root, None, direct=False)
        #: Open task lanes by task namespace (LangGraph ``langgraph_checkpoint_ns``).
        self._tasks: dict[str, Lane] = {}

    def open_task(self, namespace: str) -> Lane:
        """Start the lane of a task (idempotent for a namespace already open)."""
        lane = self._tasks.get(namespace)
        if lane is not None:
            return lane
        parent = self._parent_of(namespace)
        if parent.idle:
            parent.holders += 1
            lane = Lane(parent.frame, parent, direct=True)
        else:
            frame, base = _fork(parent.frame)
            lane = Lane(frame, parent, direct=False, base=base)
        self._tasks[namespace] = lane
        return lane

    def close_task(self, namespace: str) -> None:
        """End a task's lane: release its parent, or join its thread into the parent's chain."""
        lane = self._tasks.pop(namespace, None)
        if lane is None or lane.parent is None:
            return
        if lane.direct:
            lane.parent.holders -= 1
        else:
            lane.parent.frame.chain.join(lane.base, [lane.frame.chain])

    def lane_for(self, namespace: str | None) -> Lane:
        """The lane of the task ``namespace`` (or of its nearest open ancestor; the root)."""
        if namespace:
            lane = self._tasks.get(namespace)
            if lane is not None:
                return lane
            return self._parent_of(namespace)
        return self.root

    def begin_unit(self, lane: Lane) -> Unit:
        """Place one LLM call or tool run: on the lane's frame when idle, else on a fork."""
        if lane.idle:
            lane.in_flight += 1
            return Unit(lane, lane.frame, forked=False, base=[])
        frame, base = _fork(lane.frame)
        lane.in_flight += 1
        return Unit(lane, frame, forked=True, base=base)

    def end_unit(self, unit: Unit) -> None:
        """The unit is done; a forked one joins its lane's chain."""
        unit.lane.in_flight -= 1
        if unit.forked:
            unit.lane.frame.chain.join(unit.base, [unit.frame.chain])

    def _parent_of(self, namespace: str) -> Lane:
        parts = namespace.split(_NS_SEP)
        for end in range(len(parts) - 1, 0, -1):
            lane = self._tasks.get(_NS_SEP.join(parts[:end]))
            if lane is not None:
                return lane
        return self.root


def _fork(frame: Frame) -> tuple[Frame, list[str]]:
    """A new thread forked from ``frame``'s thread, starting at its current leaves."""
    thread = frame.graph.fork(frame.thread.id)
    return frame.child(thread), list(frame.chain.leaves)
