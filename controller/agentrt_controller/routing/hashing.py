"""Prefix hash chains: how a driver fills :attr:`CallFacts.block_hashes` for prefix-aware routing.

A chain element stands for one *block* of the prompt and depends on every block before it, so
two prompts share the first ``k`` elements exactly when they share their first ``k`` blocks —
the property an engine's prefix cache has (vLLM chains its block hashes the same way). The
router's index (:mod:`agentrt_controller.routing.prefix_index`) only compares these integers.

Two ways to build a chain, one per kind of driver:

* :func:`token_block_hashes` — from token ids, one element per full block of ``block_size``
  tokens (the simulator, or a controller that tokenizes). A trailing partial block has no
  element, as in the engine (only full blocks are cached).
* :func:`message_block_hashes` — from chat messages when only text is known (the controller
  service): each message is serialised canonically and cut into chunks of about
  ``block_tokens`` tokens (``block_tokens * chars_per_token`` characters); a message's last
  chunk may be short, so chains still align at every *message boundary*. A conversation that
  extends an earlier one shares all of the earlier one's elements. A :class:`MessageChains`
  memo (the controller keeps one) remembers the elements of recent messages, so that a
  program's next call, which repeats its history, hashes only its new messages.

Both are deterministic across processes (no use of Python's salted ``str`` hash): token
chains hash tuples of ints, which Python hashes deterministically; text chains use BLAKE2b.
A ``salt`` (tenant / ``cache_salt`` / model) changes every element, so tenants never match.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections import OrderedDict
from collections.abc import Container, Iterable, Mapping, Sequence

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "DEFAULT_CHARS_PER_TOKEN",
    "MessageChains",
    "extend_token_block_hashes",
    "leading_matches",
    "message_block_hashes",
    "request_block_hashes",
    "token_block_hashes",
]

#: Tokens per chain element by default (vLLM's GPU block size).
DEFAULT_BLOCK_TOKENS = 16
#: Characters per token assumed when cutting text (English BPE averages about 4).
DEFAULT_CHARS_PER_TOKEN = 4
#: Longest text chain (elements): 8192 blocks of 16 tokens cover a 128k-token context. A
#: longer prompt's chain stops there (two prompts still share their first ``k`` elements when
#: they share their first ``k`` blocks), so a 16 MiB body costs milliseconds, not a second.
DEFAULT_MAX_BLOCKS = 8192


@functools.lru_cache(maxsize=1024)
def _seed(salt: str | None) -> int:
    """The chain's seed for ``salt`` (memoised: a handful of salts, one per model, tenant or
    cache group, each asked for on every call)."""
    if not salt:
        return 0
    return int.from_bytes(hashlib.blake2b(_utf8(salt), digest_size=8).digest(), "big")


@functools.lru_cache(maxsize=1024)
def _seed_bytes(salt: str | None) -> bytes:
    """:func:`_seed` as the 8 bytes a text chain starts from (memoised likewise)."""
    return _seed(salt).to_bytes(8, "big")


def _utf8(text: str) -> bytes:
    """UTF-8 bytes of ``text``; a lone surrogate (valid in a JSON string, not in UTF-8) is
    kept as its 3-byte form, so any decoded request hashes instead of raising."""
    return text.encode("utf-8", "surrogatepass")


def leading_matches(chain: Iterable[int], present: Container[int]) -> int:
    """How many leading elements of ``chain`` are in ``present``: every element hashes its
    parent, so this is the prefix ``chain`` shares with the chains ``present`` was filled
    from."""
    count = 0
    for element in chain:
        if element not in present:
            break
        count += 1
    return count


def token_block_hashes(
    token_ids: Sequence[int], block_size: int = DEFAULT_BLOCK_TOKENS, *, salt: str | None = None
) -> tuple[int, ...]:
    """The chain over the full blocks of ``token_ids``: ``len(token_ids) // block_size``
    elements. ``h_0 = hash((seed, block_0))``, ``h_i = hash((h_{i-1}, block_i))``."""
    return tuple(extend_token_block_hashes((), token_ids, block_size, salt=salt))


def extend_token_block_hashes(
    hashes: Sequence[int],
    token_ids: Sequence[int],
    block_size: int = DEFAULT_BLOCK_TOKENS,
    *,
    salt: str | None = None,
) -> list[int]:
    """``hashes`` (the chain of a prefix of ``token_ids``) extended over the remaining full
    blocks of ``token_ids`` — the same result as :func:`token_block_hashes` on the whole
    sequence, without rehashing the prefix. ``salt`` must be the one ``hashes`` was built with.

    Raises ``ValueError`` if ``block_size < 1`` or ``hashes`` is longer than the full blocks.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    full = len(token_ids) // block_size
    if len(hashes) > full:
        raise ValueError(f"{len(hashes)} hashes given for only {full} full blocks")
    out = list(hashes)
    parent = out[-1] if out else _seed(salt)
    for index in range(len(out), full):
        start = index * block_size
        parent = hash((parent, tuple(token_ids[start : start + block_size])))
        out.append(parent)
    return out


