"""Rebuild a program's DAG edges from its recorded spans.

The SDK's spans carry each node's id (``{thread}:{seq}``), thread (``main``, ``main.0``,
``main.0.1``: the k-th thread forked from ``t`` is ``t.k``) and, since the SDK records it, its
parents (``agentrt.node.parent_ids``). When every node of a program has that attribute the
edges are the recorded ones (:func:`infer_parents` with ``recorded_parents`` set). A parent
that has no span is an ``agentrt.wait()`` (human or external wait): it becomes one ``think``
node that ends when its first child starts and whose parents are the leaves it must have
consumed: the nodes visible from its thread (same, ancestor or descendant thread) that ended
by then, that no node chained after (started once they had ended) and that are not the last
call of a tool that had already finished.

Older traces carry no parents, so the edges are inferred by replaying the SDK's own chain rule
(``agentrt.program.chain.Chain``) over the recorded start and end times:

* a node's parents are its thread's *leaves* when it starts; a node that ends replaces its
  parents among the leaves (calls one after another form a chain, calls started together
  become siblings);
* a forked thread starts from its parent thread's leaves (the fork base);
* child threads are joined back into their parent (its leaves become theirs plus its own since
  the fork) when the parent thread starts its next node, or forks again, *and* every node of
  every unjoined child has ended. Requiring all children to have ended keeps the threads of one
  ``parallel(limit=...)`` block siblings, but runs of sequential blocks (``limit=1``, or
  siblings that did not overlap) come out chained, as they ran;
* a gap in a thread's sequence numbers (node ``t:j`` recorded, ``t:j-1`` not) is a node
  without a span: an ``agentrt.wait()`` (human or external wait). It becomes one ``think``
  node from the end of the thread's leaves to the start of ``t:j``.

Inferred this way, calls an SDK tool makes while it runs (nested work) chain off the thread,
not off the tool node, so they become the tool's siblings; recorded parents make them the
tool's children, as the SDK has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Recorded", "has_recorded_parents", "infer_parents"]

RecordedKind = Literal["llm", "tool", "think"]


@dataclass(slots=True)
class Recorded:
    """One node of a recorded program (times in Unix nanoseconds, tokens as recorded)."""

    node_id: str
    thread_id: str
    #: Position in its thread (the ``j`` of ``t:j``).
    seq: int
    kind: RecordedKind
    #: Tool name, ``wait`` for an inferred wait, the model for an LLM call.
    name: str
    start_ns: int
    end_ns: int
    input_tokens: int = 0
    output_tokens: int = 0
    #: False for a node that ran but is not exported (a failed call): its children inherit
    #: its parents.
    kept: bool = True
    parents: tuple[str, ...] = ()
    #: The parents the span recorded (``agentrt.node.parent_ids``), None when it has none.
    recorded_parents: tuple[str, ...] | None = None


@dataclass(slots=True)
class _Thread:
    leaves: list[str]
    base: list[str]
    children: list[str] = field(default_factory=list)


def _parent_thread(thread_id: str) -> str | None:
    return thread_id.rsplit(".", 1)[0] if "." in thread_id else None


class _Replay:
    def __init__(self, nodes: list[Recorded], program_start_ns: int) -> None:
        self.nodes = {node.node_id: node for node in nodes}
        self.program_start_ns = program_start_ns
        self.threads: dict[str, _Thread] = {}
        self.seqs: dict[str, set[int]] = {}
        #: Latest end over a thread and its descendants (ns).
        self.subtree_end: dict[str, int] = {}
        for node in nodes:
            self.seqs.setdefault(node.thread_id, set()).add(node.seq)
            thread: str | None = node.thread_id
            while thread is not None:
                self.subtree_end[thread] = max(self.subtree_end.get(thread, 0), node.end_ns)
                thread = _parent_thread(thread)
        self.inferred: list[Recorded] = []

    def thread(self, thread_id: str, now_ns: int) -> _Thread:
        found = self.threads.get(thread_id)
        if found is not None:
            return found
        parent_id = _parent_thread(thread_id)
        if parent_id is None:
            made = _Thread([], [])
        else:
            parent = self.thread(parent_id, now_ns)
            self.join_finished(parent, now_ns)
            made = _Thread(list(parent.leaves), list(parent.leaves))
            parent.children.append(thread_id)
        self.threads[thread_id] = made
        return made

    def join_finished(self, thread: _Thread, now_ns: int) -> None:
        """Join every child of ``thread`` if all of them (and their descendants) have ended."""
        if not thread.children:
            return
        if any(self.subtree_end.get(c, 0) > now_ns for c in thread.children):
            return
        for child_id in thread.children:
            child = self.threads[child_id]
            self.join_finished(child, now_ns)
            merged = [leaf for leaf in thread.leaves if leaf not in child.base]
            merged += [leaf for leaf in child.leaves if leaf not in merged]
            thread.leaves = merged or list(child.base)
        thread.children = []

    def start(self, node: Recorded) -> None:
        thread = self.thread(node.thread_id, node.start_ns)
        self.join_finished(thread, node.start_ns)
        previous = node.seq - 1
        if previous >= 0 and previous not in self.seqs[node.thread_id]:
            self.seqs[node.thread_id].add(previous)
            started = max(
                (self.nodes[leaf].end_ns for leaf in thread.leaves if leaf in self.nodes),
                default=self.program_start_ns,
            )
            wait = Recorded(
                f"{node.thread_id}:{previous}",
                node.thread_id,
                previous,
                "think",
                "wait",
                min(started, node.start_ns),
                node.start_ns,
                parents=tuple(thread.leaves),
            )
            self.nodes[wait.node_id] = wait
            self.inferred.append(wait)
            self.end(wait)
        node.parents = tuple(thread.leaves)

    def end(self, node: Recorded) -> None:
        thread = self.threads[node.thread_id]
        kept = [leaf for leaf in thread.leaves if leaf not in node.parents and leaf != node.node_id]
        kept.append(node.node_id)
        thread.leaves = kept


def infer_parents(nodes: list[Recorded], program_start_ns: int) -> list[Recorded]:
    """Set ``parents`` of every node; return the kept nodes plus inferred waits, in start order.

    The parents are the recorded ones when every node has ``recorded_parents``
    (:func:`has_recorded_parents`), else inferred from the timing. Parents that were not kept
    are replaced by their own parents (transitively).
    """
    if has_recorded_parents(nodes):
        everything = _from_recorded(nodes, program_start_ns)
    else:
        everything = _replayed(nodes, program_start_ns)

    def resolved(parent: str) -> list[str]:
        found = everything[parent]
        if found.kept:
            return [parent]
        return [p for grand in found.parents for p in resolved(grand)]

    out = [node for node in everything.values() if node.kept]
    for node in out:
        parents: list[str] = []
        for parent in node.parents:
            for p in resolved(parent):
                if p not in parents:
                    parents.append(p)
        node.parents = tuple(parents)
    out.sort(key=lambda node: (node.start_ns, node.end_ns, node.node_id))
    return _parents_first(out)


def has_recorded_parents(nodes: list[Recorded]) -> bool:
    """Whether every node of a program recorded its parents (an empty program has none)."""
    return bool(nodes) and all(node.recorded_parents is not None for node in nodes)


def _replayed(nodes: list[Recorded], program_start_ns: int) -> dict[str, Recorded]:
    """Every node, parents inferred by replaying the chain rule, plus inferred waits."""
    replay = _Replay(nodes, program_start_ns)
    events: list[tuple[int, int, int, Recorded]] = []
    for node in nodes:
        # At equal times an end comes before a start (a call that begins the instant its
        # parent ends still sees it as a leaf).
        events.append((node.start_ns, 1, node.seq, node))
        events.append((node.end_ns, 0, node.seq, node))
    events.sort(key=lambda event: event[:3])
    for _, is_start, _, node in events:
        if is_start:
            replay.start(node)
        else:
            replay.end(node)
    return replay.nodes


def _visible(thread_id: str, other: str) -> bool:
    """Whether ``other``'s nodes can be leaves of ``thread_id`` (same, ancestor or descendant)."""
    return (
        other == thread_id or thread_id.startswith(other + ".") or other.startswith(thread_id + ".")
    )


