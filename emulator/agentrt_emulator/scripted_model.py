"""The scripted model: decides what the emulator "generates". **It is not a language model.**

It writes filler words, tool calls with arguments that are valid against the offered tool's
JSON schema, and JSON content valid against a requested ``response_format`` schema, so that
agent programs (ReAct, map-reduce, tree search) run end to end against the emulator. Nothing
it writes means anything.

Determinism: every choice comes from a :class:`random.Random` seeded with
``blake2b(server_seed, request fingerprint, choice index)``; the fingerprint covers the
messages / prompt, the tools, the request's ``seed`` field and every other field that shapes
the output. The same request to a server started with the same ``--seed`` gets the same
output; the ``n`` choices of one request differ from each other.

Decisions (in this order):

1. **Tool call or answer** (chat only, when ``tools`` are offered):
   ``tool_choice="none"`` → answer; ``"required"`` or a named function → call (that function);
   the ``agentrt_tool_call`` hint (true / false) decides when given; otherwise ``auto`` calls a
   tool with probability 0.8 when no tool result came back since the last user message, 0.5
   after one, 0.3 after two, 0.2 after more. A call picks one tool at random (two distinct
   ones with probability 0.15 when ``parallel_tool_calls`` is not false and several are
   offered). Arguments: :func:`agentrt_emulator.schema_values.value_for_schema`.
2. **Content**: JSON valid against ``response_format`` (``json_schema`` or ``json_object``),
   else filler sentences.
3. **Length** (in tokens, including the end-of-turn token that ends a natural stop):
   ``ignore_eos`` → exactly ``max_tokens`` (filler continues past the end of the planned body;
   ``finish_reason="length"``). Otherwise a text answer has the hinted length
   (``agentrt_output_tokens``) or one drawn from a log-normal with median
   :data:`DEFAULT_MEDIAN_TOKENS` clamped to [4, 512]; tool calls and JSON are as long as their
   text. Anything longer than ``max_tokens`` is cut there (``finish_reason="length"``, and cut
   JSON is invalid, as with a real engine).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrt_emulator.schema_values import FILLER_WORDS, value_for_schema
from agentrt_emulator.tokenizer import ChatMessage, Special, Tokenizer, canonical_arguments

__all__ = [
    "DEFAULT_MEDIAN_TOKENS",
    "FinishReason",
    "GenerationSpec",
    "ScriptedModel",
    "ScriptedOutput",
    "ScriptedToolCall",
    "TokenDelta",
    "ToolSpec",
]

FinishReason = Literal["stop", "length", "tool_calls"]

#: Median length (tokens) of a text answer when no hint is given.
DEFAULT_MEDIAN_TOKENS = 48
_LENGTH_SIGMA = 0.8
_MIN_DEFAULT_TOKENS = 4
_MAX_DEFAULT_TOKENS = 512
_CALL_PROBABILITY_AFTER_RESULTS = (0.8, 0.5, 0.3, 0.2)
_PARALLEL_CALL_PROBABILITY = 0.15


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function tool offered to the model."""

    name: str
    #: JSON Schema of the arguments (``{}`` = any object).
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GenerationSpec:
    """Everything the scripted model looks at for one choice. Built by the server."""

    #: Chat messages; empty for a plain completion.
    messages: Sequence[ChatMessage] = ()
    #: Tools offered (chat only).
    tools: Sequence[ToolSpec] = ()
    #: ``"auto"``, ``"none"``, ``"required"`` or the name of the one function to call.
    tool_choice: str = "auto"
    parallel_tool_calls: bool = True
    #: ``None`` (text), ``{}`` (json_object) or the JSON Schema of ``json_schema``.
    json_schema: Mapping[str, Any] | None = None
    #: Upper bound of output tokens (already capped by the context length); >= 1.
    max_tokens: int = 16
    ignore_eos: bool = False
    #: ``agentrt_output_tokens``: length of a text answer, tokens; ``None`` = default law.
    output_tokens_hint: int | None = None
    #: ``agentrt_tool_call``: force (True) or forbid (False) a tool call; ``None`` = decide.
    tool_call_hint: bool | None = None
    #: Bytes identifying the request (prompt, options); mixed into the seed.
    fingerprint: bytes = b""
    #: Index of the choice among ``n``.
    choice_index: int = 0

    def __repr__(self) -> str:  # never print prompts
        return (
            f"GenerationSpec(messages={len(self.messages)}, tools={len(self.tools)}, "
            f"max_tokens={self.max_tokens}, choice={self.choice_index})"
        )


