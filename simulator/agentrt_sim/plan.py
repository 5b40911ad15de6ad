"""A program compiled to index-based arrays, so the event loop never looks up ids by string.

Compiled once per program and shared by every configuration that replays it (read-only).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrt_sim.workloads.program import LLMNode, Program

__all__ = ["ProgramPlan", "compile_program"]


@dataclass(frozen=True, slots=True)
class ProgramPlan:
    """Read-only, index-based view of a :class:`Program` (node ``i`` = ``program.nodes[i]``)."""

    program: Program
    #: True for LLM calls, False for waits.
    is_llm: tuple[bool, ...]
    #: Parent indices of each node (DAG edges).
    parents: tuple[tuple[int, ...], ...]
    #: Children indices of each node (DAG edges).
    children: tuple[tuple[int, ...], ...]
    #: Number of parents of each node.
    num_parents: tuple[int, ...]
    #: Context node index of each node; -1 = the root prefix.
    context: tuple[int, ...]
    #: Number of nodes whose context is this node (how long its prefix must be kept).
    context_refs: tuple[int, ...]
    #: Prompt length of each LLM call, template and memory included; 0 for waits (tokens).
    prompt_len: tuple[int, ...]
    #: Length of each node's prefix (prompt + output, or context + result; tokens), without
    #: the call's template and memory (``agentrt_sim.workloads.program``).
    prefix_len: tuple[int, ...]
    #: Nodes without parents, released when the program arrives.
    roots: tuple[int, ...]
    #: System prompt + root input (tokens).
    root_len: int
    #: Sum of output tokens over all calls (tokens).
    total_output_tokens: int


def compile_program(program: Program) -> ProgramPlan:
    """Index ``program``'s DAG. The program must be valid (see ``Program.validate``)."""
    index = {node.node_id: i for i, node in enumerate(program.nodes)}
    count = len(program.nodes)
    children: list[list[int]] = [[] for _ in range(count)]
    context = [-1] * count
    refs = [0] * count
    prompt_len = [0] * count
    prefix_len = [0] * count
    root_len = program.system_prompt_tokens + program.root_prompt_tokens
    outputs: dict[str, int] = {}
    for i, node in enumerate(program.nodes):
        for parent in node.parents:
            children[index[parent]].append(i)
        if node.context is not None:
            context[i] = index[node.context]
            refs[context[i]] += 1
        base = root_len if context[i] < 0 else prefix_len[context[i]]
        if isinstance(node, LLMNode):
            body = base + node.new_prompt_tokens
            prompt_len[i] = body + node.header_tokens(outputs)
            prefix_len[i] = body + node.output_tokens
            outputs[node.node_id] = node.output_tokens
        else:
            prefix_len[i] = base + node.result_tokens
    return ProgramPlan(
        program=program,
        is_llm=tuple(isinstance(node, LLMNode) for node in program.nodes),
        parents=tuple(tuple(index[p] for p in node.parents) for node in program.nodes),
        children=tuple(tuple(c) for c in children),
        num_parents=tuple(len(node.parents) for node in program.nodes),
        context=tuple(context),
        context_refs=tuple(refs),
        prompt_len=tuple(prompt_len),
        prefix_len=tuple(prefix_len),
        roots=tuple(i for i, node in enumerate(program.nodes) if not node.parents),
        root_len=root_len,
        total_output_tokens=program.output_tokens(),
    )
