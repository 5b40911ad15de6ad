"""Program identity from other clients' conventions (docs/protocol.md, "Program identity from
other clients").

Our own ``X-Agentrt-*`` headers (:class:`agentrt.protocol.CallTags`) come first; a request
without them may still name its program the way another client or router does, and is then
scheduled as one program of the process table like an SDK program (tagged: it lives until its
idle timeout, its calls share one attained service). In order of precedence:

1. ``vllm_xargs.agentic_context`` in the body — the program contract of vLLM's router (an
   object, or a JSON string holding one): ``program_id``, else ``{task_id}:{agent_id}``
   (``agent_id`` defaulting to ``lead`` when a ``task_id`` or ``session_id`` is given); the
   session is ``session_id``, else ``task_id``. The router's other fields (priority, deadline,
   retention TTL, parents) are not read. The object never goes upstream: vLLM validates
   ``vllm_xargs`` values as scalars or lists and refuses an object.
2. Claude Code: ``x-claude-code-session-id`` (program ``{session}:{x-claude-code-agent-id or
   lead}``).
3. Codex: ``session_id`` (the header Codex sends; ``session-id`` too), program
   ``{session}:{thread-id or lead}``.
4. ``x-session-id`` (generic; program ``{session}:lead``).

Request and trace ids (``x-request-id``, ``x-client-request-id``, ``traceparent``) are one per
request and never name a program. Ids that do not fit our id rules (1-128 characters of
``[A-Za-z0-9._:@/+=-]``) are replaced by a digest (``h-`` + 24 hex digits), so any client's
session id is accepted and two different ids never share a program.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from agentrt_controller.service.errors import BadRequest

__all__ = [
    "FOREIGN_SESSION_HEADERS",
    "ForeignIdentity",
    "foreign_identity",
    "strip_agentic_context",
]

_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
#: Longest ``agentic_context`` string accepted (bytes), as vLLM's router bounds it.
_MAX_CONTEXT_BYTES = 16 * 1024
#: ``(session header, agent header or None)`` in precedence order.
FOREIGN_SESSION_HEADERS: tuple[tuple[str, str | None], ...] = (
    ("x-claude-code-session-id", "x-claude-code-agent-id"),
    ("session_id", "thread-id"),
    ("session-id", "thread-id"),
    ("x-session-id", None),
)
_LEAD = "lead"


@dataclass(frozen=True, slots=True)
class ForeignIdentity:
    """A program named by another convention, mapped onto our ids."""

    #: Where it came from: ``agentic_context`` or the header's name.
    source: str
    session_id: str
    program_id: str


def _safe_id(value: str) -> str:
    if _ID.fullmatch(value):
        return value
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
    return f"h-{digest}"


def _text(context: Mapping[str, object], key: str) -> str | None:
    """A string-like identifier of ``context``; :class:`BadRequest` for any other value."""
    value = context.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise BadRequest(f"vllm_xargs.agentic_context.{key} must be a string", param="vllm_xargs")
    text = str(value).strip()
    if not text:
        raise BadRequest(f"vllm_xargs.agentic_context.{key} must not be empty", param="vllm_xargs")
    return text


def _agentic_context(body: Mapping[str, object]) -> Mapping[str, object] | None:
    xargs = body.get("vllm_xargs")
    if xargs is None or not isinstance(xargs, Mapping):  # None first: no ABC check per call
        return None
    context = xargs.get("agentic_context")
    if context is None:
        return None
    if isinstance(context, str):
        if len(context) > _MAX_CONTEXT_BYTES:
            raise BadRequest("vllm_xargs.agentic_context is too long", param="vllm_xargs")
        try:
            context = json.loads(context)
        except ValueError:
            raise BadRequest(
                "vllm_xargs.agentic_context must be a JSON object", param="vllm_xargs"
            ) from None
    if not isinstance(context, Mapping):
        raise BadRequest("vllm_xargs.agentic_context must be an object", param="vllm_xargs")
    return context


def foreign_identity(
    body: Mapping[str, object], headers: Mapping[str, str]
) -> ForeignIdentity | None:
    """The program ``body`` and ``headers`` (lower-case names) name by another convention, or
    ``None``. Raises :class:`BadRequest` for a malformed ``agentic_context``."""
    context = _agentic_context(body)
    if context is not None:
        program = _text(context, "program_id")
        task = _text(context, "task_id")
        session = _text(context, "session_id")
        group = task or session
        if program is None and group is not None:
            program = f"{group}:{_text(context, 'agent_id') or _LEAD}"
        if program is not None:
            return ForeignIdentity(
                "agentic_context", _safe_id(session or task or program), _safe_id(program)
            )
    for session_header, agent_header in FOREIGN_SESSION_HEADERS:
        session = headers.get(session_header, "").strip()
        if not session:
            continue
        agent = headers.get(agent_header, "").strip() if agent_header else ""
        return ForeignIdentity(
            session_header, _safe_id(session), _safe_id(f"{session}:{agent or _LEAD}")
        )
    return None


def strip_agentic_context(body: dict[str, object]) -> bool:
    """Take ``vllm_xargs.agentic_context`` out of ``body`` (and ``vllm_xargs`` when nothing
    else is left in it); whether ``body`` changed."""
    xargs = body.get("vllm_xargs")
    if not isinstance(xargs, dict) or "agentic_context" not in xargs:
        return False
    rest = {k: v for k, v in xargs.items() if k != "agentic_context"}
    if rest:
        body["vllm_xargs"] = rest
    else:
        del body["vllm_xargs"]
    return True
