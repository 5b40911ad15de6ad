"""What the HTTP layer hands the core for one generation call, and how the core turns it into
the request for the backend the call was admitted to.

The HTTP layer parses (:mod:`~agentrt_controller.service.http.incoming`); the core decides
everything that depends on the backend: whether the tenant's ``cache_salt`` goes in the body
(:attr:`BackendCapabilities.takes_cache_salt`), whether to ask for a usage chunk in a stream
(:attr:`BackendCapabilities.stream_usage`) and the scheduler's priority. The backend adds its
own credential when it sends (:class:`~agentrt_controller.backends.api.HoldsCredential`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrt_controller.backends.api import BackendCapabilities, BackendRequest

__all__ = ["GenerationRequest"]


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One parsed generation request (holds the prompt: its repr shows sizes only)."""

    #: Path relative to a backend's base URL, e.g. ``/v1/chat/completions``.
    path: str
    #: The client's body exactly as received, without the controller's ``cache_salt``.
    raw_body: bytes = field(repr=False)
    #: The parsed body; holds the controller's ``cache_salt`` when :attr:`cache_salt` is set.
    body: Mapping[str, Any] = field(repr=False)
    #: The client asked for ``stream: true``.
    stream: bool
    #: Headers for the backend: the client's forwardable ones and the trace context (the
    #: backend adds its own credential). Holds credentials: never logged.
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: The tenant's ``cache_salt`` the controller chose; ``None`` = none (open mode).
    cache_salt: str | None = field(default=None, repr=False)
    #: Ask a backend that can (:attr:`BackendCapabilities.stream_usage`) for a usage chunk
    #: the client did not ask for (the service strips it again); ``False`` when the client
    #: asked itself, for whole answers and for the Responses API (it always reports usage).
    want_stream_usage: bool = False

    def for_backend(
        self, capabilities: BackendCapabilities, priority: int | None
    ) -> BackendRequest:
        """The request for a backend with ``capabilities``; ``priority`` is the scheduler's
        (lower = sooner; ``None`` = send none)."""
        salted = capabilities.takes_cache_salt
        return BackendRequest(
            path=self.path,
            raw_body=self._raw_body_with_salt() if salted else self.raw_body,
            body=self.body if salted else self._body_without_salt(),
            stream=self.stream,
            headers=self.headers,
            priority=priority,
            add_stream_usage=self.want_stream_usage and capabilities.stream_usage,
        )

    def _body_without_salt(self) -> Mapping[str, object]:
        if self.cache_salt is None:
            return self.body
        return {k: v for k, v in self.body.items() if k != "cache_salt"}

    def _raw_body_with_salt(self) -> bytes:
        """:attr:`raw_body` with ``"cache_salt"`` added as the last field (the prompt is not
        encoded again)."""
        if self.cache_salt is None:
            return self.raw_body
        inner = self.raw_body.rstrip()[:-1].rstrip()  # a JSON object's bytes end with "}"
        salt = b'"cache_salt":' + json.dumps(self.cache_salt).encode()
        return inner + (b"" if inner.endswith(b"{") else b",") + salt + b"}"
