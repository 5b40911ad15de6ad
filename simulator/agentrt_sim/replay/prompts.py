"""Chat prompts for a replayed program, sized so the server sees the trace's token counts.

A trace describes prompts by where their tokens come from (``agentrt_sim.workloads.program``):
the shared system prompt, the program's root input, each call's fresh tokens, each call's
output and each tool's observation. The :class:`PromptBuilder` turns that into chat messages:

* ``system``: filler seeded by ``system_prompt_id`` only, so every program of one kind sends
  the identical text (and a shorter prompt is a prefix of a longer one, as in
  ``agentrt_sim.tokens``);
* ``user``: the root input, then per node its fresh tokens or its tool observation, each
  seeded by (program id, node id), so no two programs share more than the system prompt;
* ``assistant``: the text the server actually returned for an earlier call.

A node's messages extend its ``context`` node's messages, so the token prefix the server can
reuse is exactly the one the simulator models. A call with a ``template`` sends, after the
system message, a ``user`` message of template filler seeded by the template id only (the same
text in every program), then its ``memory`` calls' answers as ``assistant`` messages, then the
context's messages after the system message and its own fresh tokens (the template message gives
up as many words as the memory messages' own template tokens, a prefix of the same filler, so
the call's count matches the trace); what later nodes extend is that without the template and
memory (``agentrt_sim.tokens`` builds token ids the same way).

**Sizing.** The chat template adds tokens of its own (BOS, role headers, end-of-turn markers,
the generation prompt). :class:`TemplateCosts` measures them once with the server's
``/tokenize`` (``agentrt_sim.replay.server.calibrate``). The builder keeps, per prefix, the
tokens the server will see (``live``) next to the tokens the trace counts (``trace``) and
sizes each new user message so that ``live + generation prompt == trace`` whenever the
segment is long enough to absorb the template's overhead; otherwise the difference carries
forward and is reported per call (:attr:`CallPrompt.expected_prompt_tokens`).

**No empty message.** No client sends a message without content and some routers refuse one
(sglang-router answers 400), so a message the sizing leaves empty carries one filler word
instead (counted in ``live``), and so does an assistant message for an empty answer.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from agentrt_sim.workloads.program import LLMNode, Program, WaitNode

__all__ = ["FILLER_WORDS", "CallPrompt", "PromptBuilder", "TemplateCosts", "filler"]

#: Short common English words: one token each in the emulator's tokenizer (a letter run of at
#: most 7 characters with its leading space) and, for nearly all of them, in Llama-3's BPE.
_WORDS = """
    the of and to in is was for on that with as by at from his her are be this an or had not but
    which one all were she they you we their has have been more when who will there can no if out
    so said what up its about into than them only some time could new these two may then do first
    any like my now over such our man me even most made after also did many off before must well
    back years where much your way down should each just those people how too little state good
    very make world still own see men work long get here both life being under never day same know
    while last might us great old year come since go came right used take three states few house
    use during again place around home small found went say part once high upon school every does
    got united left number course war until always away fact though water less public put think
    almost hand enough far took head yet system set better told night end why called didn eyes
    find going look asked later knew point next city give group toward young let room side social
    given order second rather per face among form often things early white case large need big
    four within felt along saw best church ever least power cat dog sun red blue green tree road
    book door car town king game food song bird fish rain wind hill farm ship