def _message_text(message: Mapping[str, object]) -> str:
    """Canonical serialisation of one chat message (role, name, content, tool calls)."""
    content = message.get("content")
    role = message.get("role", "")
    if type(content) is str and type(role) is str and len(message) == 2:
        return f"{role}\x1f\x1f{content}"  # the usual message, as the general case has it
    if isinstance(content, list):  # OpenAI content parts: keep text, describe the rest
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            else:
                parts.append(json.dumps(part, sort_keys=True, default=str))
        content = "\n".join(parts)
    fields = [str(message.get("role", "")), str(message.get("name") or ""), str(content or "")]
    extra = {k: message[k] for k in ("tool_calls", "tool_call_id") if message.get(k)}
    if extra:
        fields.append(json.dumps(extra, sort_keys=True, default=str))
    return "\x1f".join(fields)


class MessageChains:
    """A memo of the chain elements of whole messages for :func:`message_block_hashes`: the
    elements a message adds depend only on the chain before it and on its bytes, so a message
    seen after the same chain is looked up instead of cut and hashed block by block. Holds at
    most ``max_bytes`` of message bytes (least recently used dropped first); messages shorter
    than ``min_bytes`` are hashed, save the shortest (one chain element) before a call's last,
    whose element is held by the message's strings (a cheaper lookup than the sampled one).
    Output is the same with or without it.

    A lookup costs O(1) Python work per message and one comparison of its text with the held
    one (a memcmp): the usual message (a ``role`` and an ASCII string ``content``, nothing
    else) is keyed by its parsed strings — their lengths and ends, read without building or
    encoding its canonical text (``str.isascii`` and ``len`` are O(1)); any other message by
    the same sample of its canonical bytes."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024, min_bytes: int = 1024) -> None:
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
        #: key → (the message's text or bytes, the elements it adds, chain after, its bytes).
        #: Keyed by a sample, not the whole message: a key over the bytes would hash them all
        #: (SipHash, ~0.2 ms for a 128 K-token history) where comparing them to the held ones
        #: is a memcmp (~100× faster). Keys: (chain before, role, length in bytes, the
        #: content's first and last characters[, the chain's room when the chain ends in
        #: it]) for the usual message; (chain before, length, first and last bytes) for the
        #: others — the shapes never compare equal.
        self._entries: OrderedDict[
            tuple[object, ...], tuple[str | bytes, tuple[int, ...], bytes, int]
        ] = OrderedDict()
        #: (chain before, role, content) → (the element, the chain after) of a usual ASCII
        #: message of one piece (at most ``block_tokens * chars_per_token`` bytes, and
        #: under ``min_bytes``) that was not its call's last: a dictionary lookup instead of
        #: its canonical text and a BLAKE2b (~1 µs less per message, docs/benchmarks.md,
        #: "Per-call cuts: routefast"). At most :data:`_SHORT_MESSAGES`, emptied when full;
        #: not counted in :attr:`held_bytes` (~1.6 MB when full, measured).
        self._short: dict[tuple[bytes, str, str], tuple[int, bytes]] = {}
        self._bytes = 0
        #: conversation key (the chain's seed and sizes, the first message) → the latest
        #: conversations under it, most recent first: (their first messages, the chain over
        #: them, its last element, their bytes) (:func:`message_block_hashes`).
        self._conversations: OrderedDict[
            tuple[object, ...],
            list[tuple[list[Mapping[str, object]], tuple[int, ...], bytes, int]],
        ] = OrderedDict()

    def get(self, parent: bytes, data: bytes) -> tuple[tuple[int, ...], bytes] | None:
        """The elements ``data`` (a message's canonical bytes) adds after ``parent`` and the
        chain after it, if held."""
        return self._get(_memo_key(parent, data), data)

    def put(self, parent: bytes, data: bytes, elements: tuple[int, ...], after: bytes) -> None:
        self._put(_memo_key(parent, data), data, elements, after, len(data))

    def _get(
        self, key: tuple[object, ...], held: str | bytes
    ) -> tuple[tuple[int, ...], bytes] | None:
        found = self._entries.get(key)
        if found is None or found[0] != held:  # another message with the same sample: a miss
            return None
        self._entries.move_to_end(key)
        return found[1], found[2]

    def _put(
        self,
        key: tuple[object, ...],
        held: str | bytes,
        elements: tuple[int, ...],
        after: bytes,
        size: int,
    ) -> None:
        if size > self.max_bytes:
            return
        replaced = self._entries.get(key)
        if replaced is not None:
            self._bytes -= replaced[3]
        self._bytes += size
        self._entries[key] = (held, elements, after, size)
        self._entries.move_to_end(key)
        self._shrink()

    def _conversation(
        self, key: tuple[object, ...], messages: list[Mapping[str, object]]
    ) -> tuple[int, int, tuple[int, ...], bytes] | None:
        """(its place under ``key``, messages held, their chain, its last element) of the
        longest conversation held under ``key`` that ``messages`` begins with: compared with
        ``==`` in C, no Python work per message."""
        held = self._conversations.get(key)
        if held is None:
            return None
        best = None
        for place, (kept, chain, after, _) in enumerate(held):
            count = len(kept)
            if (best is None or count > best[1]) and messages[:count] == kept:
                best = place, count, chain, after
        if best is not None:
            self._conversations.move_to_end(key)
        return best

    def _remember(
        self,
        key: tuple[object, ...],
        extended: int | None,
        messages: list[Mapping[str, object]],
        chain: tuple[int, ...],
        after: bytes,
    ) -> None:
        """Hold ``messages`` under ``key`` first, in place of the one at place ``extended``
        (a prefix of them; ``None`` = none); at most :data:`_CONVERSATIONS_PER_KEY` per key."""
        # Their contents' bytes (every message held is of the usual shape: role, content).
        size = sum(len(text) for m in messages if isinstance(text := m["content"], str))
        if size > self.max_bytes:
            return
        held = self._conversations.setdefault(key, [])
        if extended is not None:
            self._bytes -= held.pop(extended)[3]
        held.insert(0, (messages, chain, after, size))
        self._bytes += size
        while len(held) > _CONVERSATIONS_PER_KEY:
            self._bytes -= held.pop()[3]
        self._conversations.move_to_end(key)
        self._shrink()

    def _shrink(self) -> None:
        """Drop the least recently used conversations, then messages, down to ``max_bytes``."""
        while self._bytes > self.max_bytes:
            if self._conversations:
                _, held = self._conversations.popitem(last=False)
                self._bytes -= sum(entry[3] for entry in held)
            else:
                _, (_, _, _, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def held_bytes(self) -> int:
        """Bytes of the messages held (at most ``max_bytes``)."""
        return self._bytes


#: Bytes (characters) of a message's head and of its tail in a memo key (:class:`MessageChains`).
_MEMO_SAMPLE_BYTES = 64
#: Conversations held per first message (programs sharing a system prompt, say).
_CONVERSATIONS_PER_KEY = 4
#: Short messages whose element :class:`MessageChains` holds (:attr:`MessageChains._short`).
_SHORT_MESSAGES = 4096


def _memo_key(parent: bytes, data: bytes) -> tuple[object, ...]:
    return parent, len(data), data[:_MEMO_SAMPLE_BYTES], data[-_MEMO_SAMPLE_BYTES:]


def _chain_pieces(
    parent: bytes, data: bytes, room: int, chunk: int, whole: bool, out: list[int]
) -> bytes:
    """Hash ``data`` (one message's canonical bytes) in pieces of ``chunk`` bytes, at most
    ``room`` of them, after ``parent``; appends the elements to ``out``, returns the last."""
    # A boundary marker per message: "ab" + "c" and "a" + "bc" must not collide.
    if len(data) <= chunk:  # one piece (room >= 1), the usual short message
        pieces = [data]
    else:
        pieces = [data[i : i + chunk] for i in range(0, min(len(data), room * chunk), chunk)]
    if whole:
        pieces = pieces or [b""]
        pieces[-1] += b"\x1e"
    for piece in pieces:
        parent = hashlib.blake2b(parent + piece, digest_size=8).digest()
        out.append(int.from_bytes(parent, "big"))
    return parent


def message_block_hashes(
    messages: Iterable[Mapping[str, object]],
    *,
    salt: str | None = None,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    chars_per_token: int = DEFAULT_CHARS_PER_TOKEN,
    max_blocks: int = DEFAULT_MAX_BLOCKS,
    memo: MessageChains | None = None,
) -> tuple[int, ...]:
    """The chain over chat ``messages`` (OpenAI format), cut at message boundaries.

    Each message yields ``ceil(len(text) / (block_tokens * chars_per_token))`` elements (at
    least one), so an element stands for about ``block_tokens`` tokens; the chain ends after
    ``max_blocks`` elements. ``memo`` (the same sizes on every call) saves rehashing messages
    seen before after the same chain, and walking a conversation's messages held before
    (:class:`MessageChains`). Raises ``ValueError`` for non-positive sizes.
    """
    if block_tokens < 1 or chars_per_token < 1 or max_blocks < 1:
        raise ValueError("block_tokens, chars_per_token and max_blocks must be >= 1")
    chunk = block_tokens * chars_per_token
    parent = _seed_bytes(salt)
    if memo is None:
        out: list[int] = []
        for message in messages:
            room = max_blocks - len(out)
            if room <= 0:
                break
            data = _message_text(message).encode("utf-8", "surrogatepass")  # _utf8, inlined
            parent = _chain_pieces(parent, data, room, chunk, len(data) <= room * chunk, out)
        return tuple(out)
    listed = messages if type(messages) is list else list(messages)
    key = _conversation_key(parent, chunk, max_blocks, listed)
    held = memo._conversation(key, listed) if key is not None else None
    extended = None
    if held is None:
        done, out = 0, []
    else:
        extended, done, chain, parent = held
        if len(chain) >= max_blocks:
            return chain
        out = list(chain)
    # The conversation to remember: its messages up to the last long one (the short ones at
    # its end, a next step, are likely to differ next time), all of the usual shape (a
    # message equal to one of those hashes as it does).
    usual_run = key is not None
    kept, kept_chain, kept_parent = done, len(out), parent
    short, last = memo._short, len(listed) - 1
    for index in range(done, len(listed)):
        room = max_blocks - len(out)
        if room <= 0:
            break
        message = listed[index]
        content = message.get("content")
        role = message.get("role", "")
        usual = type(content) is str and type(role) is str and len(message) == 2
        if type(content) is str and type(role) is str and usual and content.isascii():
            # The usual message (_message_text's first case) in ASCII: its canonical bytes'
            # length is known without building them, and its strings key the memo.
            size = len(role) + 2 + len(content)
            if size >= memo.min_bytes and role.isascii():
                whole = size <= room * chunk
                # A message the chain ends in (not whole) adds ``room`` elements: the room
                # is part of its key.
                text_key = (
                    parent,
                    role,
                    size,
                    content[:_MEMO_SAMPLE_BYTES],
                    content[-_MEMO_SAMPLE_BYTES:],
                    *(() if whole else (room,)),
                )
                found = memo._get(text_key, content)
                if found is not None:
                    out.extend(found[0])
                    parent = found[1]
                else:
                    first = len(out)
                    data = f"{role}\x1f\x1f{content}".encode()
                    parent = _chain_pieces(parent, data, room, chunk, whole, out)
                    memo._put(text_key, content, tuple(out[first:]), parent, size)
                if usual_run:
                    kept, kept_chain, kept_parent = index + 1, len(out), parent
                continue
            if size <= chunk and index < last and role.isascii():  # so under min_bytes
                # A short message, one piece (room >= 1), before the call's last: its element
                # after ``parent`` is held by its strings (a system prompt's line, a repeated
                # instruction). Not kept, as below: neither long nor the chain's end. (The
                # last one after the same chain would be a repeated call: held, it would
                # cost an agent's every new step a lookup and a slot for nothing.)
                short_key = (parent, role, content)
                element = short.get(short_key)
                if element is None:  # hashed and held (emptied first when full)
                    data = _message_text(message).encode("utf-8", "surrogatepass")
                    after = _chain_pieces(parent, data, room, chunk, True, out)
                    if len(short) >= _SHORT_MESSAGES:
                        short.clear()
                    short[short_key] = out[-1], after
                    parent = after
                else:
                    out.append(element[0])
                    parent = element[1]
                continue
        usual_run = usual_run and usual
        data = _message_text(message).encode("utf-8", "surrogatepass")  # _utf8, inlined
        whole = len(data) <= room * chunk
        if whole and len(data) >= memo.min_bytes:
            found = memo.get(parent, data)
            if found is not None:
                out.extend(found[0])
                parent = found[1]
            else:
                before, first = parent, len(out)
                parent = _chain_pieces(parent, data, room, chunk, whole, out)
                memo.put(before, data, tuple(out[first:]), parent)
        else:
            parent = _chain_pieces(parent, data, room, chunk, whole, out)
        if usual_run and (len(data) >= memo.min_bytes or not whole):
            kept, kept_chain, kept_parent = index + 1, len(out), parent
    if key is not None and kept > done:
        # Copies of the messages (two strings each): a caller may change its dicts later.
        memo._remember(
            key, extended, list(map(dict, listed[:kept])), tuple(out[:kept_chain]), kept_parent
        )
    return tuple(out)


def _conversation_key(
    seed: bytes, chunk: int, max_blocks: int, messages: list[Mapping[str, object]]
) -> tuple[object, ...] | None:
    """A conversation's key in the memo: the chain's seed and sizes and its first message's
    role, length and ends; ``None`` when that message is not of the usual shape."""
    if not messages:
        return None
    first = messages[0]
    content = first.get("content")
    role = first.get("role", "")
    if type(content) is not str or type(role) is not str or len(first) != 2:
        return None
    head, tail = content[:_MEMO_SAMPLE_BYTES], content[-_MEMO_SAMPLE_BYTES:]
    return seed, chunk, max_blocks, role, len(content), head, tail


def request_block_hashes(
    body: Mapping[str, object], memo: MessageChains | None = None
) -> tuple[int, ...]:
    """The chain of an OpenAI request body: its ``messages`` (chat) or ``prompt`` (text
    completion: a string, or a list of strings / token ids, serialised as one message), salted
    with its ``model`` and its ``cache_salt`` (KV is never shared across models or salts: a
    backend serving two models holds one cache per model, so the prefix index must not match
    one model's prefix for the other's call). ``()`` when the body has neither. ``memo``: see
    :func:`message_block_hashes`."""
    texts = []
    for part in (body.get("model"), body.get("cache_salt")):
        if isinstance(part, str) and part:
            texts.append(part)
    salt = "\x1f".join(texts) if texts else None
    messages = body.get("messages")
    if isinstance(messages, list):
        # The list itself when it holds only dicts (the usual body; a comprehension costs a
        # Python call); else a list, not a generator (a Python call per message).
        chat = messages
        for m in messages:
            if type(m) is not dict:
                chat = [m for m in messages if type(m) is dict or isinstance(m, Mapping)]
                break
        return message_block_hashes(chat, salt=salt, memo=memo)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return message_block_hashes([{"content": prompt}], salt=salt, memo=memo)
    if isinstance(prompt, list) and prompt:
        return message_block_hashes([{"content": json.dumps(prompt)}], salt=salt, memo=memo)
    return ()
