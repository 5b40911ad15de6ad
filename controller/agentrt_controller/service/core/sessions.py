"""The sessions clients opened (``POST /agentrt/v1/sessions``, docs/protocol.md).

Informational only: programs carry their session id in every event and call, so a session
that was never opened works the same. Sessions are kept per tenant (two tenants may use one
session id without touching each other's); the newest ``max_sessions`` are kept.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["SessionRegistry"]


@dataclass(frozen=True, slots=True)
class _Session:
    #: Free-form client description (``SessionStart.client``).
    client: str
    #: When it was opened (seconds, the engine's clock).
    started_s: float


class SessionRegistry:
    """Open sessions by id, oldest first (event loop thread only)."""

    def __init__(self, max_sessions: int = 100_000) -> None:
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[tuple[str, str], _Session] = OrderedDict()

    def open(self, tenant: str, session_id: str | None, client: str, now_s: float) -> str:
        """Open (or refresh) ``tenant``'s ``session_id``, or a new random id when ``None``;
        returns it."""
        session_id = session_id or uuid.uuid4().hex
        key = (tenant, session_id)
        self._sessions[key] = _Session(client, now_s)
        self._sessions.move_to_end(key)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return session_id

    def close(self, tenant: str, session_id: str) -> None:
        """Forget ``tenant``'s ``session_id`` (unknown ids are ignored)."""
        self._sessions.pop((tenant, session_id), None)

    def __len__(self) -> int:
        return len(self._sessions)
