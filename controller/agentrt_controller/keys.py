"""The one key of a program, used by every controller component and by the simulator.

The process table, the routers' program affinity and prefix index, the retention policy and
tracker, the dispatcher and the service all key a program by :class:`ProgramKey`. Two tenants,
or two sessions, may use the same program id; their programs are different keys. JSON views
keep the parts as separate ``tenant`` / ``session_id`` / ``program_id`` fields.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_SESSION", "ProgramKey"]

#: Session id of calls that carry none (untagged calls, single-session drivers such as the
#: simulator).
DEFAULT_SESSION = "anonymous"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgramKey:
    """A program as the controller tells programs apart (keyword-only: the two ids are both
    strings and must not be swapped)."""

    #: The client session (``X-Agentrt-Session``) the program runs in.
    session_id: str
    #: The program id, unique within its session.
    program_id: str
    #: The authenticated tenant (the controller fills it from the caller's API key, never
    #: from a client header; docs/security.md); ``None`` = no tenant (the simulator).
    tenant: str | None = None

    @classmethod
    def untagged(cls, program_id: str) -> ProgramKey:
        """The key of ``program_id`` in :data:`DEFAULT_SESSION` (untagged calls, the
        simulator)."""
        return cls(session_id=DEFAULT_SESSION, program_id=program_id)
