"""Program-event endpoints (docs/protocol.md) and introspection, under ``EVENTS_PREFIX``.

``POST /sessions``, ``DELETE /sessions/{id}``, ``POST /programs/{pid}/start|end|tool-start|
tool-end`` become one :class:`~agentrt_controller.service.core.facade.ControllerCore` method each
(which feeds the process table and retention); ``GET /programs`` and ``GET /queues`` show the
process table and the queues as JSON. Each handler parses, calls the core, answers.

``GET /programs?limit=N&cursor=C`` pages through the caller's programs in creation order: at
most :data:`MAX_PAGE` per page, ``next_cursor`` in the answer is the next page's ``cursor``
(``null`` on the last page). The admin token lists every tenant's programs; a tenant sees its
own. ``GET /queues`` shows a tenant the policy and queue lengths only (calls and backends are
the admin's, or everyone's in open mode).
"""

from __future__ import annotations

import json
import re
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentrt.protocol import (
    EVENTS_PREFIX,
    ProgramEnd,
    ProgramStart,
    SessionStart,
    ToolWaitEnd,
    ToolWaitStart,
)
from agentrt_controller.service.core.facade import ControllerCore
from agentrt_controller.service.core.tenants import ADMIN_STATE, TENANT_STATE, Tenant
from agentrt_controller.service.errors import (
    BadRequest,
    BodyTooLarge,
    ServiceError,
    Unauthorized,
    error_body,
)
from agentrt_controller.service.http.access_log import AccessFacts, access_facts
from agentrt_controller.service.http.endpoints import guarded
from agentrt_controller.service.http.proxy import answer_error
from agentrt_serving.direct import DirectExchange

__all__ = [
    "CLIENT_GONE",
    "PROGRAMS_PREFIX",
    "PROGRAM_EVENT_PATH",
    "ProgramEvents",
    "event_routes",
    "program_event",
]

_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")  # same rule as agentrt.protocol ids
_MAX_EVENT_BYTES = 64 * 1024
#: The status logged for a request whose client left before sending its body (nginx's; the
#: app's answer on the ASGI path, service/http/app.py).
CLIENT_GONE = 499
#: The program events' route (``:path``: ids may hold "/", agentrt.protocol; the SDK
#: percent-encodes them anyway) and the raw path prefix of its requests.
PROGRAM_EVENT_PATH = EVENTS_PREFIX + "/programs/{program_id:path}/{event}"
PROGRAMS_PREFIX = EVENTS_PREFIX + "/programs/"
#: Most programs one ``GET /programs`` page holds (a larger ``limit`` is clamped to it).
MAX_PAGE = 1000
_E = TypeVar("_E", bound=BaseModel)


def _event(body: bytes, model: type[_E]) -> _E:
    if len(body) > _MAX_EVENT_BYTES:
        raise BodyTooLarge(f"event body over {_MAX_EVENT_BYTES} bytes")
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as exc:
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise BadRequest(f"invalid {model.__name__}: {detail[:500]}") from exc


def _checked_id(value: object, name: str) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise BadRequest(f"{name} must be 1-128 characters of [A-Za-z0-9._:@/+=-]")
    return value


def _path_id(request: Request, name: str) -> str:
    return _checked_id(request.path_params[name], name)


def _state(request: Request) -> dict[str, object]:
    state = request.scope.get("state")
    return state if isinstance(state, dict) else {}


def _caller(request: Request) -> Tenant | None:
    """The tenant the app authenticated (None: the admin token)."""
    tenant = _state(request).get(TENANT_STATE)
    return tenant if isinstance(tenant, Tenant) else None


def _tenant_of(caller: Tenant | None) -> Tenant:
    """The authenticated tenant (the app checked the key); the admin has none here."""
    if caller is None:
        raise Unauthorized("this endpoint needs a tenant's API key, not the admin token")
    return caller


def _tenant(request: Request) -> Tenant:
    return _tenant_of(_caller(request))


def program_event(
    core: ControllerCore,
    caller: Tenant | None,
    program_id: str,
    kind: str,
    body: bytes,
    access: AccessFacts | None,
) -> tuple[int, bytes]:
    """``POST /programs/{program_id}/{kind}`` with ``body`` from ``caller`` (None: the admin
    token), on either HTTP path (the ASGI route, the fast path's :class:`ProgramEvents`): the
    answer's status and JSON body (200, or 404 for an unknown ``kind``); raises
    :class:`ServiceError` (400 for a bad id or body, 401 for the admin token, 413 for a body
    over 64 KiB, the core's). Fills ``access`` (None: no access log)."""
    program_id = _checked_id(program_id, "program_id")
    tenant = _tenant_of(caller)
    if access is not None:
        access.program = program_id
    event: BaseModel
    if kind == "start":
        start = _event(body, ProgramStart)
        core.start_program(tenant, program_id, start)
        event = start
    elif kind == "end":
        end = _event(body, ProgramEnd)
        core.end_program(tenant, program_id, end)
        event = end
    elif kind == "tool-start":
        tool_start = _event(body, ToolWaitStart)
        core.start_tool_wait(tenant, program_id, tool_start)
        event = tool_start
    elif kind == "tool-end":
        tool_end = _event(body, ToolWaitEnd)
        core.end_tool_wait(tenant, program_id, tool_end)
        event = tool_end
    else:
        answer = error_body(
            f"no program event {kind!r}: start, end, tool-start or tool-end",
            "invalid_request_error",
            "event",
            "not_found",
        )
        return 404, answer
    if access is not None:
        session = getattr(event, "session_id", None)
        access.session = session if isinstance(session, str) else None
    # Compact JSON, the bytes this answer has always had on the ASGI route.
    ok = {"ok": True, "program_id": program_id, "event": kind}
    return 200, json.dumps(ok, ensure_ascii=False, separators=(",", ":")).encode()