def _from_recorded(nodes: list[Recorded], program_start_ns: int) -> dict[str, Recorded]:
    """Every node with its recorded parents, plus a wait for each parent without a span."""
    everything = {node.node_id: node for node in nodes}
    children: dict[str, list[Recorded]] = {}
    for node in nodes:
        node.parents = tuple(node.recorded_parents or ())
        for parent in node.parents:
            children.setdefault(parent, []).append(node)
    missing: list[tuple[int, int, str, str]] = []
    for parent, kids in children.items():
        if parent in everything:
            continue
        thread_id, sep, seq_text = parent.rpartition(":")
        if not sep or not thread_id or not seq_text.isdigit():
            for kid in kids:  # not a node id the SDK makes: drop the edge
                kid.parents = tuple(p for p in kid.parents if p != parent)
            continue
        missing.append((min(k.start_ns for k in kids), int(seq_text), thread_id, parent))
    if not missing:
        return everything
    enclosing = _enclosing(everything)
    for end_ns, seq, thread_id, wait_id in sorted(missing):
        below: set[str] = set()
        frontier = [wait_id]
        while frontier:
            for kid in children.get(frontier.pop(), ()):
                if kid.node_id not in below:
                    below.add(kid.node_id)
                    frontier.append(kid.node_id)
        leaves = sorted(
            (
                node
                for node in everything.values()
                if node.node_id not in below
                and node.end_ns <= end_ns
                and _visible(thread_id, node.thread_id)
                # Not consumed: no node chained after it (calls nested in a tool start
                # while it runs and leave it a leaf of the tool's own chain).
                and not any(kid.start_ns >= node.end_ns for kid in children.get(node.node_id, ()))
                # Not the leaf of a nested chain that has closed (a call in a finished tool).
                and all(everything[a].end_ns > end_ns for a in enclosing.get(node.node_id, ()))
            ),
            key=lambda node: (node.end_ns, node.node_id),
        )
        started = max((leaf.end_ns for leaf in leaves), default=program_start_ns)
        wait = Recorded(
            wait_id,
            thread_id,
            seq,
            "think",
            "wait",
            min(started, end_ns),
            end_ns,
            parents=tuple(leaf.node_id for leaf in leaves),
        )
        everything[wait_id] = wait
        for leaf in leaves:
            children.setdefault(leaf.node_id, []).append(wait)
    return everything


