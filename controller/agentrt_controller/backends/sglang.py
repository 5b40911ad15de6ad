"""The ``sglang`` backend kind — BUILT FROM SGLANG'S DOCUMENTATION, NOT TESTED AGAINST A REAL
SGLANG SERVER. The tests run it against ``tests/backends/fake_sglang.py``, a server that speaks
the documented API. Sources (also in docs/backends.md, "SGLang"):

* Metrics (``--enable-metrics``; https://docs.sglang.io/references/production_metrics.html):
  ``sglang:num_running_reqs``, ``sglang:num_queue_reqs`` (gauges, requests),
  ``sglang:token_usage`` (gauge, fraction of the KV token pool in use),
  ``sglang:cache_hit_rate`` (gauge, prefix-cache hit rate), ``sglang:cached_tokens_total``
  (counter, prompt tokens served from the prefix cache). Gauges are per scheduler rank:
  request counts are summed over series, fractions take the largest.
* Priority (``--enable-priority-scheduling``; the ``priority`` field of SGLang's OpenAI
  ``ChatCompletionRequest``): **higher values run first** unless the server runs
  ``--schedule-low-priority-values-first``. Our scheduler's priority is a queue level where
  lower runs first, so by default we send ``priority_top - level`` (clamped at 0); with
  ``priority_order=lower_first`` the level is sent unchanged.
* Prefix pins (SGLang PR #18941, "TTL-based prefix pinning with refresh-on-hit for
  HiRadixCache", the path NVIDIA Dynamo's ``nvext.cache_control`` used):
  ``POST /hicache/pin_prefix {"token_ids": [...], "ttl_seconds": N}`` and
  ``POST /hicache/unpin_prefix {"token_ids": [...]}``. Needs ``--enable-hierarchical-cache``
  and ``SGLANG_HICACHE_MAX_PINNED_RATIO`` > 0 (pinning is refused at the default 0); pins live
  in the host tier, expire lazily after the TTL and a cache hit refreshes the TTL. SGLang
  reverted the endpoint in PR #21884 (April 2026), so it exists only in builds between the
  two: pins are off unless ``pins=on``, and a 404 turns them off with a warning.
  SGLang pins token ids only: ``pin(messages=...)`` raises :class:`PinsUnsupported`.
* Health: ``GET /health``; models: ``GET /v1/models``; ``cache_salt`` is a request field of
  SGLang's ``ChatCompletionRequest`` and is forwarded unchanged like every other field.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

from agentrt.errors import ConfigError
from agentrt_controller.backends.api import (
    BackendCapabilities,
    BackendError,
    BackendLoad,
    PinError,
    PinResult,
    PinsUnsupported,
)
from agentrt_controller.backends.http import (
    HttpBackend,
    HttpBackendConfig,
    count_or_none,
    counter_or_none,
    fraction_or_none,
)
from agentrt_controller.backends.kv_capacity import sglang_capacity
from agentrt_controller.backends.prometheus_text import max_samples, sum_samples
from agentrt_controller.backends.transport import HttpPool

__all__ = ["PIN_PATH", "UNPIN_PATH", "SGLangBackend", "SGLangBackendConfig"]

_log = logging.getLogger("agentrt.controller")

PIN_PATH = "/hicache/pin_prefix"
UNPIN_PATH = "/hicache/unpin_prefix"

_COUNTS = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:cached_tokens_total")
_FRACTIONS = ("sglang:token_usage", "sglang:cache_hit_rate")

#: Pins remembered for unpinning (SGLang unpins by token ids, not by our pin id).
_MAX_REMEMBERED_PINS = 10_000


@dataclass(frozen=True, slots=True)
class SGLangBackendConfig(HttpBackendConfig):
    """Options of the ``sglang`` kind (``send_priority`` may not be ``"auto"``)."""

    #: ``higher_first`` (SGLang's default) or ``lower_first`` (server started with
    #: ``--schedule-low-priority-values-first``).
    priority_order: Literal["higher_first", "lower_first"] = "higher_first"
    #: The value sent for the most urgent level under ``higher_first`` (>= 0).
    priority_top: int = 100
    #: The server has the pin endpoint and a pin budget.
    pins: bool = False
    #: TTL used for ``ttl_s=None`` (seconds, > 0; SGLang pins always expire).
    default_pin_ttl_s: float = 300.0


class SGLangBackend(HttpBackend):
    """SGLang's OpenAI-compatible server (documentation-built; see the module docstring),
    configured by ``config`` (defaults when ``None``). ``clock``: monotonic seconds, to forget
    expired pins. Raises :class:`ConfigError` for an option SGLang cannot honour.
    """

    KIND: ClassVar[str] = "sglang"
    health_path: ClassVar[str] = "/health"

    def __init__(
        self,
        backend_id: str,
        url: str,
        http: HttpPool,
        config: SGLangBackendConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        config = config or SGLangBackendConfig()
        if config.send_priority == "auto":
            raise ConfigError(f"backend {backend_id}: priority=auto is for vllm; use on or off")
        if config.priority_order not in ("higher_first", "lower_first"):
            raise ConfigError(
                f"backend {backend_id}: priority_order must be higher_first or lower_first"
            )
        if config.priority_top < 0 or not config.default_pin_ttl_s > 0:
            raise ConfigError(f"backend {backend_id}: priority_top >= 0, default_pin_ttl_s > 0")
        self._pins_enabled = config.pins
        super().__init__(backend_id, url, http, config)
        self.priority_order = config.priority_order
        self.priority_top = config.priority_top
        self.default_pin_ttl_s = config.default_pin_ttl_s
        self._clock = clock
        #: pin id -> (token ids, expiry on ``clock``), oldest first.
        self._pins: OrderedDict[str, tuple[tuple[int, ...], float]] = OrderedDict()

    def _capabilities(self, send_priority: bool) -> BackendCapabilities:
        return BackendCapabilities(
            supports_priority=send_priority,
            scrapes_metrics=True,
            stream_usage=True,
            supports_pins=self._pins_enabled,
        )

    def encode_priority(self, priority: int) -> dict[str, int]:
        if self.priority_order == "lower_first":
            return {"priority": priority}
        return {"priority": max(0, self.priority_top - priority)}

    def load_from_metrics(self, text: str) -> BackendLoad:
        counts = sum_samples(text, _COUNTS)
        fractions = max_samples(text, _FRACTIONS)
        return BackendLoad(
            num_running=count_or_none(counts.get("sglang:num_running_reqs")),
            num_waiting=count_or_none(counts.get("sglang:num_queue_reqs")),
            kv_cache_usage=fraction_or_none(fractions.get("sglang:token_usage")),
            prefix_cache_hits=counter_or_none(counts.get("sglang:cached_tokens_total")),
            prefix_cache_hit_rate=fraction_or_none(fractions.get("sglang:cache_hit_rate")),
            capacity=sglang_capacity(text),
        )

    # --- pins (SupportsPins) -----------------------------------------------------------------

    async def pin(
        self,
        pin_id: str,
        *,
        ttl_s: float | None,
        messages: Sequence[Mapping[str, object]] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        prompt: str | None = None,
        token_ids: Sequence[int] | None = None,
        cache_salt: str | None = None,
    ) -> PinResult:
        if not self.capabilities.supports_pins:
            raise PinsUnsupported(f"backend {self.backend_id}: pins are off (option pins=on)")
        if token_ids is None or messages is not None or prompt is not None:
            raise PinsUnsupported(f"backend {self.backend_id}: SGLang pins token_ids only")
        if cache_salt is not None:
            # The documented pin body has no salt: a salted prefix cannot be addressed.
            raise PinsUnsupported(f"backend {self.backend_id}: SGLang pins take no cache_salt")
        tokens = tuple(int(t) for t in token_ids)
        if not tokens:
            raise PinError(f"backend {self.backend_id}: nothing to pin (no token ids)")
        ttl = self.default_pin_ttl_s if ttl_s is None else ttl_s
        if not ttl > 0 or math.isinf(ttl):
            raise PinError(f"backend {self.backend_id}: SGLang pins need a finite ttl_s > 0")
        if pin_id in self._pins:  # re-using a pin id replaces the pin
            await self.unpin(pin_id)
        seconds = max(1, math.ceil(ttl))  # the documented field is whole seconds
        answer = await self._pin_call(PIN_PATH, {"token_ids": list(tokens), "ttl_seconds": seconds})
        self._remember(pin_id, tokens, seconds)
        return PinResult(
            pin_id=pin_id,
            blocks=_int_field(answer, "pinned_count"),
            tokens=len(tokens),
            ttl_s=float(seconds),
            partial=_partial(answer),
        )

    async def unpin(self, pin_id: str) -> bool:
        self._forget_expired()
        entry = self._pins.pop(pin_id, None)
        if entry is None:
            return False
        await self._pin_call(UNPIN_PATH, {"token_ids": list(entry[0])})
        return True

    async def _pin_call(self, path: str, body: Mapping[str, object]) -> object:
        try:
            answer = await self._post_json(path, body)
        except BackendError as exc:
            if exc.status_code == 404:
                _log.warning("backend %s has no %s: pins turned off", self.backend_id, path)
                self.capabilities = replace(self.capabilities, supports_pins=False)
                raise PinsUnsupported(f"backend {self.backend_id} has no {path}") from exc
            if exc.status_code is not None:
                raise PinError(str(exc), status_code=exc.status_code) from exc
            raise
        if isinstance(answer, dict) and answer.get("success") is False:
            message = str(answer.get("message", "refused"))[:200]
            raise PinError(f"backend {self.backend_id} {path}: {message}")
        return answer

    def _remember(self, pin_id: str, tokens: tuple[int, ...], ttl_s: float) -> None:
        self._forget_expired()
        self._pins[pin_id] = (tokens, self._clock() + ttl_s)
        while len(self._pins) > _MAX_REMEMBERED_PINS:
            self._pins.popitem(last=False)

    def _forget_expired(self) -> None:
        # A hit refreshes the TTL on the server, so a remembered pin may outlive our expiry;
        # unpinning an expired prefix is harmless, forgetting it early only skips an unpin.
        now = self._clock()
        for pin_id, (_, expires_at) in list(self._pins.items()):
            if expires_at <= now:
                del self._pins[pin_id]


def _int_field(answer: object, key: str) -> int | None:
    value = answer.get(key) if isinstance(answer, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _partial(answer: object) -> bool:
    if not isinstance(answer, dict):
        return False
    if answer.get("partial") is True:
        return True
    message = answer.get("message")
    return isinstance(message, str) and "partial" in message.lower()
