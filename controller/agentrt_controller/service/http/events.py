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
from agentrt_controller.service.errors import BadRequest, Unauthorized, error_body
from agentrt_controller.service.http.access_log import access_facts
from agentrt_controller.service.http.endpoints import guarded, read_small_body

__all__ = ["event_routes"]

_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")  # same rule as agentrt.protocol ids
_MAX_EVENT_BYTES = 64 * 1024
#: Most programs one ``GET /programs`` page holds (a larger ``limit`` is clamped to it).
MAX_PAGE = 1000
_E = TypeVar("_E", bound=BaseModel)


async def _event(request: Request, model: type[_E]) -> _E:
    body = await read_small_body(request, _MAX_EVENT_BYTES, "event body")
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as exc:
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise BadRequest(f"invalid {model.__name__}: {detail[:500]}") from exc


def _path_id(request: Request, name: str) -> str:
    value = request.path_params[name]
    if not isinstance(value, str) or not _ID.match(value):
        raise BadRequest(f"{name} must be 1-128 characters of [A-Za-z0-9._:@/+=-]")
    return value


def _state(request: Request) -> dict[str, object]:
    state = request.scope.get("state")
    return state if isinstance(state, dict) else {}


def _tenant(request: Request) -> Tenant:
    """The authenticated tenant (the app checked the key); the admin has none here."""
    tenant = _state(request).get(TENANT_STATE)
    if not isinstance(tenant, Tenant):
        raise Unauthorized("this endpoint needs a tenant's API key, not the admin token")
    return tenant


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
        answer = core.start_session(_tenant(request), await _event(request, SessionStart))
        return Response(answer.model_dump_json(), 200, media_type="application/json")

    async def end_session(request: Request) -> Response:
        session_id = _path_id(request, "session_id")
        ended = core.end_session(_tenant(request), session_id)
        return JSONResponse({"session_id": session_id, "programs_ended": ended})

    async def program_event(request: Request) -> Response:
        program_id = _path_id(request, "program_id")
        kind = request.path_params["event"]
        tenant = _tenant(request)
        access = access_facts(request.scope)
        if access is not None:
            access.program = program_id
        event: BaseModel
        if kind == "start":
            start = await _event(request, ProgramStart)
            core.start_program(tenant, program_id, start)
            event = start
        elif kind == "end":
            end = await _event(request, ProgramEnd)
            core.end_program(tenant, program_id, end)
            event = end
        elif kind == "tool-start":
            tool_start = await _event(request, ToolWaitStart)
            core.start_tool_wait(tenant, program_id, tool_start)
            event = tool_start
        elif kind == "tool-end":
            tool_end = await _event(request, ToolWaitEnd)
            core.end_tool_wait(tenant, program_id, tool_end)
            event = tool_end
        else:
            body = error_body(
                f"no program event {kind!r}: start, end, tool-start or tool-end",
                "invalid_request_error",
                "event",
                "not_found",
            )
            return Response(body, 404, media_type="application/json")
        if access is not None:
            session = getattr(event, "session_id", None)
            access.session = session if isinstance(session, str) else None
        return JSONResponse({"ok": True, "program_id": program_id, "event": kind})

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
        Route(p + "/programs/{program_id:path}/{event}", guarded(program_event), methods=["POST"]),
        Route(p + "/programs", guarded(programs), methods=["GET"]),
        Route(p + "/queues", guarded(queues), methods=["GET"]),
    ]
