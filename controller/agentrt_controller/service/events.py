"""Program-event endpoints (docs/protocol.md) and introspection, under ``EVENTS_PREFIX``.

``POST /sessions``, ``DELETE /sessions/{id}``, ``POST /programs/{pid}/start|end|tool-start|
tool-end`` become one :class:`~agentrt_controller.service.engine.ControllerEngine` method each
(which feeds the process table and retention); ``GET /programs`` and ``GET /queues`` show the
process table and the queues as JSON. Each handler parses, calls the engine, answers.
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
from agentrt_controller.service.endpoints import guarded, read_small_body
from agentrt_controller.service.engine import ControllerEngine
from agentrt_controller.service.errors import BadRequest

__all__ = ["event_routes"]

_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")  # same rule as agentrt.protocol ids
_MAX_EVENT_BYTES = 64 * 1024
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


def event_routes(engine: ControllerEngine) -> list[Route]:
    """The Starlette routes of the event and introspection API for ``engine``."""

    async def start_session(request: Request) -> Response:
        answer = engine.start_session(await _event(request, SessionStart))
        return Response(answer.model_dump_json(), 200, media_type="application/json")

    async def end_session(request: Request) -> Response:
        session_id = _path_id(request, "session_id")
        ended = engine.end_session(session_id)
        return JSONResponse({"session_id": session_id, "programs_ended": ended})

    async def program_event(request: Request) -> Response:
        program_id = _path_id(request, "program_id")
        kind = request.path_params["event"]
        if kind == "start":
            engine.start_program(program_id, await _event(request, ProgramStart))
        elif kind == "end":
            engine.end_program(program_id, await _event(request, ProgramEnd))
        elif kind == "tool-start":
            engine.start_tool_wait(program_id, await _event(request, ToolWaitStart))
        elif kind == "tool-end":
            engine.end_tool_wait(program_id, await _event(request, ToolWaitEnd))
        else:
            return Response(status_code=404)
        return JSONResponse({"ok": True, "program_id": program_id, "event": kind})

    async def programs(request: Request) -> Response:
        try:
            limit = int(request.query_params.get("limit", "1000"))
        except ValueError:
            raise BadRequest("limit must be an integer") from None
        snapshot = engine.programs_snapshot(limit)
        return Response(json.dumps(snapshot, default=str), media_type="application/json")

    async def queues(request: Request) -> Response:
        snapshot = engine.queues_snapshot()
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