@dataclass(frozen=True, slots=True)
class TokenDelta:
    """What one output token adds to the visible response."""

    #: Text added to ``content``.
    content: str = ""
    #: The tool call this token belongs to, if any.
    tool_index: int | None = None
    #: True on the token after which the tool call's id and name are known (stream header).
    tool_start: bool = False
    #: Text added to the tool call's ``arguments``.
    tool_args: str = ""


@dataclass(frozen=True, slots=True)
class ScriptedToolCall:
    id: str
    name: str
    #: Canonical JSON text of the arguments.
    arguments: str


@dataclass(frozen=True, slots=True)
class ScriptedOutput:
    """The full output of one choice, decided before the engine generates a single token."""

    #: Output token ids the engine will produce, in order (>= 1).
    token_ids: tuple[int, ...]
    #: One :class:`TokenDelta` per token id.
    deltas: tuple[TokenDelta, ...]
    #: The planned tool calls (complete; see :meth:`visible` for a cut-off prefix).
    tool_calls: tuple[ScriptedToolCall, ...]
    finish_reason: FinishReason

    def __repr__(self) -> str:
        return (
            f"ScriptedOutput(tokens={len(self.token_ids)}, tool_calls={len(self.tool_calls)}, "
            f"finish_reason={self.finish_reason!r})"
        )

    def visible(self, num_tokens: int) -> tuple[str, list[ScriptedToolCall]]:
        """Content and tool calls after the first ``num_tokens`` tokens were generated."""
        content: list[str] = []
        args: dict[int, list[str]] = {}
        for delta in self.deltas[:num_tokens]:
            content.append(delta.content)
            if delta.tool_index is not None and (delta.tool_start or delta.tool_index in args):
                args.setdefault(delta.tool_index, []).append(delta.tool_args)
        calls = [
            ScriptedToolCall(self.tool_calls[i].id, self.tool_calls[i].name, "".join(parts))
            for i, parts in sorted(args.items())
        ]
        return "".join(content), calls


class ScriptedModel:
    """Plans outputs; see the module docstring. Pure and synchronous; ``seed`` is ``--seed``."""

    def __init__(self, tokenizer: Tokenizer, seed: int = 0) -> None:
        self._tokenizer = tokenizer
        self._seed = seed

    def _rng(self, spec: GenerationSpec) -> random.Random:
        digest = hashlib.blake2b(digest_size=16)
        digest.update(self._seed.to_bytes(8, "little", signed=True))
        digest.update(spec.fingerprint)
        digest.update(spec.choice_index.to_bytes(4, "little"))
        return random.Random(int.from_bytes(digest.digest(), "little"))

    def generate(self, spec: GenerationSpec) -> ScriptedOutput:
        """Plan the output tokens of one choice."""
        rng = self._rng(spec)
        calls = self._tool_calls(spec, rng)
        text_answer = not calls and spec.json_schema is None
        if calls:
            content = ""
        elif spec.json_schema is not None:
            value = value_for_schema(spec.json_schema or {"type": "object"}, rng)
            content = json.dumps(value, ensure_ascii=False)
        elif spec.ignore_eos:
            content = filler_text(self._tokenizer, rng, spec.max_tokens)
        else:
            target = spec.output_tokens_hint or _default_length(rng)
            # Text of target - 1 tokens, then the end-of-turn token.
            content = filler_text(self._tokenizer, rng, max(target - 1, 0))
        body = self._tokenizer.assistant_body(
            content, [(call.name, call.arguments) for call in calls]
        )
        ids = [*body.ids]
        deltas = _deltas(body.pieces, body.ids)
        if not (spec.ignore_eos and text_answer):
            ids.append(int(Special.EOT))
            deltas.append(TokenDelta())
        if spec.ignore_eos:
            # Generation goes on past the end of turn, as with vLLM's ignore_eos.
            missing = spec.max_tokens - len(ids)
            if missing > 0:
                pad = self._tokenizer.tokenize(" " + filler_text(self._tokenizer, rng, missing))
                ids.extend(pad.ids)
                deltas.extend(TokenDelta(content=piece) for piece in pad.pieces)
            finish: FinishReason = "length"
        elif len(ids) > spec.max_tokens:
            finish = "length"
        else:
            finish = "tool_calls" if calls else "stop"
        cut = spec.max_tokens
        return ScriptedOutput(tuple(ids[:cut]), tuple(deltas[:cut]), tuple(calls), finish)

    def _tool_calls(self, spec: GenerationSpec, rng: random.Random) -> list[ScriptedToolCall]:
        if not spec.tools or spec.tool_choice == "none":
            return []
        by_name = {tool.name: tool for tool in spec.tools}
        if spec.tool_choice not in ("auto", "required"):
            chosen = [by_name[spec.tool_choice]] if spec.tool_choice in by_name else []
        else:
            if spec.tool_choice == "auto":
                if spec.tool_call_hint is not None:
                    wanted = spec.tool_call_hint
                else:
                    results = _tool_results_since_user(spec.messages)
                    table = _CALL_PROBABILITY_AFTER_RESULTS
                    wanted = rng.random() < table[min(results, len(table) - 1)]
                if not wanted:
                    return []
            count = 1
            if (
                spec.parallel_tool_calls
                and len(spec.tools) > 1
                and rng.random() < _PARALLEL_CALL_PROBABILITY
            ):
                count = 2
            chosen = rng.sample(list(spec.tools), count)
        calls = []
        for tool in chosen:
            arguments = value_for_schema(tool.parameters or {"type": "object"}, rng)
            if not isinstance(arguments, dict):
                arguments = {"value": arguments}
            call_id = f"chatcmpl-tool-{rng.getrandbits(64):016x}"
            calls.append(ScriptedToolCall(call_id, tool.name, canonical_arguments(arguments)))
        return calls


