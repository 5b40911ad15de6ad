"""Exact token counts from a server's ``/tokenize`` endpoint, with a bounded cache.

vLLM (and our emulator, which copies it) answer ``POST /tokenize`` with ``{"count", "tokens",
"max_model_len"}`` for either ``{"prompt"}`` or ``{"messages", "tools"?,
"add_generation_prompt"?}`` (vLLM's ``TokenizeCompletionRequest`` / ``TokenizeChatRequest``).
A call costs a round trip and the server's tokenizer time, so it is **never made on the request
path by default**: routers that want exact counts ask for them explicitly, and repeated inputs
(system prompts, a conversation's earlier turns) are answered from an LRU cache keyed by a
digest of the input — the cache keeps counts only, never prompt text or token ids.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence

from agentrt.errors import ConfigError
from agentrt_controller.backends.api import BackendError

__all__ = ["TokenCounter", "tokenize_payload"]

#: ``(path, JSON body) -> parsed JSON answer``; raises BackendError on HTTP or wire failure.
PostJson = Callable[[str, Mapping[str, object]], Awaitable[object]]


def tokenize_payload(
    model: str | None,
    *,
    messages: Sequence[Mapping[str, object]] | None,
    tools: Sequence[Mapping[str, object]] | None,
    prompt: str | None,
    add_generation_prompt: bool,
) -> dict[str, object]:
    """The ``/tokenize`` body for one of ``messages`` (+ ``tools``) or ``prompt``.

    Raises :class:`ValueError` unless exactly one of them is given.
    """
    if (messages is None) == (prompt is None):
        raise ValueError("give exactly one of messages or prompt")
    payload: dict[str, object] = {} if model is None else {"model": model}
    if prompt is not None:
        payload["prompt"] = prompt
        return payload
    payload["messages"] = list(messages or ())
    payload["add_generation_prompt"] = add_generation_prompt
    if tools:
        payload["tools"] = list(tools)
    return payload


class TokenCounter:
    """Counts tokens through ``post_json("/tokenize", ...)``; caches ``max_entries`` counts."""

    def __init__(self, post_json: PostJson, *, max_entries: int = 4096) -> None:
        if max_entries < 0:
            raise ConfigError("the token count cache size must be >= 0")
        self._post_json = post_json
        self._max_entries = max_entries
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        #: Answers served from the cache / fetched from the server (for introspection).
        self.hits = 0
        self.misses = 0

    async def count(
        self,
        model: str | None,
        *,
        messages: Sequence[Mapping[str, object]] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        prompt: str | None = None,
        add_generation_prompt: bool = True,
    ) -> int:
        """Prompt tokens of the input. Raises :class:`ValueError` (bad arguments) and
        :class:`BackendError` (the server failed or answered without a count)."""
        payload = tokenize_payload(
            model,
            messages=messages,
            tools=tools,
            prompt=prompt,
            add_generation_prompt=add_generation_prompt,
        )
        key = hashlib.blake2b(
            json.dumps(payload, sort_keys=True, separators=(",", ":")).encode(), digest_size=16
        ).digest()
        cached = self._counts.get(key)
        if cached is not None:
            self._counts.move_to_end(key)
            self.hits += 1
            return cached
        self.misses += 1
        answer = await self._post_json("/tokenize", payload)
        count = answer.get("count") if isinstance(answer, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise BackendError("the backend's /tokenize answer has no valid count")
        if self._max_entries:
            self._counts[key] = count
            while len(self._counts) > self._max_entries:
                self._counts.popitem(last=False)
        return count
