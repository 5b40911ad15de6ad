"""``Chain``: how nodes made one after another, or together, get their DAG parents.

Pure data, like the rest of ``agentrt.program``: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrt.program.model import Node

__all__ = ["Chain"]


@dataclass(slots=True)
class Chain:
    """A sequential chain of nodes: the leaves are the parents of the next node.

    When a node finishes, its parents leave the leaf set and the node joins it, so calls made
    one after another form a chain, and calls started together from the same leaves become
    siblings whose join is the parent set of whatever comes next.
    """

    leaves: list[str] = field(default_factory=list)

    def parents(self) -> tuple[str, ...]:
        return tuple(self.leaves)

    def on_done(self, node: Node) -> None:
        kept = [leaf for leaf in self.leaves if leaf not in node.parent_ids and leaf != node.id]
        kept.append(node.id)
        self.leaves = kept

    def join(self, base: list[str], branches: list[Chain]) -> None:
        """Merge branches forked from ``base``: the new leaves are theirs plus ours since."""
        merged = [leaf for leaf in self.leaves if leaf not in base]
        for branch in branches:
            for leaf in branch.leaves:
                if leaf not in merged:
                    merged.append(leaf)
        self.leaves = merged or list(base)
