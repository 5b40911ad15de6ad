"""The one key of a program, used by every controller component and by the simulator.

The process table, the routers' program affinity and prefix index, the retention policy and
tracker, the dispatcher and the service all key a program by :class:`ProgramKey`. Two tenants,
or two sessions, may use the same program id; their programs are different keys. JSON views
keep the parts as separate ``tenant`` / ``session_id`` / ``program_id`` fields.

A driver builds a call's key once (the controller when it parses the request, the simulator
when it creates the program) and carries it on the call's facts
(:class:`~agentrt_controller.scheduling.call.CallFacts`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from agentrt.protocol import DEFAULT_SESSION_ID

__all__ = ["DEFAULT_SESSION", "ProgramKey"]

#: Session id of calls that carry none (untagged calls, single-session drivers such as the
#: simulator): the wire protocol's default, spelled once in :mod:`agentrt.protocol`.
DEFAULT_SESSION = DEFAULT_SESSION_ID

#: Prefix of the program id of an untagged call's one-call program (:meth:`ProgramKey.one_call`).
_ONE_CALL_PREFIX = "call-"


class _ProgramKeyFields(NamedTuple):
    #: The client session (``X-Agentrt-Session``) the program runs in.
    session_id: str
    #: The program id, unique within its session.
    program_id: str
    #: The authenticated tenant (the controller fills it from the caller's API key, never
    #: from a client header; docs/security.md); ``None`` = no tenant (the simulator).
    tenant: str | None = None


class ProgramKey(_ProgramKeyFields):
    """A program as the controller tells programs apart (keyword-only: the two ids are both
    strings and must not be swapped). Immutable.

    A tuple underneath, for speed: every policy keys dictionaries by it, dozens of lookups
    per call, and a tuple's hash and ``==`` run in C where a frozen dataclass's run Python
    code each time. Its hash is the same as the frozen dataclass's it replaced (the hash of
    the tuple of its fields), so iteration orders of sets of keys are unchanged.
    """

    __slots__ = ()

    def __new__(cls, *, session_id: str, program_id: str, tenant: str | None = None) -> ProgramKey:
        return super().__new__(cls, session_id, program_id, tenant)

    def __getnewargs_ex__(self) -> tuple[tuple[()], dict[str, Any]]:  # pickle, copy
        return (), {"session_id": self[0], "program_id": self[1], "tenant": self[2]}

    @classmethod
    def untagged(cls, program_id: str, tenant: str | None = None) -> ProgramKey:
        """The key of ``program_id`` in :data:`DEFAULT_SESSION` (calls naming no session, the
        simulator)."""
        return cls(session_id=DEFAULT_SESSION, program_id=program_id, tenant=tenant)

    @classmethod
    def one_call(cls, call_id: str, tenant: str | None = None) -> ProgramKey:
        """The one-call program of an untagged call ``call_id`` (``call-<call id>`` in
        :data:`DEFAULT_SESSION`)."""
        return cls.untagged(_ONE_CALL_PREFIX + call_id, tenant)