def _tool_results_since_user(messages: Sequence[ChatMessage]) -> int:
    count = 0
    for message in reversed(messages):
        if message.role == "user":
            break
        if message.role == "tool":
            count += 1
    return count


def _default_length(rng: random.Random) -> int:
    drawn = DEFAULT_MEDIAN_TOKENS * math.exp(rng.gauss(0.0, _LENGTH_SIGMA))
    return int(min(_MAX_DEFAULT_TOKENS, max(_MIN_DEFAULT_TOKENS, round(drawn))))


def _deltas(pieces: Sequence[str], ids: Sequence[int]) -> list[TokenDelta]:
    """Map the body's tokens to visible deltas (content, tool header, tool arguments)."""
    out: list[TokenDelta] = []
    tool_index = -1
    in_name = False
    for piece, token_id in zip(pieces, ids, strict=True):
        if token_id == Special.TOOL_CALL:
            tool_index += 1
            in_name = True
            out.append(TokenDelta(tool_index=tool_index))
        elif token_id == Special.TOOL_ARGS:
            in_name = False
            out.append(TokenDelta(tool_index=tool_index, tool_start=True))
        elif tool_index < 0:
            out.append(TokenDelta(content=piece))
        elif in_name:
            out.append(TokenDelta(tool_index=tool_index))
        else:
            out.append(TokenDelta(tool_index=tool_index, tool_args=piece))
    return out


def filler_text(tokenizer: Tokenizer, rng: random.Random, num_tokens: int) -> str:
    """Filler sentences of exactly ``num_tokens`` tokens (0 gives ``""``)."""
    parts: list[str] = []
    used = 0
    sentence_left = rng.randint(6, 14)
    start = True
    while used < num_tokens:
        if sentence_left == 0 and num_tokens - used >= 1 and not start:
            parts.append(".")
            used += 1
            sentence_left = rng.randint(6, 14)
            start = True
            continue
        word = rng.choice(FILLER_WORDS)
        if start:
            word = word.capitalize()
        parts.append(word if not parts else " " + word)
        used += 1
        sentence_left -= 1
        start = False
    text = "".join(parts)
    count = tokenizer.count(text)
    if count != num_tokens:  # pragma: no cover - guarded by the filler word list and tests
        raise AssertionError(f"filler text has {count} tokens, wanted {num_tokens}")
    return text
