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

**Engine chains.** The engine's prefix cache keys blocks by a chain of its own
(:func:`agentrt_emulator.core.kv_cache.extend_hashes`, unsalted seed, the engine's block size).
Hashing a long agent's whole prompt at every call costs more than the rest of the call, so
each kept prefix also keeps, per *header* (a call's template and memory, ``None`` for none),
the engine chain of the prompt form under that header as far as it is known — the chain of a
prefix of it stays valid when the context grows by appending, since the header sits right
after the system prompt — and every call hands the engine its prompt's chain
(``EngineRequest.prompt_hashes``), extended over its new blocks only. The chain of a system
prompt, alone or followed by a template, is computed once per run (:class:`TokenSpace`).
Same hash values as the engine computing them itself: only less work.
"""

from __future__ import annotations

from typing import NamedTuple

from agentrt_controller.routing.hashing import extend_token_block_hashes
from agentrt_emulator.core.kv_cache import extend_hashes, salt_seed
from agentrt_sim.plan import ProgramPlan
from agentrt_sim.workloads.program import LLMNode, WaitNode

__all__ = ["CallTokens", "ProgramTokens", "TokenSpace", "extend_engine_chain"]

#: What identifies a call's header (between system prompt and body): ``None`` = no header,
#: else (template id, template tokens, memory node ids).
_HeaderKey = tuple[str | None, int, tuple[str, ...]] | None
#: Per header: (router chain or ``None`` when not hashing, engine chain) of a prefix of the
#: prompt form of a kept prefix under that header.
_Chains = dict[_HeaderKey, tuple[list[int] | None, list[int]]]

#: The engine's chain seed for requests without ``cache_salt`` (all simulated requests).
_ENGINE_SEED = salt_seed(None)


def extend_engine_chain(base: list[int], tokens: list[int], block_size: int) -> list[int]:
    """A new list: ``base`` (the engine chain of a prefix of ``tokens``) extended over the
    remaining full blocks of ``tokens``, by the engine's own
    :func:`~agentrt_emulator.core.kv_cache.extend_hashes`."""
    out = list(base)
    full = len(tokens) // block_size
    if len(out) < full:
        extend_hashes(out, tuple(tokens), block_size, _ENGINE_SEED, full)
    return out


class CallTokens(NamedTuple):
    """An LLM call's token ids and the chains over its prompt."""

    prompt: list[int]
    output: list[int]
    #: Router chain of the prompt (:attr:`CallFacts.block_hashes`); empty unless hashing.
    hashes: tuple[int, ...]
    #: Engine chain of the prompt's full blocks (``EngineRequest.prompt_hashes``).
    engine_hashes: list[int]


class TokenSpace:
    """Allocates fresh token ids for one simulation run (deterministic)."""

    def __init__(self, engine_block_size: int = 16) -> None:
        self._next = 1
        self._system_prompts: dict[str, list[int]] = {}
        self.engine_block_size = engine_block_size
        #: (system prompt id, its length, template id, template tokens, router block size) ->
        #: the chains of system prompt (+ template): shared by every program.
        self._start_chains: dict[
            tuple[str, int, str | None, int, int | None], tuple[list[int] | None, list[int]]
        ] = {}

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

    def start_chains(
        self,
        system_prompt_id: str,
        system_len: int,
        template: str | None,
        template_tokens: int,
        block_size: int | None,
    ) -> tuple[list[int] | None, list[int]]:
        """Router chain (``None`` when ``block_size`` is) and engine chain of the system
        prompt followed by the template (ids already handed out: allocates none)."""
        key = (system_prompt_id, system_len, template, template_tokens, block_size)
        chains = self._start_chains.get(key)
        if chains is None:
            ids = self.system_prompt(system_prompt_id, system_len)
            if template is not None:
                ids = ids + self.template(template, template_tokens)
            router = None
            if block_size is not None:
                router = extend_token_block_hashes((), ids, block_size)
            chains = self._start_chains[key] = (
                router,
                extend_engine_chain([], ids, self.engine_block_size),
            )
        return chains


class _Prefix:
    """A kept prefix: its token ids (body form), its router chain (when hashing), the
    chains of its prompt forms per header, and the header of the call that made it (the
    form the engine cached: ``None`` = the body form itself)."""

    __slots__ = ("chain", "chains", "header", "tokens")

    def __init__(
        self,
        tokens: list[int],
        chain: list[int] | None,
        chains: _Chains,
        header: _HeaderKey = None,
    ) -> None:
        self.tokens = tokens
        self.chain = chain
        self.chains = chains
        self.header = header


class ProgramTokens:
    """Builds the prompts of one program's calls, in the order the simulator releases them.

    ``block_size``: also maintain router prefix hash chains of that block size (``None`` =
    don't). Engine chains are always kept, at ``space.engine_block_size``.
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
        system_len = program.system_prompt_tokens
        tokens = space.system_prompt(program.system_prompt_id, system_len) + space.fresh(
            program.root_prompt_tokens
        )
        router, engine = space.start_chains(
            program.system_prompt_id, system_len, None, 0, block_size
        )
        self._root = _Prefix(tokens, self._chain(router, tokens), {None: (None, engine)})
        self._prefix: dict[int, _Prefix] = {}
        self._refs = list(plan.context_refs)
        self._system_len = system_len
        #: Outputs of calls some later call holds in its memory, by node id.
        self._memory: dict[str, list[int]] = {}
        self._memory_refs = {
            memory for node in program.nodes if isinstance(node, LLMNode) for memory in node.memory
        }
        #: Calls in flight: their body form (context + fresh ids), the context they extend,
        #: and their header.
        self._bodies: dict[int, tuple[list[int], _Prefix, _HeaderKey]] = {}

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
        its first LLM parent's prompt + output if still kept; ``None`` if unknown. In the form
        the engine cached it: under the header of the call that made it (a templated call's
        prompt has its template and memory after the system prompt, which the kept body form
        leaves out)."""
        ctx = self._plan.context[node]
        if ctx >= 0:
            kept = self._prefix.get(ctx)
            return self._cached_form(kept) if kept is not None else None
        for parent in self._plan.parents[node]:
            kept = self._prefix.get(parent)
            if kept is not None:
                return self._cached_form(kept)
        return None

    def _cached_form(self, kept: _Prefix) -> list[int]:
        """``kept``'s tokens as the engine saw them: the body form with its header inserted
        after the system prompt."""
        if kept.header is None:
            return kept.tokens
        return self._with_header(kept.tokens, kept.header)

    def _with_header(self, body: list[int], key: _HeaderKey) -> list[int]:
        """``body`` (system prompt, then the rest) with the header ``key`` (template, then
        the outputs of the memory calls) after the system prompt: the prompt form."""
        assert key is not None
        template, template_tokens, memory = key
        header = self._space.template(template, template_tokens) if template else []
        for node_id in memory:
            header += self._memory[node_id]
        return body[: self._system_len] + header + body[self._system_len :]

    def _known_chains(
        self, context: _Prefix, key: _HeaderKey, spec: LLMNode
    ) -> tuple[list[int] | None, list[int]]:
        """The longest known chains of a prefix of the prompt under ``key`` over
        ``context``."""
        if key is None:
            engine = context.chains.get(key)
            return context.chain, engine[1] if engine is not None else []
        known = context.chains.get(key)
        if known is not None:
            return known
        if not spec.memory:  # system prompt + template: the same in every program
            program = self._plan.program
            return self._space.start_chains(
                program.system_prompt_id,
                self._system_len,
                spec.template,
                spec.template_tokens,
                self._block_size,
            )
        return None, []

    def prompt_and_output(self, node: int) -> CallTokens:
        """LLM call ``node``: its prompt, the output it will generate, and the prompt's chains
        (router chain empty unless hashing)."""
        spec = self._plan.program.nodes[node]
        assert isinstance(spec, LLMNode)
        context = self._take_context(node)
        body = context.tokens + self._space.fresh(spec.new_prompt_tokens)
        output = self._space.fresh(spec.output_tokens)
        engine_bs = self._space.engine_block_size
        if spec.template is None and not spec.memory:
            self._bodies[node] = (body, context, None)
            router, engine = self._known_chains(context, None, spec)
            hashes = self._chain(router, body)
            return CallTokens(
                body, output, tuple(hashes or ()), extend_engine_chain(engine, body, engine_bs)
            )
        key: _HeaderKey = (spec.template, spec.template_tokens, spec.memory)
        self._bodies[node] = (body, context, key)
        prompt = self._with_header(body, key)
        router, engine = self._known_chains(context, key, spec)
        hashes = self._chain(router, prompt)
        return CallTokens(
            prompt, output, tuple(hashes or ()), extend_engine_chain(engine, prompt, engine_bs)
        )

    def finish_call(
        self,
        node: int,
        prompt: list[int],
        output: list[int],
        hashes: tuple[int, ...] = (),
        engine_hashes: list[int] | None = None,
    ) -> tuple[int, ...]:
        """Keep the call's prompt + output if a later node extends it. Returns the hash chain
        over what was kept (prompt + output), for the router's index; ``hashes`` when nothing
        was kept or chains are off. A templated call keeps its body form and returns the chain
        over what the engine saw (its whole prompt + output). ``engine_hashes``: the engine
        chain of ``prompt`` (:attr:`CallTokens.engine_hashes`), kept for later calls."""
        spec = self._plan.program.nodes[node]
        if spec.node_id in self._memory_refs:
            self._memory[spec.node_id] = output
        engine = engine_hashes or []
        tokens, context, key = self._bodies.pop(node, ([], _NO_PREFIX, None))
        if key is not None:
            seen = self._chain(list(hashes), prompt + output)
            if self._refs[node]:
                tokens = tokens + output
                chains = dict(context.chains)
                chains[key] = (seen, engine)
                self._prefix[node] = _Prefix(
                    tokens, self._chain(context.chain, tokens), chains, header=key
                )
            if self._block_size is None:
                return hashes
            return tuple(seen or ())
        if self._refs[node]:
            tokens = prompt + output
            base = list(hashes) if self._block_size is not None else None
            chain = self._chain(base, tokens)
            chains = dict(context.chains)
            chains[None] = (None, engine)
            self._prefix[node] = _Prefix(tokens, chain, chains)
            if chain is not None:
                return tuple(chain)
        return hashes

    def finish_wait(self, node: int) -> None:
        """A wait ended: build its prefix (context + result) if a later node extends it."""
        spec = self._plan.program.nodes[node]
        assert isinstance(spec, WaitNode)
        if self._refs[node]:
            context = self._take_context(node)
            tokens = context.tokens + self._space.fresh(spec.result_tokens)
            self._prefix[node] = _Prefix(
                tokens, self._chain(context.chain, tokens), dict(context.chains), context.header
            )
        elif self._plan.context[node] >= 0:
            self._take_context(node)


#: The context of a call not built here: no known chains.
_NO_PREFIX = _Prefix([], None, {})
