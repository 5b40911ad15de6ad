"""A deterministic stand-in tokenizer and chat template for the engine emulator.

It is **not** a real BPE. It exists so that the emulator counts tokens the way a BPE roughly
does (about 4 characters of English per token) and gives every piece of text a *stable* token
id, which is what prefix caching needs: equal text gives equal ids in every process and on
every run.

Splitting rule (applied left to right, every character lands in exactly one piece, so
``"".join(pieces) == text``):

* a run of letters with at most one leading space (``" hello"``) is one piece when it is at
  most 7 characters long, otherwise it is cut into pieces of 4 characters;
* a run of digits with at most one leading space is cut into groups of up to 3 digits;
* other symbols (punctuation, quotes, braces) with at most one leading space are cut into
  pieces of up to 2 characters;
* a run of whitespace is one piece.

Token id of a piece: ``NUM_SPECIAL + blake2b(piece, 8 bytes) mod (vocab_size - NUM_SPECIAL)``.
Ids below :data:`NUM_SPECIAL` are the special tokens of the chat template (:class:`Special`).
Python's own ``hash`` is never used: it is randomised per process.

Chat template (:meth:`Tokenizer.render_chat`), Llama-3 like, built from separately
tokenized segments so that a conversation prefix always produces a token prefix::

    BOS
    [HDR "system" END_HDR "\\n\\n" content EOT] ...     leading system / developer messages
    [HDR "tools" END_HDR "\\n\\n" tools-json EOT]        when tools are offered
    [HDR role END_HDR "\\n\\n" body EOT] ...             the other messages
    HDR "assistant" END_HDR "\\n\\n"                     the generation prompt

An assistant body is its content followed by one ``TOOL_CALL name TOOL_ARGS arguments`` group
per tool call (:meth:`Tokenizer.assistant_body`). The scripted model generates exactly
``assistant_body(...) + [EOT]``, so turn *k+1*'s prompt starts with turn *k*'s prompt followed
by turn *k*'s output tokens.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

__all__ = [
    "LLAMA3_VOCAB_SIZE",
    "NUM_SPECIAL",
    "ChatMessage",
    "Special",
    "TokenizedText",
    "Tokenizer",
    "canonical_arguments",
]

#: Vocabulary size of Llama 3 (ids are in ``[0, LLAMA3_VOCAB_SIZE)``).
LLAMA3_VOCAB_SIZE = 128_256
#: Ids ``[0, NUM_SPECIAL)`` are reserved for special tokens.
NUM_SPECIAL = 256


class Special(IntEnum):
    """Special token ids of the emulator's chat template (text: empty)."""

    PAD = 0
    BOS = 1  #: begin of text
    EOT = 2  #: end of turn; the scripted model's stop token
    HDR = 3  #: start of a message header
    END_HDR = 4  #: end of a message header
    TOOL_CALL = 5  #: a tool call starts; the tool's name follows
    TOOL_ARGS = 6  #: the tool call's JSON arguments follow


_MAX_WORD_PIECE = 7
_LONG_WORD_CHUNK = 4
_DIGIT_CHUNK = 3
_SYMBOL_CHUNK = 2

