"""The ``emulator`` backend kind: our engine emulator (docs/engine-emulator.md).

Everything of the ``vllm`` kind — the emulator speaks vLLM's API, metric names, ``priority``
(with vLLM's refusal when it runs FCFS) and ``/tokenize`` — plus **native retention pins**
(:class:`~agentrt_controller.backends.api.SupportsPins`):

* ``pin`` → ``POST /agentrt/engine/v1/pins {"pin_id", "ttl_s", one of "messages" (+ "tools",
  rendered without a generation prompt) | "prompt" | "token_ids", "cache_salt"?}``; the answer
  ``{"pin_id", "blocks", "tokens", "expires_at_s", "salted"}`` becomes a
  :class:`~agentrt_controller.backends.api.PinResult`. Only already-cached full blocks are held.
* ``unpin`` → ``DELETE /agentrt/engine/v1/pins/{pin_id}`` (404 = already gone → ``False``).

TTLs are in the emulator's *model* seconds (equal to wall seconds at ``--time-scale 1``).
The scrape adds ``agentrt:engine_pinned_blocks`` to the load (the batch size
``agentrt:engine_max_num_seqs``, which bounds the adaptive admission window, is read by the
``vllm`` kind already).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import quote

from agentrt_controller.backends.api import (
    BackendCapabilities,
    BackendError,
    BackendLoad,
    PinError,
    PinResult,
)
from agentrt_controller.backends.http import VllmBackend, count_or_none
from agentrt_controller.backends.prometheus_text import sum_samples
from agentrt_controller.backends.wire import json_answer

__all__ = ["PINS_PATH", "EmulatorBackend"]

PINS_PATH = "/agentrt/engine/v1/pins"


class EmulatorBackend(VllmBackend):
    """Our engine emulator: a vLLM-like server with native TTL pins."""

    KIND: ClassVar[str] = "emulator"

    def _capabilities(self, send_priority: bool) -> BackendCapabilities:
        return BackendCapabilities(
            supports_priority=send_priority,
            scrapes_metrics=True,
            supports_tokenize=True,
            supports_pins=True,
        )

    def load_from_metrics(self, text: str) -> BackendLoad:
        load = super().load_from_metrics(text)
        pinned = sum_samples(text, ("agentrt:engine_pinned_blocks",))
        return BackendLoad(
            num_running=load.num_running,
            num_waiting=load.num_waiting,
            kv_cache_usage=load.kv_cache_usage,
            prefix_cache_queries=load.prefix_cache_queries,
            prefix_cache_hits=load.prefix_cache_hits,
            pinned_blocks=count_or_none(pinned.get("agentrt:engine_pinned_blocks")),
            max_num_seqs=load.max_num_seqs,
        )

    async def pin(
        self,
        pin_id: str,
        *,
        ttl_s: float | None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        prompt: str | None = None,
        token_ids: Sequence[int] | None = None,
        cache_salt: str | None = None,
    ) -> PinResult:
        given = [x is not None for x in (messages, prompt, token_ids)]
        if sum(given) != 1:
            raise PinError("give exactly one of messages, prompt or token_ids")
        if ttl_s is not None and not ttl_s > 0:
            raise PinError(f"ttl_s must be > 0 seconds or None, got {ttl_s}")
        body: dict[str, Any] = {"pin_id": pin_id, "ttl_s": ttl_s}
        if messages is not None:
            body["messages"] = list(messages)
            body["add_generation_prompt"] = False
            if tools:
                body["tools"] = list(tools)
        elif prompt is not None:
            body["prompt"] = prompt
        else:
            body["token_ids"] = [int(t) for t in token_ids or ()]
        if cache_salt is not None:
            body["cache_salt"] = cache_salt
        try:
            answer = await self._post_json(PINS_PATH, body)
        except BackendError as exc:
            if exc.status_code is not None:
                raise PinError(str(exc), status_code=exc.status_code) from exc
            raise
        if not isinstance(answer, dict):
            raise PinError(f"backend {self.backend_id}: malformed pin answer")
        blocks, tokens = answer.get("blocks"), answer.get("tokens")
        return PinResult(
            pin_id=pin_id,
            blocks=blocks if isinstance(blocks, int) else None,
            tokens=tokens if isinstance(tokens, int) else None,
            ttl_s=ttl_s,
            partial=False,
        )

    async def unpin(self, pin_id: str) -> bool:
        response = await self._request(
            "DELETE", f"{PINS_PATH}/{quote(pin_id, safe='')}", self._aux_timeout
        )
        if response.status_code == 404:
            return False
        try:
            json_answer(self.backend_id, PINS_PATH, response)
        except BackendError as exc:
            raise PinError(str(exc), status_code=exc.status_code) from exc
        return True
