"""What the HTTP layer accepts and passes on, filled by the app from its config (the endpoints
never read the core's configuration)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RequestLimits"]


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """Limits and switches of the request paths."""

    #: Largest request body read (bytes); larger ones get 413.
    max_body_bytes: int
    #: Pass the client's ``Authorization`` on to backends (single-tenant setups); a
    #: backend's own credential replaces it.
    forward_client_authorization: bool = False