# Letters = unicode word characters minus digits and underscore. The last alternative makes the
# pattern total: any character the others miss becomes a one-character piece.
_PRETOKEN_RE = re.compile(
    r" ?[^\W\d_]+| ?\d+| ?[^\w\s]+|\s+|.",
    re.DOTALL,
)
_CACHE_LIMIT = 1 << 17
# Texts at least this long (characters) are remembered whole: agents resend their whole
# history every call, so without it each call re-tokenized every earlier message (~0.8 µs a
# token: 7 ms for an 8k-token context, which --time-scale 10 turns into 70 ms of model time).
_MEMO_MIN_CHARS = 256
# Remembered texts, at most (least recently used go first).
_MEMO_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class TokenizedText:
    """Token ids of a text and the text of each token (``""`` for special tokens)."""

    ids: tuple[int, ...]
    pieces: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:  # never print contents
        return f"TokenizedText(len={len(self.ids)})"


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One chat message as the template sees it (already validated by the server)."""

    role: str
    content: str
    #: ``(name, arguments_json)`` of each tool call of an assistant message.
    tool_calls: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        return f"ChatMessage(role={self.role!r}, chars={len(self.content)})"


def canonical_arguments(arguments: Any) -> str:
    """The one JSON spelling of tool-call arguments used in generated output and in templates."""
    return json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))


def _split_run(run: str, size: int) -> list[str]:
    return [run[i : i + size] for i in range(0, len(run), size)]


class Tokenizer:
    """Deterministic tokenizer; see the module docstring for the rules.

    ``vocab_size`` bounds the ids (default: Llama 3's). Instances keep bounded caches of
    piece ids and of long texts' tokens (results never depend on them) and are otherwise
    stateless; one instance may be shared by the tasks of one event loop.
    """

    def __init__(self, vocab_size: int = LLAMA3_VOCAB_SIZE) -> None:
        if vocab_size <= NUM_SPECIAL + 1:
            raise ValueError(f"vocab_size must exceed {NUM_SPECIAL + 1}, got {vocab_size}")
        self.vocab_size = vocab_size
        self._ids: dict[str, int] = {}
        self._memo: OrderedDict[str, tuple[tuple[int, ...], tuple[str, ...]]] = OrderedDict()

    # -- plain text ---------------------------------------------------------------------------

    def pieces(self, text: str) -> list[str]:
        """Cut ``text`` into token pieces; ``"".join(result) == text``."""
        if len(text) >= _MEMO_MIN_CHARS:
            return list(self._remembered(text)[1])
        return self._cut(text)

    def _remembered(self, text: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """Ids and pieces of a long ``text``, from the memo when it was seen lately."""
        hit = self._memo.get(text)
        if hit is not None:
            self._memo.move_to_end(text)
            return hit
        pieces = tuple(self._cut(text))
        entry = (tuple(self.piece_id(p) for p in pieces), pieces)
        self._memo[text] = entry
        if len(self._memo) > _MEMO_LIMIT:
            self._memo.popitem(last=False)
        return entry

    def _cut(self, text: str) -> list[str]:
        out: list[str] = []
        for match in _PRETOKEN_RE.finditer(text):
            run = match.group()
            body = run[1:] if run[0] == " " and len(run) > 1 else run
            if body[0].isalpha():
                if len(run) <= _MAX_WORD_PIECE:
                    out.append(run)
                else:
                    out.extend(_split_run(run, _LONG_WORD_CHUNK))
            elif body[0].isdigit():
                lead = run[: len(run) - len(body)]
                groups = _split_run(body, _DIGIT_CHUNK)
                groups[0] = lead + groups[0]
                out.extend(groups)
            elif body[0].isspace():
                out.append(run)
            else:
                lead = run[: len(run) - len(body)]
                groups = _split_run(body, _SYMBOL_CHUNK)
                groups[0] = lead + groups[0]
                out.extend(groups)
        return out

    def piece_id(self, piece: str) -> int:
        """The stable id of one piece, in ``[NUM_SPECIAL, vocab_size)``."""
        cached = self._ids.get(piece)
        if cached is not None:
            return cached
        # surrogatepass: a lone surrogate (valid in a JSON string, not in UTF-8) gets an id too.
        digest = hashlib.blake2b(piece.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        token_id = NUM_SPECIAL + int.from_bytes(digest, "little") % (self.vocab_size - NUM_SPECIAL)
        if len(self._ids) >= _CACHE_LIMIT:
            self._ids.clear()
        self._ids[piece] = token_id
        return token_id

    def tokenize(self, text: str) -> TokenizedText:
        """Token ids and pieces of ``text`` (no special tokens)."""
        if len(text) >= _MEMO_MIN_CHARS:
            return TokenizedText(*self._remembered(text))
        pieces = self.pieces(text)
        return TokenizedText(tuple(self.piece_id(p) for p in pieces), tuple(pieces))

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        """Token ids of ``text``, optionally preceded by :attr:`Special.BOS`."""
        if len(text) >= _MEMO_MIN_CHARS:
            ids = list(self._remembered(text)[0])
        else:
            ids = [self.piece_id(p) for p in self._cut(text)]
        return [int(Special.BOS), *ids] if add_bos else ids

    def count(self, text: str) -> int:
        """Number of tokens of ``text``."""
        return len(self.pieces(text))

    # -- chat template ------------------------------------------------------------------------

    def assistant_body(
        self, content: str, tool_calls: Sequence[tuple[str, str]] = ()
    ) -> TokenizedText:
        """Tokens of an assistant message's body: content, then each ``(name, arguments)``."""
        ids: list[int] = []
        pieces: list[str] = []
        self._append_text(ids, pieces, content)
        for name, arguments in tool_calls:
            ids.append(int(Special.TOOL_CALL))
            pieces.append("")
            self._append_text(ids, pieces, name)
            ids.append(int(Special.TOOL_ARGS))
            pieces.append("")
            self._append_text(ids, pieces, _canonical_or_raw(arguments))
        return TokenizedText(tuple(ids), tuple(pieces))

    def render_chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """The prompt token ids of a chat request (see the module docstring)."""
        ids: list[int] = [int(Special.BOS)]
        index = 0
        while index < len(messages) and messages[index].role in ("system", "developer"):
            self._append_message(ids, "system", self.encode(messages[index].content))
            index += 1
        if tools:
            tools_json = json.dumps(list(tools), ensure_ascii=False, separators=(", ", ": "))
            self._append_message(ids, "tools", self.encode(tools_json))
        for message in messages[index:]:
            if message.role == "assistant":
                body = list(self.assistant_body(message.content, message.tool_calls).ids)
            else:
                body = self.encode(message.content)
            self._append_message(ids, message.role, body)
        if add_generation_prompt:
            self._append_header(ids, "assistant")
        return ids

    def _append_header(self, ids: list[int], role: str) -> None:
        ids.append(int(Special.HDR))
        ids.extend(self.encode(role))
        ids.append(int(Special.END_HDR))
        ids.extend(self.encode("\n\n"))

    def _append_message(self, ids: list[int], role: str, body: Iterable[int]) -> None:
        self._append_header(ids, role)
        ids.extend(body)
        ids.append(int(Special.EOT))

    def _append_text(self, ids: list[int], pieces: list[str], text: str) -> None:
        if len(text) >= _MEMO_MIN_CHARS:
            text_ids, text_pieces = self._remembered(text)
            ids.extend(text_ids)
            pieces.extend(text_pieces)
            return
        for piece in self._cut(text):
            ids.append(self.piece_id(piece))
            pieces.append(piece)


def _canonical_or_raw(arguments: str) -> str:
    """Re-spell valid JSON arguments canonically (so a round trip keeps the tokens)."""
    try:
        return canonical_arguments(json.loads(arguments))
    except ValueError:
        return arguments
