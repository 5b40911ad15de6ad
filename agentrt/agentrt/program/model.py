"""Programs as dynamic DAGs: threads (parallel branches) and nodes (LLM / tool / wait).

Pure data with small mutators; no I/O, no clock reads (callers pass ``now_s`` on the anyio
clock). Identity is deterministic so that a re-run of a program with the same id gets the same
ids (the journal keys steps by thread id + sequence number, see ``agentrt.journal.api``):

* the root thread is ``"main"``; the k-th thread forked from thread ``t`` is ``f"{t}.{k}"``
  (k counts from 0 in fork order);
* the n-th node created in thread ``t`` is ``f"{t}:{n}"`` (n counts from 0).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from anyio import CancelScope

__all__ = ["Node", "NodeKind", "NodeStatus", "ProgramGraph", "ThreadInfo"]

NodeKind = Literal["llm", "tool", "wait"]
#: ``pending`` (created, not started), ``running``, ``ok``, ``error``, ``cancelled``,
#: ``replayed`` (result taken from the journal without running).
NodeStatus = Literal["pending", "running", "ok", "error", "cancelled", "replayed"]
_FINAL: frozenset[str] = frozenset({"ok", "error", "cancelled", "replayed"})


@dataclass(slots=True)
class Node:
    """One step of a program: an LLM call, a tool call or an external (human) wait."""

    #: ``f"{thread_id}:{seq}"``.
    id: str
    kind: NodeKind
    #: Model name for an LLM call (the candidate that answered, or is being tried, when the
    #: node was given several: :attr:`model_candidates`), tool name for a tool, a label for a
    #: wait.
    name: str
    thread_id: str
    #: 0-based position of the node in its thread.
    seq: int
    #: Ids of the nodes this one depends on (its DAG parents).
    parent_ids: tuple[str, ...]
    status: NodeStatus = "pending"
    #: Number of times the node's request was sent (1 = no retry); 0 before the first send.
    attempts: int = 0
    #: Start / end on the anyio clock (seconds); None until it happens.
    started_s: float | None = None
    ended_s: float | None = None
    #: Tokens reported by the server (LLM nodes), None when unknown.
    input_tokens: int | None = None
    output_tokens: int | None = None
    #: Time the call waited in the server's queue (seconds), when the server reports it.
    queue_s: float | None = None
    #: ``latency`` or ``throughput`` (the scheduling hint sent with the call).
    objective: str = "latency"
    #: Tool call id given by the model (tool nodes), else "".
    tool_call_id: str = ""
    #: Short error description (type name and message) when status is ``error``.
    error: str | None = None
    #: LLM calls given an ordered list of models: the list, tried in order while the server
    #: says a model is not served (404) or has no backend up (503); ``()`` = one model.
    model_candidates: tuple[str, ...] = ()
    #: Cancel scope of the running node: cancelling it cancels all work nested in the node.
    scope: CancelScope | None = field(default=None, repr=False, compare=False)

    @property
    def duration_s(self) -> float | None:
        """Wall time from start to end (seconds), None while unfinished."""
        if self.started_s is None or self.ended_s is None:
            return None
        return self.ended_s - self.started_s

    def start(self, now_s: float) -> None:
        self.status = "running"
        self.started_s = now_s

    def finish(self, status: NodeStatus, now_s: float, error: BaseException | None = None) -> None:
        if self.status in _FINAL:
            return
        self.status = status
        if self.started_s is None:
            self.started_s = now_s
        self.ended_s = now_s
        self.scope = None
        if error is not None:
            self.error = f"{type(error).__name__}: {error}"[:300]

    def to_dict(self, origin_s: float) -> dict[str, Any]:
        """JSON-able view; times are seconds relative to ``origin_s`` (the program start)."""

        def rel(t: float | None) -> float | None:
            return None if t is None else round(t - origin_s, 6)

        return {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "thread_id": self.thread_id,
            "seq": self.seq,
            "parent_ids": list(self.parent_ids),
            "status": self.status,
            "attempts": self.attempts,
            "start_s": rel(self.started_s),
            "end_s": rel(self.ended_s),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "queue_s": self.queue_s,
            "objective": self.objective,
            "tool_call_id": self.tool_call_id,
            "error": self.error,
            **({"model_candidates": list(self.model_candidates)} if self.model_candidates else {}),
        }


@dataclass(slots=True)
class ThreadInfo:
    """A parallel branch of a program."""

    id: str
    #: The thread this one was forked from; None for ``"main"``.
    parent_id: str | None
    #: Number of nodes created in this thread so far (next node's seq).
    next_seq: int = 0
    #: Number of threads forked from this one so far (next child's index).
    next_fork: int = 0


@dataclass(slots=True)
class ProgramGraph:
    """The DAG of one program run, recorded as it happens."""

    id: str
    name: str
    session_id: str
    #: Absolute deadline on the anyio clock (seconds); ``math.inf`` = none.
    deadline_s: float
    started_s: float
    ended_s: float | None = None
    #: ``running``, ``ok``, ``error``, ``cancelled`` or ``deadline_exceeded``.
    status: str = "running"
    nodes: dict[str, Node] = field(default_factory=dict)
    threads: dict[str, ThreadInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "main" not in self.threads:
            self.threads["main"] = ThreadInfo("main", None)

    def fork(self, parent_thread_id: str) -> ThreadInfo:
        """Create the next child thread of ``parent_thread_id`` (deterministic id)."""
        parent = self.threads[parent_thread_id]
        child = ThreadInfo(f"{parent.id}.{parent.next_fork}", parent.id)
        parent.next_fork += 1
        self.threads[child.id] = child
        return child

    def add_node(
        self,
        thread_id: str,
        kind: NodeKind,
        name: str,
        parent_ids: tuple[str, ...],
        objective: str = "latency",
    ) -> Node:
        """Create the next node of ``thread_id`` in ``pending`` state."""
        thread = self.threads[thread_id]
        node = Node(
            id=f"{thread_id}:{thread.next_seq}",
            kind=kind,
            name=name,
            thread_id=thread_id,
            seq=thread.next_seq,
            parent_ids=parent_ids,
            objective=objective,
        )
        thread.next_seq += 1
        self.nodes[node.id] = node
        return node

    def children_of(self, node_id: str) -> list[Node]:
        """Nodes that name ``node_id`` as a parent."""
        return [n for n in self.nodes.values() if node_id in n.parent_ids]

    def cancel_unfinished(self, now_s: float) -> int:
        """Mark every pending or running node ``cancelled``; returns how many were."""
        count = 0
        for node in self.nodes.values():
            if node.status in ("pending", "running"):
                node.finish("cancelled", now_s)
                count += 1
        return count

    def to_dict(self) -> dict[str, Any]:
        """JSON-able view of the whole DAG (times relative to the program start, seconds)."""
        origin = self.started_s
        return {
            "program_id": self.id,
            "name": self.name,
            "session_id": self.session_id,
            "status": self.status,
            "deadline_s": None if math.isinf(self.deadline_s) else self.deadline_s - origin,
            "duration_s": None if self.ended_s is None else self.ended_s - origin,
            "threads": [
                {"id": t.id, "parent_id": t.parent_id, "nodes": t.next_seq}
                for t in self.threads.values()
            ],
            "nodes": [n.to_dict(origin) for n in self.nodes.values()],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_mermaid(self) -> str:
        """A mermaid ``flowchart`` of the DAG: one subgraph per thread, edges parent → child."""
        lines = ["flowchart TD"]
        by_thread: dict[str, list[Node]] = {}
        for node in self.nodes.values():
            by_thread.setdefault(node.thread_id, []).append(node)
        for thread_id, nodes in by_thread.items():
            lines.append(f'  subgraph {_mermaid_id("t_" + thread_id)}["thread {thread_id}"]')
            for node in nodes:
                label = f"{node.kind} {node.name} ({node.id}) {node.status}"
                label = label.replace('"', "'")
                shape = ('(["', '"])') if node.kind == "tool" else ('["', '"]')
                if node.kind == "wait":
                    shape = ('{{"', '"}}')
                lines.append(f"    {_mermaid_id(node.id)}{shape[0]}{label}{shape[1]}")
            lines.append("  end")
        for node in self.nodes.values():
            for parent in node.parent_ids:
                lines.append(f"  {_mermaid_id(parent)} --> {_mermaid_id(node.id)}")
        return "\n".join(lines) + "\n"


def _mermaid_id(raw: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in raw)
