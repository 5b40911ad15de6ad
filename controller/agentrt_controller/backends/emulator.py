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
The scrape adds ``agentrt_engine_pinned_blocks`` and the engine's time scale
(``agentrt_engine_time_scale``; the controller warns when its own ``time_scale`` differs) to
the load (the batch size ``agentrt_engine_max_num_seqs``, which bounds the adaptive admission
window, is read by the ``vllm`` kind already).

:class:`DetectedBackend` is what a backend configured **without a kind** becomes
(:attr:`~agentrt_controller.backends.spec.BackendSpec.detect_kind`): it starts as ``vllm``
and, in :meth:`~DetectedBackend.detect_features` (after the first successful health probe —
at start-up when the server is up — and after each recovery), asks the server once for
``GET /agentrt/engine/v1/pins``. Our emulator answers ``{"pins": [...], "pinned_blocks": N,
...}``; vLLM has no such route (404). The answer decides the kind: ``emulator`` (native pins
on) or ``vllm``; a failed or timed-out probe (``probe_timeout_s``, 2 s) leaves ``vllm``. Each
verdict is logged once per detection on the ``agentrt.controller`` logger, with the reason.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar
from urllib.parse import quote

from agentrt_controller.backends.api import (
    BackendCapabilities,
    BackendError,
    BackendLoad,
    PinError,
    PinResult,
)
from agentrt_controller.backends.http import VllmBackend, VllmBackendConfig, count_or_none
from agentrt_controller.backends.prometheus_text import min_samples, sum_samples
from agentrt_controller.backends.transport import HttpPool
from agentrt_controller.backends.wire import json_answer

__all__ = [
    "PINS_PATH",
    "TIME_SCALE_METRIC",
    "DetectedBackend",
    "EmulatorBackend",
    "engine_time_scale",
    "identifies_as_emulator",
    "time_scales_differ",
]

PINS_PATH = "/agentrt/engine/v1/pins"
#: The emulator's ``--time-scale`` (model seconds per wall second) in its ``/metrics``.
TIME_SCALE_METRIC = "agentrt_engine_time_scale"

_log = logging.getLogger("agentrt.controller")


class EmulatorBackend(VllmBackend):
    """Our engine emulator: a vLLM-like server with native TTL pins."""

    KIND: ClassVar[str] = "emulator"

    def _capabilities(self, send_priority: bool) -> BackendCapabilities:
        return BackendCapabilities(
            supports_priority=send_priority,
            scrapes_metrics=True,
            supports_tokenize=True,
            supports_pins=True,
            takes_cache_salt=True,
        )

    def load_from_metrics(self, text: str) -> BackendLoad:
        load = super().load_from_metrics(text)
        found = sum_samples(text, ("agentrt_engine_pinned_blocks",))
        return replace(
            load,
            pinned_blocks=count_or_none(found.get("agentrt_engine_pinned_blocks")),
            time_scale=engine_time_scale(text),
        )

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


def engine_time_scale(text: str) -> float | None:
    """The engine's time scale in a ``/metrics`` text (:data:`TIME_SCALE_METRIC`; one engine
    per URL); ``None`` when it publishes none (a real engine) or a value not > 0."""
    scale = min_samples(text, (TIME_SCALE_METRIC,)).get(TIME_SCALE_METRIC)
    return scale if scale is not None and scale > 0 else None


def time_scales_differ(engine_scale: float | None, own_scale: float) -> bool:
    """Whether an engine publishing ``engine_scale`` runs on another clock than a controller
    or replay at ``own_scale`` (``None``, a real engine or an unknown one: never)."""
    return engine_scale is not None and not math.isclose(engine_scale, own_scale, rel_tol=1e-6)


def identifies_as_emulator(status_code: int, answer: object) -> bool:
    """Whether a ``GET /agentrt/engine/v1/pins`` answer (status, parsed JSON or ``None``) is
    our emulator's pin listing: 200 with a ``pins`` list and an integer ``pinned_blocks``."""
    return (
        status_code == 200
        and isinstance(answer, dict)
        and isinstance(answer.get("pins"), list)
        and isinstance(answer.get("pinned_blocks"), int)
    )


class DetectedBackend(EmulatorBackend):
    """A backend configured without a kind: ``vllm`` until the server identified itself as our
    emulator (then ``emulator``, with native pins), decided again after each recovery.

    Until the first detection — and whenever it fails — it is exactly the ``vllm`` kind:
    ``capabilities.supports_pins`` is off, so KV retention never calls :meth:`pin`.
    """

    KIND: ClassVar[str] = "vllm"

    def __init__(
        self, backend_id: str, url: str, http: HttpPool, config: VllmBackendConfig | None = None
    ) -> None:
        super().__init__(backend_id, url, http, config)
        #: The last detection's verdict and its reason (for the log and tests); ``""`` before.
        self.detection = ""

    def _capabilities(self, send_priority: bool) -> BackendCapabilities:
        return replace(super()._capabilities(send_priority), supports_pins=False)

    async def detect_features(self) -> None:
        """Resolve ``priority=auto`` (as the ``vllm`` kind does), then the kind. Never raises."""
        await super().detect_features()
        kind, reason = await self._probe_kind()
        self.kind = kind
        self.capabilities = replace(self.capabilities, supports_pins=kind == "emulator")
        self.detection = f"kind {kind} ({reason})"
        _log.warning("backend %s: %s", self.backend_id, self.detection)

    async def _probe_kind(self) -> tuple[str, str]:
        """``(kind, reason)`` from one ``GET`` of the pin listing."""
        try:
            response = await self._get(PINS_PATH)
        except BackendError as exc:
            return "vllm", (
                f"detection failed: GET {PINS_PATH}: {exc}; "
                "set kind=emulator or kind=vllm to skip detection"
            )
        try:
            answer: Any = response.json()
        except ValueError:
            answer = None
        if identifies_as_emulator(response.status_code, answer):
            return "emulator", f"detected: GET {PINS_PATH} answers our emulator's pin listing"
        if response.status_code >= 500:
            return "vllm", (
                f"detection failed: GET {PINS_PATH} answered HTTP {response.status_code}; "
                "set kind=emulator or kind=vllm to skip detection"
            )
        return "vllm", f"detected: GET {PINS_PATH} answers HTTP {response.status_code}, no pins"
