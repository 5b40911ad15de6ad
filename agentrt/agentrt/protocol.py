"""The agentrt wire contract, shared by the SDK and the controller (docs/protocol.md).

Two parts:

1. **Call tags** — HTTP headers on every OpenAI-compatible request made inside a program.
   They let any server in the path (our controller, a gateway) schedule by program.
2. **Program events** — small JSON endpoints on the controller: session start/end, program
   start/end, tool-wait start/end with the tool's predicted duration.

Everything here is plain data: no I/O. The SDK writes these headers and events; the controller
parses them with :meth:`CallTags.from_headers` and the pydantic models below.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrt.errors import ProtocolError

__all__ = [
    "DEFAULT_SESSION_ID",
    "EVENTS_PREFIX",
    "HEADER_ATTEMPT",
    "HEADER_NODE_ID",
    "HEADER_OBJECTIVE",
    "HEADER_PARENT_COUNT",
    "HEADER_PARENT_DIGEST",
    "HEADER_PARENT_IDS",
    "HEADER_PROGRAM_ID",
    "HEADER_QUEUE_MS",
    "HEADER_SESSION_ID",
    "HEADER_THREAD_ID",
    "HEADER_TIMEOUT_MS",
    "HEADER_TRACEPARENT",
    "WIRE_PARENT_IDS",
    "CallTags",
    "Objective",
    "ProgramEnd",
    "ProgramStart",
    "SessionStart",
    "SessionStarted",
    "ToolWaitEnd",
    "ToolWaitStart",
    "deadline_after",
    "parents_digest",
    "parse_timeout_ms",
]

HEADER_SESSION_ID = "X-Agentrt-Session-Id"
#: The session of a call that names none (no :data:`HEADER_SESSION_ID`): the one spelling,
#: used by the controller's program keys too (``agentrt_controller.keys``).
DEFAULT_SESSION_ID = "anonymous"
HEADER_PROGRAM_ID = "X-Agentrt-Program-Id"
HEADER_THREAD_ID = "X-Agentrt-Thread-Id"
HEADER_NODE_ID = "X-Agentrt-Node-Id"
HEADER_PARENT_IDS = "X-Agentrt-Parent-Ids"
#: How many parents the node has in all, when :data:`HEADER_PARENT_IDS` lists only the first
#: :data:`WIRE_PARENT_IDS` of them (a fan-in wider than that: the reduce of a map-reduce).
HEADER_PARENT_COUNT = "X-Agentrt-Parent-Count"
#: ``sha256:`` + hex of the node's whole parent list (:func:`parents_digest`), sent with
#: :data:`HEADER_PARENT_COUNT`: it names the full set, which the SDK's own record keeps.
HEADER_PARENT_DIGEST = "X-Agentrt-Parent-Digest"
HEADER_ATTEMPT = "X-Agentrt-Attempt"
HEADER_TIMEOUT_MS = "X-Agentrt-Timeout-Ms"
#: ``latency`` (default) or ``throughput``: a hint, as Parrot deduces for map vs reduce calls.
#: Reserved, like the parent ids and the attempt (see ``CallTags``).
HEADER_OBJECTIVE = "X-Agentrt-Objective"
#: The W3C Trace Context header every call also carries. Not a call tag: the SDK writes it
#: (with ``tracestate`` and ``baggage``) and the controller reads it through OpenTelemetry's
#: propagator, never through :class:`CallTags` (docs/tracing.md).
HEADER_TRACEPARENT = "traceparent"
#: Response header (optional, set by a controller or engine): milliseconds the call waited in
#: queues before it started executing; the SDK splits LLM time into waiting and execution.
HEADER_QUEUE_MS = "X-Agentrt-Queue-Ms"

#: Prefix of the controller's program-event endpoints.
EVENTS_PREFIX = "/agentrt/v1"

Objective = Literal["latency", "throughput"]

# Ids are opaque to the server but must be header-safe and bounded.
_ID_RE = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
#: Parent ids a sender lists in :data:`HEADER_PARENT_IDS` at most; a node with more lists its
#: first ``WIRE_PARENT_IDS`` and adds the count and the digest of all (docs/protocol.md,
#: "Wide fan-ins"). 64 ids of 128 characters stay under 9 KiB of header.
WIRE_PARENT_IDS = 64
#: Parent ids a receiver accepts in one header (senders before the count and digest existed
#: listed up to this many).
_MAX_PARENTS = 256
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def parents_digest(parent_ids: tuple[str, ...] | list[str]) -> str:
    """``sha256:`` + the hex SHA-256 of ``parent_ids`` joined by ``,`` in DAG order: the value
    of :data:`HEADER_PARENT_DIGEST` for a node with these parents."""
    return "sha256:" + hashlib.sha256(",".join(parent_ids).encode()).hexdigest()


def parse_timeout_ms(raw: str | None) -> int | None:
    """The value of :data:`HEADER_TIMEOUT_MS`: milliseconds >= 0; ``None`` when absent or
    empty. Raises :class:`ProtocolError` for anything else (a server answers 400)."""
    if raw is None or not raw.strip():
        return None
    try:
        timeout_ms = int(raw)
    except ValueError as exc:
        raise ProtocolError(
            f"{HEADER_TIMEOUT_MS} must be an integer number of milliseconds >= 0, got {raw[:40]!r}"
        ) from exc
    if timeout_ms < 0:
        raise ProtocolError(f"{HEADER_TIMEOUT_MS} must be >= 0 ms, got {timeout_ms}")
    return timeout_ms


def deadline_after(timeout_ms: int | None, now_s: float, time_scale: float = 1.0) -> float:
    """The absolute deadline, on a receiver's clock reading ``now_s``, of a budget of
    ``timeout_ms`` milliseconds of the sender's wall clock (a call's :data:`HEADER_TIMEOUT_MS`,
    a program's ``timeout_ms``); ``math.inf`` when there is none. ``time_scale``: the
    receiver's seconds per wall second (a controller in front of engines run faster than real
    time counts model seconds)."""
    if timeout_ms is None:
        return math.inf
    return now_s + timeout_ms / 1000.0 * time_scale


def _check_id(name: str, value: str) -> str:
    if not _ID_RE.match(value):
        raise ProtocolError(
            f"{name} must be 1-128 characters of [A-Za-z0-9._:@/+=-], got {value[:40]!r}"
        )
    return value


@dataclass(frozen=True, slots=True)
class CallTags:
    """The tags carried by one LLM call. Ids are opaque strings chosen by the SDK. The trace
    context headers the call also carries are not tags (see :data:`HEADER_TRACEPARENT`).

    ``parent_ids`` (with ``parent_count`` and ``parent_digest``), ``attempt`` and ``objective``
    are reserved: carried and shown in introspection, not used by any policy yet (the
    controller parses them onto its ``Call``, the SDK's ``Program.to_dict()`` shows them;
    docs/protocol.md, "Reserved fields" and "Wide fan-ins").
    """

    #: Client session (one ``Runtime``); groups programs of one tenant / process.
    session_id: str
    #: The program (one agent run); the unit of scheduling.
    program_id: str
    #: The parallel branch of the program the call belongs to; ``"main"`` for the root thread.
    thread_id: str
    #: This call's node in the program's DAG.
    node_id: str
    #: Node ids this call depends on (its parents in the DAG), as listed on the wire: all of
    #: them, or the first :data:`WIRE_PARENT_IDS` when :attr:`parent_count` is larger; empty for
    #: a root. Reserved. Build tags from a node's full list with :meth:`for_node`.
    parent_ids: tuple[str, ...] = ()
    #: 1 for the first try of this node, 2 for the first retry, ... Reserved.
    attempt: int = 1
    #: Remaining budget in milliseconds at send time; ``None`` = no deadline.
    timeout_ms: int | None = None
    #: Scheduling hint for the call (``latency`` or ``throughput``). Reserved.
    objective: Objective = "latency"
    #: How many parents the node has in all (>= ``len(parent_ids)``); ``None`` = exactly the
    #: ones listed. Reserved.
    parent_count: int | None = None
    #: :func:`parents_digest` of the node's whole parent list when :attr:`parent_count` says
    #: more than are listed; ``None`` otherwise. Reserved.
    parent_digest: str | None = None

    @classmethod
    def for_node(
        cls,
        *,
        session_id: str,
        program_id: str,
        thread_id: str,
        node_id: str,
        parent_ids: tuple[str, ...],
        attempt: int = 1,
        timeout_ms: int | None = None,
        objective: Objective = "latency",
    ) -> CallTags:
        """The tags of a call whose node has the parents ``parent_ids`` (all of them, any
        number): up to :data:`WIRE_PARENT_IDS` are listed as they are; a wider fan-in lists the
        first :data:`WIRE_PARENT_IDS` and carries the count and the digest of the whole list,
        so the wire stays bounded and the full set stays named (docs/protocol.md)."""
        wide = len(parent_ids) > WIRE_PARENT_IDS
        return cls(
            session_id=session_id,
            program_id=program_id,
            thread_id=thread_id,
            node_id=node_id,
            parent_ids=parent_ids[:WIRE_PARENT_IDS] if wide else parent_ids,
            attempt=attempt,
            timeout_ms=timeout_ms,
            objective=objective,
            parent_count=len(parent_ids) if wide else None,
            parent_digest=parents_digest(parent_ids) if wide else None,
        )

    @property
    def total_parents(self) -> int:
        """How many parents the call's node has (listed or not)."""
        return len(self.parent_ids) if self.parent_count is None else self.parent_count

    def __post_init__(self) -> None:
        _check_id("session id", self.session_id)
        _check_id("program id", self.program_id)
        _check_id("thread id", self.thread_id)
        _check_id("node id", self.node_id)
        if len(self.parent_ids) > _MAX_PARENTS:
            raise ProtocolError(
                f"{HEADER_PARENT_IDS} lists at most {_MAX_PARENTS} ids, got "
                f"{len(self.parent_ids)}; a wider fan-in lists its first {WIRE_PARENT_IDS} with "
                f"{HEADER_PARENT_COUNT} and {HEADER_PARENT_DIGEST} (CallTags.for_node)"
            )
        for parent in self.parent_ids:
            _check_id("parent id", parent)
        if self.parent_count is not None and self.parent_count < len(self.parent_ids):
            raise ProtocolError(
                f"{HEADER_PARENT_COUNT} must be >= the {len(self.parent_ids)} parent ids "
                f"listed, got {self.parent_count}"
            )
        if self.parent_digest is not None and not _DIGEST_RE.match(self.parent_digest):
            raise ProtocolError(
                f"{HEADER_PARENT_DIGEST} must be sha256: and 64 lower-case hex digits, "
                f"got {self.parent_digest[:80]!r}"
            )
        if self.attempt < 1:
            raise ProtocolError(f"attempt must be >= 1, got {self.attempt}")
        if self.timeout_ms is not None and self.timeout_ms < 0:
            raise ProtocolError(f"timeout must be >= 0 ms, got {self.timeout_ms}")
        if self.objective not in ("latency", "throughput"):
            raise ProtocolError(f"objective must be latency or throughput, got {self.objective!r}")

    def to_headers(self) -> dict[str, str]:
        """The HTTP headers for this call. Headers whose value is the default that
        :meth:`from_headers` assumes (no parents, attempt 1, ``latency``) are left out: each
        header costs the client several µs to send."""
        headers = {
            HEADER_SESSION_ID: self.session_id,
            HEADER_PROGRAM_ID: self.program_id,
            HEADER_THREAD_ID: self.thread_id,
            HEADER_NODE_ID: self.node_id,
        }
        if self.parent_ids:
            headers[HEADER_PARENT_IDS] = ",".join(self.parent_ids)
        if self.parent_count is not None:
            headers[HEADER_PARENT_COUNT] = str(self.parent_count)
        if self.parent_digest is not None:
            headers[HEADER_PARENT_DIGEST] = self.parent_digest
        if self.attempt != 1:
            headers[HEADER_ATTEMPT] = str(self.attempt)
        if self.objective != "latency":
            headers[HEADER_OBJECTIVE] = self.objective
        if self.timeout_ms is not None:
            headers[HEADER_TIMEOUT_MS] = str(self.timeout_ms)
        return headers

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> CallTags | None:
        """Parse tags from request headers (case-insensitive mapping expected).

        Returns ``None`` when the request carries no program id (an untagged call; the
        controller then treats it as a one-call program). Raises :class:`ProtocolError` when
        tags are present but malformed.
        """
        lowered = {k.lower(): v for k, v in headers.items()}
        program_id = lowered.get(HEADER_PROGRAM_ID.lower())
        if not program_id:
            return None
        parents_raw = lowered.get(HEADER_PARENT_IDS.lower(), "")
        parents = tuple(p.strip() for p in parents_raw.split(",") if p.strip())
        try:
            attempt = int(lowered.get(HEADER_ATTEMPT.lower(), "1"))
            timeout_ms = parse_timeout_ms(lowered.get(HEADER_TIMEOUT_MS.lower()))
            count_raw = lowered.get(HEADER_PARENT_COUNT.lower())
            parent_count = int(count_raw) if count_raw not in (None, "") else None
        except ValueError as exc:
            raise ProtocolError(f"malformed agentrt header: {exc}") from exc
        objective = lowered.get(HEADER_OBJECTIVE.lower(), "latency")
        if objective not in ("latency", "throughput"):
            raise ProtocolError(f"objective must be latency or throughput, got {objective!r}")
        return cls(
            session_id=lowered.get(HEADER_SESSION_ID.lower()) or DEFAULT_SESSION_ID,
            program_id=program_id,
            thread_id=lowered.get(HEADER_THREAD_ID.lower()) or "main",
            node_id=lowered.get(HEADER_NODE_ID.lower()) or "n0",
            parent_ids=parents,
            attempt=attempt,
            timeout_ms=timeout_ms,
            objective=objective,  # type: ignore[arg-type]  # checked just above
            parent_count=parent_count,
            parent_digest=lowered.get(HEADER_PARENT_DIGEST.lower()) or None,
        )

    def deadline_s(self, now_s: float) -> float:
        """Absolute deadline on the receiver's clock (seconds); ``math.inf`` when none
        (:func:`deadline_after`)."""
        return deadline_after(self.timeout_ms, now_s)


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SessionStart(_Event):
    """``POST {EVENTS_PREFIX}/sessions`` — open a client session."""

    #: Proposed session id; the controller echoes it (or makes one when omitted).
    session_id: str | None = Field(default=None, pattern=_ID_RE.pattern)
    #: Free-form client description, e.g. ``"agentrt-sdk/0.1.0"``.
    client: str = Field(default="", max_length=200)


