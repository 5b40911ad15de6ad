"""The backend seam: how the controller talks to one model server (docs/architecture.md,
"Design rules", rule 2).

A backend is a small transport-like object: :meth:`Backend.send` one OpenAI-compatible request
and get a :class:`BackendResponse` (whole or streamed), :meth:`Backend.scrape` its load,
:meth:`Backend.health`, :meth:`Backend.models`, :meth:`Backend.aclose`. Everything a server
kind does differently — how a scheduling priority is written into the body, which metrics it
exposes, whether it reports usage in a stream — lives behind this seam, so the service and the
pure policies never branch on the server kind.

Optional capability interfaces, checked with ``isinstance`` (they are runtime-checkable) and
announced in :class:`BackendCapabilities` (docs/backends.md):

* :class:`SupportsPins` — ``pin`` / ``unpin`` a prompt prefix's KV blocks for a TTL (the
  emulator natively; SGLang where its ``/hicache/pin_prefix`` exists). :func:`pins_of` returns
  the interface or ``None``; KV retention (Continuum, arXiv 2511.02230; docs/routing.md, "KV
  retention during tool waits") calls it.
* :class:`SupportsTokenize` — exact prompt token counts from the server's own tokenizer and
  chat template (vLLM, the emulator), cached; never on the request path by default.
* :class:`DetectsFeatures` — ``detect_features()`` after the first successful health probe
  and after each recovery (e.g. vLLM's ``priority=auto``).
* :class:`HoldsCredential` — the controller's own credential for the server (its ``api_key``
  option), stored once, in the backend, which applies it to everything it sends: forwarded
  calls, health probes, scrapes, model lists, pins. Only the KV-events feed's ``/tokenize``
  (which goes around the backend) reads it.

Errors (derived from :mod:`agentrt.errors`; httpx errors never cross this seam)::

    LLMCallError
    └── BackendError              the backend answered something unusable
        ├── BackendUnavailable    nothing was received: safe to retry on another backend
        │                         (also an EndpointUnavailable)
        ├── BackendDisconnected   the connection broke after the status line (the backend
        │                         likely died); retry is safe while nothing reached the client
        └── PinError              a pin / unpin was refused or failed
            └── PinsUnsupported   this backend cannot pin (this way, or at all)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentrt.errors import EndpointUnavailable, LLMCallError
from agentrt_controller.backends.kv_capacity import KvCapacity

__all__ = [
    "Backend",
    "BackendCapabilities",
    "BackendDisconnected",
    "BackendError",
    "BackendLoad",
    "BackendRequest",
    "BackendResponse",
    "BackendUnavailable",
    "DetectsFeatures",
    "HoldsCredential",
    "PinError",
    "PinResult",
    "PinsUnsupported",
    "SupportsPins",
    "SupportsTokenize",
    "credential_of",
    "pins_of",
]


class BackendError(LLMCallError):
    """A backend failed after it had started answering, or answered garbage."""


class BackendUnavailable(BackendError, EndpointUnavailable):
    """The backend could not be reached, or closed before sending a response status.

    Nothing reached the client yet, so the call may be retried on another backend.
    """

    def __init__(self, message: str, *, connect_failed: bool = True) -> None:
        super().__init__(message)
        #: True when no connection could be made (the backend is likely down); False when an
        #: established connection closed before the status line (e.g. a stale keep-alive).
        self.connect_failed = connect_failed


class BackendDisconnected(BackendError):
    """The connection broke (reset, closed early) after the response had begun: the backend
    most likely died. How much of the answer it produced is unknown; the caller may retry the
    call elsewhere only while nothing of it reached the client. Timeouts are not this."""


class PinError(BackendError):
    """A pin or unpin was refused (bad input, no budget) or failed."""


class PinsUnsupported(PinError):
    """This backend cannot pin at all, or not the way asked (e.g. SGLang pins token ids
    only; a server without the pin endpoint)."""


@dataclass(frozen=True, slots=True)
class BackendCapabilities:
    """What a backend kind can do; the service reads these, never the kind's name."""

    #: Honours a per-request scheduling ``priority`` (vLLM needs ``--scheduling-policy
    #: priority``; sending one to an FCFS-only vLLM is an error, hence a per-backend switch).
    supports_priority: bool = False
    #: Exposes Prometheus metrics worth scraping (``vllm:num_requests_waiting`` ...).
    scrapes_metrics: bool = False
    #: Understands ``stream_options.include_usage`` (a final usage chunk in streams).
    stream_usage: bool = True
    #: Implements :class:`SupportsPins` and the server is configured for it.
    supports_pins: bool = False
    #: Implements :class:`SupportsTokenize` (exact token counts from the server).
    supports_tokenize: bool = False
    #: Honours vLLM's ``cache_salt`` body field (vLLM and our emulator): the service sends a
    #: tenant's salt only to such a backend (an OpenAI-compatible service or SGLang may
    #: reject the field).
    takes_cache_salt: bool = False


