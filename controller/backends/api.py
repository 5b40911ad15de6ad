"""The backend seam: how the controller talks to one model server (STYLE.md rule 2).

A backend is a small transport-like object: :meth:`Backend.send` one OpenAI-compatible request
and get a :class:`BackendResponse` (whole or streamed), :meth:`Backend.scrape` its load,
:meth:`Backend.health`, :meth:`Backend.models`, :meth:`Backend.aclose`. Everything a server
kind does differently — how a scheduling priority is written into the body, which metrics it
exposes, whether it reports usage in a stream — lives behind this seam, so the service and the
pure policies never branch on the server kind.

Errors (derived from :mod:`agentrt.errors`; httpx errors never cross this seam)::

    LLMCallError
    └── BackendError              the backend answered something unusable
        └── BackendUnavailable    nothing was received: safe to retry on another backend
                                  (also an EndpointUnavailable)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentrt.errors import EndpointUnavailable, LLMCallError

__all__ = [
    "Backend",
    "BackendCapabilities",
    "BackendError",
    "BackendLoad",
    "BackendRequest",
    "BackendResponse",
    "BackendUnavailable",
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

    async def models(self) -> list[dict[str, Any]]:
        """The OpenAI ``/v1/models`` entries it serves. Raises :class:`BackendError`."""

    async def aclose(self) -> None:
        """Release resources owned by this backend (not a shared HTTP client)."""
