"""Token ids for simulated prompts, built so the engine's prefix cache sees realistic sharing.

Every segment of fresh tokens (a system prompt, a user message, a tool observation, a call's
output) gets ids no other segment has, from one counter per run. A system prompt is allocated
once per ``system_prompt_id`` and reused, so programs of one kind share exactly that prefix. A
node's prefix list is kept only while later nodes still need to extend it (``context_refs``),
which bounds memory to the live frontier of each program.

A call with a template (``agentrt_sim.workloads.program``) is sent as the system prompt, the
template's ids (allocated once per template id, like a system prompt), the outputs of its memory
calls, then its context's ids after the system prompt and its fresh ids; what it keeps for later
nodes is the body form without template and memory, so the trajectory's ids are the same in
every call type while the engine's prefix cache (a hash chain from the first token) shares a
call's question and trajectory only with calls under the same header.

With ``block_size`` set, each kept prefix also keeps its prefix hash chain
(:func:`agentrt_controller.routing.hashing.extend_token_block_hashes`), so a prompt's
``CallFacts.block_hashes`` for prefix-aware routing costs only its new blocks.
"""

from __future__ import annotations

from agentrt_controller.routing.hashing import extend_token_block_hashes
from agentrt_sim.plan import ProgramPlan
from agentrt_sim.workloads.program import LLMNode, WaitNode

__all__ = ["ProgramTokens", "TokenSpace"]

#: A kept prefix: its token ids and (when hashing) the chain over its full blocks.
_Prefix = tuple[list[int], list[int] | None]


class TokenSpace:
    """Allocates fresh token ids for one simulation run (deterministic)."""

    def __init__(self) -> None:
        self._next = 1
        self._system_prompts: dict[str, list[int]] = {}

    def fresh(self, count: int) -> list[int]:
        """``count`` ids never handed out before in this run."""
        start = self._next
        self._next += count
        return list(range(start, start + count))

    def template(self, template_id: str, count: int) -> list[int]:
        """The shared ids of a per-call-type template (as :meth:`system_prompt`, in a namespace
        of their own)."""
        return self.system_prompt("\x1ftemplate\x1f" + template_id, count)

    def system_prompt(self, system_prompt_id: str, count: int) -> list[int]:
        """The shared ids of a system prompt: every program with ``system_prompt_id`` gets the
        same ids (a longer request extends them, a shorter one gets a prefix)."""
        ids = self._system_prompts.get(system_prompt_id)
        if ids is None or len(ids) < count:
            ids = (ids or []) + self.fresh(count - len(ids or []))
            self._system_prompts[system_prompt_id] = ids
        return ids[:count]


class ProgramTokens:
    """Builds the prompts of one program's calls, in the order the simulator releases them.

    ``block_size``: also maintain prefix hash chains of that block size (``None`` = don't).
    """

    __slots__ = (
        "_block_size",
        "_bodies",
        "_memory",
        "_memory_refs",
        "_plan",
        "_prefix",
        "_refs",
        "_root",
        "_space",
        "_system_len",
    )

    def __init__(self, plan: ProgramPlan, space: TokenSpace, block_size: int | None = None) -> None:
        program = plan.program
        self._plan = plan
        self._space = space
        self._block_size = block_size
        tokens = space.system_prompt(
            program.system_prompt_id, program.system_prompt_tokens
        ) + space.fresh(program.root_prompt_tokens)
        self._root: _Prefix = (tokens, self._chain(None, tokens))
        self._prefix: dict[int, _Prefix] = {}
        self._refs = list(plan.context_refs)
        self._system_len = program.system_prompt_tokens
        #: Outputs of calls some later call holds in its memory, by node id.
        self._memory: dict[str, list[int]] = {}
        self._memory_refs = {
            memory for node in program.nodes if isinstance(node, LLMNode) for memory in node.memory
        }
        #: Body form (context + fresh ids, and its chain) of templated calls in flight.
        self._bodies: dict[int, _Prefix] = {}

    @property
    def kept_prefixes(self) -> int:
        """Prefixes held for later nodes (0 once the program has finished)."""
        return len(self._prefix)

    def _chain(self, base: list[int] | None, tokens: list[int]) -> list[int] | None:
        if self._block_size is None:
            return None
        return extend_token_block_hashes(base or (), tokens, self._block_size)

    def _take_context(self, node: int) -> _Prefix:
        """The prefix a node extends; releases it once its last user took it."""
        ctx = self._plan.context[node]
        if ctx < 0:
            return self._root
        prefix = self._prefix[ctx]
        self._refs[ctx] -= 1
        if self._refs[ctx] == 0:
            del self._prefix[ctx]
        return prefix

    def pin_prefix(self, node: int) -> list[int] | None:
        """The cached-by-now prefix a wait's thread will extend: the wait's context, or else
        its first LLM parent's prompt + output if still kept; ``None`` if unknown."""
        ctx = self._plan.context[node]
        if ctx >= 0:
            kept = self._prefix.get(ctx)
            return kept[0] if kept is not None else None
        for parent in self._plan.parents[node]:
            kept = self._prefix.get(parent)
            if kept is not None:
                return kept[0]
        return None

    def prompt_and_output(self, node: int) -> tuple[list[int], list[int], tuple[int, ...]]:
        """LLM call ``node``: its prompt, the output it will generate, and the prompt's hash
        chain (empty unless hashing)."""
        spec = self._plan.program.nodes[node]
        assert isinstance(spec, LLMNode)
        context, chain = self._take_context(node)
        body = context + self._space.fresh(spec.new_prompt_tokens)
        output = self._space.fresh(spec.output_tokens)
        if spec.template is None and not spec.memory:
            hashes = self._chain(chain, body)
            return body, output, tuple(hashes or ())
        self._bodies[node] = (body, chain)
        header = self._space.template(spec.template, spec.template_tokens) if spec.template else []
        for memory in spec.memory:
            header += self._memory[memory]
        prompt = body[: self._system_len] + header + body[self._system_len :]
        hashes = self._chain(None, prompt)
        return prompt, output, tuple(hashes or ())

    def finish_call(
        self, node: int, prompt: list[int], output: list[int], hashes: tuple[int, ...] = ()
    ) -> tuple[int, ...]:
        """Keep the call's prompt + output if a later node extends it. Returns the hash chain
        over what was kept (prompt + output), for the router's index; ``hashes`` when nothing
        was kept or chains are off. A templated call keeps its body form and returns the chain
        over what the engine saw (its whole prompt + output)."""
        spec = self._plan.program.nodes[node]
        if spec.node_id in self._memory_refs:
            self._memory[spec.node_id] = output
        body = self._bodies.pop(node, None)
        if body is not None:
            if self._refs[node]:
                tokens, chain = body
                tokens = tokens + output
                self._prefix[node] = (tokens, self._chain(chain, tokens))
            if self._block_size is None:
                return hashes
            return tuple(self._chain(list(hashes), prompt + output) or ())
        if self._refs[node]:
            tokens = prompt + output
            base = list(hashes) if self._block_size is not None else None
            chain = self._chain(base, tokens)
            self._prefix[node] = (tokens, chain)
            if chain is not None:
                return tuple(chain)
        return hashes

    def finish_wait(self, node: int) -> None:
        """A wait ended: build its prefix (context + result) if a later node extends it."""
        spec = self._plan.program.nodes[node]
        assert isinstance(spec, WaitNode)
        if self._refs[node]:
            context, chain = self._take_context(node)
            tokens = context + self._space.fresh(spec.result_tokens)
            self._prefix[node] = (tokens, self._chain(chain, tokens))
        elif self._plan.context[node] >= 0:
            self._take_context(node)