@dataclass(slots=True)
class BackendRequest:
    """One OpenAI-compatible request to forward. Holds the prompt: its repr hides the body."""

    #: Path relative to the backend's base URL, e.g. ``/v1/chat/completions``.
    path: str
    #: The client's body exactly as received (JSON object bytes).
    raw_body: bytes
    #: The parsed body (read-only by convention; the backend encodes its own copy).
    body: Mapping[str, Any]
    #: True when the client asked for ``stream: true``.
    stream: bool
    #: Headers to forward (already filtered: no hop-by-hop, no Host, no Content-Length).
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Program-level scheduling priority, lower = sooner (the scheduler's scale);
    #: ``None`` = send none. Each backend kind writes it in its own way.
    priority: int | None = None
    #: Ask the backend to append a usage chunk to a stream the client did not ask usage for;
    #: the service strips that chunk again before the client sees it.
    add_stream_usage: bool = False

    def __repr__(self) -> str:
        return (
            f"BackendRequest(path={self.path!r}, body_bytes={len(self.raw_body)}, "
            f"stream={self.stream}, priority={self.priority})"
        )


class BackendResponse(Protocol):
    """An answer whose status and headers arrived; the body is read or streamed after."""

    #: HTTP status code from the backend.
    status_code: int
    #: Response headers (lower-case names).
    headers: Mapping[str, str]

    async def aread(self) -> bytes:
        """The whole body. Raises :class:`BackendError` if the connection breaks."""

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives. Raises :class:`BackendError` if the connection breaks."""

    async def aclose(self) -> None:
        """Release the connection; closing an unfinished stream aborts the upstream request."""


@dataclass(frozen=True, slots=True)
class BackendLoad:
    """A scrape of a backend's own metrics; ``None`` = unknown (missing or garbage)."""

    #: Requests the engine is running (``vllm:num_requests_running``).
    num_running: int | None = None
    #: Requests queued inside the engine (``vllm:num_requests_waiting``).
    num_waiting: int | None = None
    #: KV cache usage as a fraction in [0, 1] (``vllm:kv_cache_usage_perc``).
    kv_cache_usage: float | None = None
    #: Cumulative prefix-cache lookups, in tokens (``vllm:prefix_cache_queries_total``).
    prefix_cache_queries: float | None = None
    #: Cumulative prefix-cache hits, in tokens (``vllm:prefix_cache_hits_total``).
    prefix_cache_hits: float | None = None
    #: Recent prefix-cache hit rate in [0, 1] as the server reports it (SGLang's
    #: ``sglang:cache_hit_rate``); vLLM gives the counters above instead.
    prefix_cache_hit_rate: float | None = None
    #: KV blocks held by retention pins (the emulator's ``agentrt_engine_pinned_blocks``).
    pinned_blocks: int | None = None
    #: The engine's batch size (the emulator's ``agentrt_engine_max_num_seqs``; vLLM publishes
    #: none), which bounds the adaptive admission window.
    max_num_seqs: int | None = None
    #: Model seconds per wall second of an engine emulated faster than real time (the
    #: emulator's ``agentrt_engine_time_scale``); ``None`` = not published (a real engine).
    time_scale: float | None = None
    #: Its KV memory (GPU capacity, CPU tier) as published (``vllm:cache_config_info``,
    #: ``sglang:max_total_num_tokens``; :mod:`~agentrt_controller.backends.kv_capacity`);
    #: ``None`` = not published.
    capacity: KvCapacity | None = None


class Backend(Protocol):
    """One model server."""

    #: Stable id used in routing, metrics and introspection.
    backend_id: str
    #: Kind name (``vllm``, ``openai``...), for display only.
    kind: str
    #: Base URL, for display only.
    url: str
    capabilities: BackendCapabilities

    async def send(self, request: BackendRequest) -> BackendResponse:
        """Forward ``request``; return once the status line and headers arrived.

        Raises :class:`BackendUnavailable` when nothing was received (retry elsewhere is
        safe) and :class:`BackendError` for other failures. Cancelling the awaiting task
        aborts the request.
        """

    async def scrape(self) -> BackendLoad:
        """Current load; unknown fields are ``None``. Never raises for garbage metrics;
        raises :class:`BackendUnavailable` when the backend cannot be reached."""

    async def health(self) -> bool:
        """True when the backend answers its health check. Never raises."""

    async def models(self) -> list[dict[str, object]]:
        """The OpenAI ``/v1/models`` entries it serves. Raises :class:`BackendError`."""

    async def aclose(self) -> None:
        """Release resources owned by this backend (not a shared HTTP client)."""


@dataclass(frozen=True, slots=True)
class PinResult:
    """What a backend says it pinned."""

    pin_id: str
    #: KV blocks now held by the pin; ``None`` when the server does not say.
    blocks: int | None = None
    #: Length of the pinned token prefix (tokens); ``None`` when unknown.
    tokens: int | None = None
    #: TTL the server applied (seconds); ``None`` = until unpinned (emulator only).
    ttl_s: float | None = None
    #: Only part of the prefix is held (SGLang: pin budget exhausted mid-prefix).
    partial: bool = False


@runtime_checkable
class SupportsPins(Protocol):
    """Native KV retention: hold a prompt prefix's KV blocks for ``ttl_s`` seconds.

    Exactly one of ``messages`` (with optional ``tools``; rendered with the server's chat
    template *without* a generation prompt, so the pin covers what the program's next call
    starts with), ``prompt`` (text) or ``token_ids`` is given. ``cache_salt`` must be the salt
    the program's calls carry (salted KV is a separate namespace). Re-using a ``pin_id``
    replaces the pin. A pin holds only blocks that are *already cached*; it never computes.
    """

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
        """Pin; ``ttl_s`` in seconds of the server's clock (``None`` = until :meth:`unpin`,
        where the server allows it). Raises :class:`PinsUnsupported`, :class:`PinError`
        (refused), :class:`BackendUnavailable` (unreachable)."""

    async def unpin(self, pin_id: str) -> bool:
        """Release now. ``False`` when the server no longer knew the pin (expired, never
        made, server restarted). Raises :class:`PinError`, :class:`BackendUnavailable`."""


@runtime_checkable
class SupportsTokenize(Protocol):
    """Exact token counts from the server's own tokenizer and chat template."""

    async def count_tokens(
        self,
        *,
        messages: Sequence[Mapping[str, object]] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        prompt: str | None = None,
        add_generation_prompt: bool = True,
    ) -> int:
        """Prompt tokens (messages rendered by the chat template, or ``prompt`` text), from a
        bounded cache when the same input was counted before. Raises :class:`BackendError`."""


@runtime_checkable
class DetectsFeatures(Protocol):
    """A backend kind that asks the server what it supports (called by the backend pool after
    the first successful health probe and after each recovery)."""

    async def detect_features(self) -> None:
        """Probe and update :attr:`Backend.capabilities`. Never raises."""


@runtime_checkable
class HoldsCredential(Protocol):
    """A backend that holds the controller's own credential for its server."""

    #: Sent as ``Authorization: Bearer`` on every request the backend makes (replacing any
    #: forwarded one: a tenant's key never reaches a backend that has its own); ``None`` =
    #: none. Never logged.
    credential: str | None


def credential_of(backend: object) -> str | None:
    """``backend``'s credential (:class:`HoldsCredential`); ``None`` when it holds none."""
    return backend.credential if isinstance(backend, HoldsCredential) else None


def pins_of(backend: object) -> SupportsPins | None:
    """``backend`` as :class:`SupportsPins` when it implements it and announces
    ``capabilities.supports_pins``; else ``None``."""
    capabilities = getattr(backend, "capabilities", None)
    if isinstance(backend, SupportsPins) and getattr(capabilities, "supports_pins", False):
        return backend
    return None