def _enclosing(nodes: dict[str, Recorded]) -> dict[str, set[str]]:
    """Per node, its ancestors that were still running when it started (it ran inside them,
    e.g. a call a tool makes); only through parents that have a span."""
    found: dict[str, set[str]] = {}

    def of(node: Recorded) -> set[str]:
        known = found.get(node.node_id)
        if known is not None:
            return known
        found[node.node_id] = set()  # cycles cannot happen in an SDK graph; stop if they do
        mine: set[str] = set()
        for parent_id in node.parents:
            parent = nodes.get(parent_id)
            if parent is None:
                continue
            if parent.end_ns > node.start_ns:
                mine.add(parent_id)
            mine |= {a for a in of(parent) if nodes[a].end_ns > node.start_ns}
        found[node.node_id] = mine
        return mine

    for node in list(nodes.values()):
        of(node)
    return found


def _parents_first(nodes: list[Recorded]) -> list[Recorded]:
    """``nodes`` (in start order) reordered, only where needed, so parents come first."""
    placed: set[str] = set()
    out: list[Recorded] = []
    waiting = list(nodes)
    while waiting:
        ready = next(n for n in waiting if all(p in placed for p in n.parents))
        waiting.remove(ready)
        placed.add(ready.node_id)
        out.append(ready)
    return out