"""
FILLER_WORDS: tuple[str, ...] = tuple(_WORDS.split())


def _seed(*parts: str) -> int:
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def filler(words: int, *seed: str) -> str:
    """``words`` filler words joined by spaces, a deterministic function of ``seed``.

    The stream is prefix-consistent: ``filler(n, s)`` starts with ``filler(m, s)`` for m < n.
    """
    rng = random.Random(_seed(*seed))
    return " ".join(FILLER_WORDS[rng.getrandbits(8)] for _ in range(max(0, words)))


@dataclass(frozen=True, slots=True)
class TemplateCosts:
    """What the server's tokenizer and chat template cost (tokens), measured or assumed.

    Defaults are Llama-3's chat template with one token per filler word, used when the
    server has no ``/tokenize``.
    """

    #: Tokens per filler word (1.0 for the emulator and Llama-3).
    tokens_per_word: float = 1.0
    #: A system message without its content: BOS, header, end of turn (tokens).
    system_overhead: int = 6
    #: A user message without its content (tokens).
    user_overhead: int = 5
    #: An assistant message without its content (tokens).
    assistant_overhead: int = 5
    #: The generation prompt appended to every call (the assistant header; tokens).
    generation_prompt: int = 4
    #: Whether the figures were measured with ``/tokenize`` (False = the defaults above).
    measured: bool = False

    def words_for(self, tokens: int) -> int:
        return max(0, round(tokens / self.tokens_per_word))

    def tokens_of(self, words: int) -> int:
        return round(words * self.tokens_per_word)


@dataclass(frozen=True, slots=True)
class _Prefix:
    messages: tuple[dict[str, str], ...]
    #: Tokens of ``messages`` as the server renders them, without a generation prompt.
    live: int
    #: Tokens the trace counts for this prefix.
    trace: int


@dataclass(frozen=True, slots=True)
class CallPrompt:
    """The prompt of one LLM call (``repr`` hides the text)."""

    messages: list[dict[str, str]] = field(repr=False)
    #: Prompt tokens the trace implies for this call.
    trace_prompt_tokens: int
    #: Prompt tokens the server should count (equal to the trace's unless a segment was too
    #: short to absorb the template's overhead; exact only with measured costs).
    expected_prompt_tokens: int


class PromptBuilder:
    """Messages of one program's calls; ``prompt`` a call once its context has finished, then
    ``record_output`` its result before any node that extends it."""

    def __init__(self, program: Program, costs: TemplateCosts) -> None:
        self._program = program
        self._costs = costs
        self._nodes = {node.node_id: node for node in program.nodes}
        self._prefixes: dict[str, _Prefix] = {}
        self._prompts: dict[str, _Prefix] = {}
        #: Answers of calls some later call holds in its memory: message, live and trace tokens.
        self._memory: dict[str, _Prefix] = {}
        self._memory_refs = {
            m for node in program.nodes if isinstance(node, LLMNode) for m in node.memory
        }
        system = self._user_like(
            _Prefix((), 0, 0),
            program.system_prompt_tokens,
            "system",
            ("system", program.system_prompt_id),
            overhead=costs.system_overhead,
        )
        self._root = self._user_like(
            system, program.root_prompt_tokens, "user", ("root", program.program_id)
        )

    def _context(self, context: str | None) -> _Prefix:
        if context is None:
            return self._root
        try:
            return self._prefixes[context]
        except KeyError:
            raise ValueError(f"node {context!r} has not finished: no prefix yet") from None

    def _user_like(
        self,
        base: _Prefix,
        tokens: int,
        role: str,
        seed: tuple[str, ...],
        *,
        overhead: int | None = None,
    ) -> _Prefix:
        """``base`` plus one message standing for ``tokens`` trace tokens (or none, when
        skipping it leaves the server's count closer to the trace's)."""
        costs = self._costs
        overhead = costs.user_overhead if overhead is None else overhead
        trace = base.trace + tokens
        # Aim: live + generation prompt == trace, so a call right after this prefix matches.
        target = trace - costs.generation_prompt - base.live - overhead
        if role == "system" and not base.messages:
            pass  # the system message is always sent: it carries the shared prefix
        elif target <= 0:
            skip_error = abs(base.live + costs.generation_prompt - trace)
            shortest = overhead + costs.tokens_of(1)  # one word: a message is never empty
            shortest_error = abs(base.live + shortest + costs.generation_prompt - trace)
            if tokens == 0 or skip_error <= shortest_error:
                return _Prefix(base.messages, base.live, trace)
        words = max(1, costs.words_for(max(0, target)))
        message = {"role": role, "content": filler(words, *seed)}
        live = base.live + overhead + costs.tokens_of(words)
        return _Prefix((*base.messages, message), live, trace)

    def prompt(self, node_id: str) -> CallPrompt:
        """The messages of LLM call ``node_id`` (its context must have finished)."""
        node = self._nodes[node_id]
        if not isinstance(node, LLMNode):
            raise ValueError(f"node {node_id!r} is not an LLM call")
        seed = ("new", self._program.program_id, node_id)
        context = self._context(node.context)
        if node.template is None and not node.memory:
            prefix = self._user_like(context, node.new_prompt_tokens, "user", seed)
            self._prompts[node_id] = prefix
            return CallPrompt(
                list(prefix.messages),
                prefix.trace,
                prefix.live + self._costs.generation_prompt,
            )
        header = self._header(node, context)
        sent = self._user_like(header, node.new_prompt_tokens, "user", seed)
        # The body form (no template, no memory) is what later nodes extend.
        added = sent.messages[len(header.messages) :]
        self._prompts[node_id] = _Prefix(
            (*context.messages, *added),
            context.live + sent.live - header.live,
            context.trace + node.new_prompt_tokens,
        )
        expected = sent.live + self._costs.generation_prompt
        return CallPrompt(list(sent.messages), sent.trace, expected)

    def _header(self, node: LLMNode, context: _Prefix) -> _Prefix:
        """``context`` with the call's template and memory answers after its system message."""
        costs = self._costs
        system, rest = context.messages[:1], context.messages[1:]
        messages = list(system)
        live, trace = context.live, context.trace
        if node.template is not None:
            # The memory messages' own tokens come out of the template (filler is
            # prefix-consistent: a shorter template is a prefix of the full one).
            absorbed = costs.user_overhead + len(node.memory) * costs.assistant_overhead
            words = max(1, costs.words_for(max(0, node.template_tokens - absorbed)))
            messages.append({"role": "user", "content": filler(words, "template", node.template)})
            live += costs.user_overhead + costs.tokens_of(words)
            trace += node.template_tokens
        for memory in node.memory:
            answer = self._memory[memory]
            messages += answer.messages
            live += answer.live
            trace += answer.trace
        return _Prefix((*messages, *rest), live, trace)

    def record_output(self, node_id: str, text: str, output_tokens: int) -> None:
        """Call ``node_id`` returned ``text`` (``output_tokens`` tokens, as the server counted):
        its prefix for later calls is its prompt followed by that answer."""
        prompt = self._prompts.pop(node_id)
        node = self._nodes[node_id]
        assert isinstance(node, LLMNode)
        live = self._costs.assistant_overhead + output_tokens
        if not text:  # an empty answer is sent back as one word: no message is empty
            text = filler(1, "answer", self._program.program_id, node_id)
            live += self._costs.tokens_of(1)
        message = {"role": "assistant", "content": text}
        if node_id in self._memory_refs:
            self._memory[node_id] = _Prefix((message,), live, node.output_tokens)
        self._prefixes[node_id] = _Prefix(
            (*prompt.messages, message),
            prompt.live + live,
            prompt.trace + node.output_tokens,
        )

    def record_wait(self, node_id: str) -> None:
        """Wait ``node_id`` finished: its prefix is its context's plus its result (a user
        message of ``result_tokens`` filler; none for a wait that returns nothing)."""
        node = self._nodes[node_id]
        assert isinstance(node, WaitNode)
        base = self._context(node.context)
        seed = ("result", self._program.program_id, node_id)
        self._prefixes[node_id] = self._user_like(base, node.result_tokens, "user", seed)