class ProgramEvents:
    """The program events on the fast path (service/http/direct.py): the endpoint of the
    direct route under :data:`PROGRAMS_PREFIX`, answering with :func:`program_event`."""

    #: The status logged when the client leaves before its whole body (the app's on the
    #: ASGI route).
    gone_status = CLIENT_GONE

    def __init__(self, core: ControllerCore) -> None:
        self.core = core

    @staticmethod
    def route(rest: bytes) -> bool:
        """Whether the rest of a raw path under :data:`PROGRAMS_PREFIX` is ``{program_id}/
        {event}`` as the ASGI route matches it (an event without ``/``, not empty); any other
        (Starlette's 404 or redirect) takes the ASGI way."""
        slash = rest.rfind(b"/")
        return 0 <= slash < len(rest) - 1

    async def accept_direct(
        self,
        connection: DirectExchange,
        headers: dict[str, str],
        raw: bytes,
        value: object,
        caller: Tenant | None,
        access: AccessFacts | None,
    ) -> None:
        """Answer the event of ``connection`` (its path :meth:`route` took; ``raw`` its body,
        checked by the guard; ``caller`` authenticated, None: the admin token)."""
        program_id, _, kind = connection.path[len(PROGRAMS_PREFIX) :].rpartition("/")
        try:
            status, body = program_event(self.core, caller, program_id, kind, raw, access)
        except ServiceError as error:
            await answer_error(connection, error)
            return
        await connection.respond(status, [(b"content-type", b"application/json")], body)


def _query_int(request: Request, name: str, default: int) -> int:
    try:
        return int(request.query_params.get(name, str(default)))
    except ValueError:
        raise BadRequest(f"{name} must be an integer", param=name) from None


def event_routes(core: ControllerCore, *, admin_token_set: bool) -> list[Route]:
    """The Starlette routes of the event and introspection API for ``core``. Every handler
    acts for the tenant the app authenticated (``request.state``): ids name programs of that
    tenant only. ``admin_token_set``: an admin token is configured (then only it sees every
    call in ``GET /queues``)."""

    async def start_session(request: Request) -> Response:
        tenant = _tenant(request)
        answer = core.start_session(tenant, _event(await request.body(), SessionStart))
        return Response(answer.model_dump_json(), 200, media_type="application/json")

    async def end_session(request: Request) -> Response:
        session_id = _path_id(request, "session_id")
        ended = core.end_session(_tenant(request), session_id)
        return JSONResponse({"session_id": session_id, "programs_ended": ended})

    async def program_event_route(request: Request) -> Response:
        status, body = program_event(
            core,
            _caller(request),
            request.path_params["program_id"],
            request.path_params["event"],
            await request.body(),
            access_facts(request.scope),
        )
        return Response(body, status, media_type="application/json")

    async def programs(request: Request) -> Response:
        limit = _query_int(request, "limit", MAX_PAGE)
        if limit < 0:
            raise BadRequest("limit must be >= 0", param="limit")
        after = _query_int(request, "cursor", -1)
        admin = _state(request).get(ADMIN_STATE) is True
        tenant = None if admin else _tenant(request)
        if tenant is not None and core.open_tenancy():
            tenant = None  # open mode: one tenant, the whole table is its own
        snapshot = core.programs_snapshot(min(limit, MAX_PAGE), tenant=tenant, after=after)
        return Response(json.dumps(snapshot, default=str), media_type="application/json")

    async def queues(request: Request) -> Response:
        # Backend URLs and every tenant's calls are the admin's; in open mode without an
        # admin token everyone is (as before tenants existed).
        admin = _state(request).get(ADMIN_STATE) is True
        full = admin or (core.open_tenancy() and not admin_token_set)
        snapshot = core.queues_snapshot(full=full)
        return Response(json.dumps(snapshot, default=str), media_type="application/json")

    p = EVENTS_PREFIX
    return [
        Route(p + "/sessions", guarded(start_session), methods=["POST"]),
        # ``:path``: ids may hold "/" (agentrt.protocol); the SDK percent-encodes them anyway.
        Route(p + "/sessions/{session_id:path}", guarded(end_session), methods=["DELETE"]),
        Route(PROGRAM_EVENT_PATH, guarded(program_event_route), methods=["POST"]),
        Route(p + "/programs", guarded(programs), methods=["GET"]),
        Route(p + "/queues", guarded(queues), methods=["GET"]),
    ]