class SessionStarted(_Event):
    """Answer to :class:`SessionStart`."""

    session_id: str
    #: The controller's program idle timeout (seconds), so clients know how long state lives.
    idle_timeout_s: float


class ProgramStart(_Event):
    """``POST {EVENTS_PREFIX}/programs/{program_id}/start`` — a program begins (optional:
    a first tagged call also creates the program)."""

    session_id: str = Field(pattern=_ID_RE.pattern)
    #: Human-readable program kind, e.g. ``"react"``.
    name: str = Field(default="", max_length=200)
    #: Remaining budget of the whole program (milliseconds), if it has a deadline.
    timeout_ms: int | None = Field(default=None, ge=0)


class ProgramEnd(_Event):
    """``POST {EVENTS_PREFIX}/programs/{program_id}/end`` — the program finished; the
    controller frees its entry and any KV retention."""

    session_id: str = Field(pattern=_ID_RE.pattern)
    #: ``ok``, ``error`` or ``cancelled``.
    status: Literal["ok", "error", "cancelled"] = "ok"


class ToolWaitStart(_Event):
    """``POST {EVENTS_PREFIX}/programs/{program_id}/tool-start`` — the program waits on a tool
    (or a human); its KV cache may be worth retaining across the wait (Continuum, arXiv
    2511.02230; docs/protocol.md)."""

    session_id: str = Field(pattern=_ID_RE.pattern)
    thread_id: str = Field(pattern=_ID_RE.pattern)
    node_id: str = Field(pattern=_ID_RE.pattern)
    tool_name: str = Field(min_length=1, max_length=200)
    #: Predicted duration of the wait (seconds), from the tool's history; None if unknown.
    predicted_duration_s: float | None = Field(default=None, ge=0)
    #: ``tool`` or ``human`` (human think time is usually far longer and less predictable).
    kind: Literal["tool", "human"] = "tool"


class ToolWaitEnd(_Event):
    """``POST {EVENTS_PREFIX}/programs/{program_id}/tool-end`` — the wait is over."""

    session_id: str = Field(pattern=_ID_RE.pattern)
    thread_id: str = Field(pattern=_ID_RE.pattern)
    node_id: str = Field(pattern=_ID_RE.pattern)
    tool_name: str = Field(min_length=1, max_length=200)
    #: Measured duration of the wait (seconds).
    duration_s: float = Field(ge=0)
    ok: bool = True
