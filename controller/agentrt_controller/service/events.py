"""Program-event endpoints (docs/protocol.md) and introspection, under ``EVENTS_PREFIX``.

``POST /sessions``, ``DELETE /sessions/{id}``, ``POST /programs/{pid}/start|end|tool-start|
tool-end`` feed the process table through the dispatcher; ``GET /programs`` and
``GET /queues`` show the process table and the queues as JSON.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections import OrderedDict
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentrt.protocol import (
    EVENTS_PREFIX,
    ProgramEnd,
    ProgramStart,
    SessionStart,
    SessionStarted,
    ToolWaitEnd,
    ToolWaitStart,
)
from agentrt_controller.service.core import ControllerCore
from agentrt_controller.service.endpoints import guarded, read_small_body
from agentrt_controller.service.errors import BadRequest

__all__ = ["event_routes"]

_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")  # same rule as agentrt.protocol ids
_MAX_EVENT_BYTES = 64 * 1024
_MAX_SESSIONS = 100_000
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


def event_routes(core: ControllerCore) -> list[Route]:
    """The Starlette routes of the event and introspection API for ``core``."""
    # Sessions are informational (programs carry their session id); keep the newest only.
    sessions: OrderedDict[str, dict[str, Any]] = OrderedDict()
    dispatcher = core.dispatcher

    async def start_session(request: Request) -> Response:
        event = await _event(request, SessionStart)
        session_id = event.session_id or uuid.uuid4().hex
        sessions[session_id] = {"client": event.client, "started_s": core.clock()}
        sessions.move_to_end(session_id)
        while len(sessions) > _MAX_SESSIONS:
            sessions.popitem(last=False)
        answer = SessionStarted(
            session_id=session_id, idle_timeout_s=core.config.program_idle_timeout_s
        )
        return Response(answer.model_dump_json(), 200, media_type="application/json")

    async def end_session(request: Request) -> Response:
        session_id = _path_id(request, "session_id")
        sessions.pop(session_id, None)
        ended = [pid for sid, pid in list(dispatcher.table.keys()) if sid == session_id]
        for program_id in ended:
            core.end_program(session_id, program_id)
        return JSONResponse({"session_id": session_id, "programs_ended": len(ended)})

    async def program_event(request: Request) -> Response:
        program_id = _path_id(request, "program_id")
        kind = request.path_params["event"]
        now = core.clock()
        if kind == "start":
            start = await _event(request, ProgramStart)
            deadline = math.inf if start.timeout_ms is None else now + start.timeout_ms / 1000
            dispatcher.on_program_start(
                program_id, now, session_id=start.session_id, name=start.name, deadline_s=deadline
            )
            if core.retention is not None:
                core.retention.on_program_start(program_id, start.session_id)
        elif kind == "end":
            end = await _event(request, ProgramEnd)
            core.end_program(end.session_id, program_id)
        elif kind == "tool-start":
            wait = await _event(request, ToolWaitStart)
            dispatcher.on_tool_wait_start(
                program_id,
                now,
                thread_id=wait.thread_id,
                node_id=wait.node_id,
                tool_name=wait.tool_name,
                predicted_duration_s=wait.predicted_duration_s,
                kind=wait.kind,
                session_id=wait.session_id,
            )
            if core.retention is not None:
                entry = dispatcher.table.get((wait.session_id, program_id))
                core.retention.on_tool_start(
                    program_id,
                    session_id=wait.session_id,
                    thread_id=wait.thread_id,
                    node_id=wait.node_id,
                    tool_name=wait.tool_name,
                    predicted_duration_s=wait.predicted_duration_s,
                    kind=wait.kind,
                    program_kind=entry.name if entry is not None else "",
                )
        elif kind == "tool-end":
            done = await _event(request, ToolWaitEnd)
            ended = dispatcher.on_tool_wait_end(
                program_id,
                now,
                thread_id=done.thread_id,
                node_id=done.node_id,
                session_id=done.session_id,
            )
            if core.retention is not None and ended is not None:
                core.retention.on_tool_end(
                    program_id,
                    session_id=done.session_id,
                    thread_id=done.thread_id,
                    node_id=done.node_id,
                    duration_s=done.duration_s,  # measured by the client
                )
        else:
            return Response(status_code=404)
        core.wake()
        return JSONResponse({"ok": True, "program_id": program_id, "event": kind})

    async def programs(request: Request) -> Response:
        try:
            limit = int(request.query_params.get("limit", "1000"))
        except ValueError:
            raise BadRequest("limit must be an integer") from None
        snapshot = dispatcher.table.snapshot(core.clock(), limit=max(0, limit))
        snapshot["sessions"] = len(sessions)
        return Response(json.dumps(snapshot, default=str), media_type="application/json")

    async def queues(request: Request) -> Response:
        now = core.clock()
        snapshot = dispatcher.scheduler.snapshot(now)
        snapshot["admission"] = getattr(dispatcher.admission, "name", "")
        snapshot["router"] = getattr(dispatcher.router, "name", "")
        lane = dispatcher.lane
        snapshot["retained_lane"] = {
            "enabled": lane is not None,
            "queued": lane.queued() if lane is not None else 0,
            "total": dispatcher.lane_total,
        }
        if core.retention is not None:
            snapshot["retention"] = core.retention.snapshot()
        snapshot["backends"] = [
            {
                "backend_id": backend_id,
                "kind": state.backend.kind,
                "url": state.backend.url,
                "healthy": state.healthy,
                "in_flight": state.in_flight,
                "admitted_total": state.admitted_total,
                "supports_priority": state.backend.capabilities.supports_priority,
                "num_running": state.load.num_running,
                "num_waiting": state.load.num_waiting,
                "kv_cache_usage": state.load.kv_cache_usage,
            }
            for backend_id, state in core.pool.states.items()
        ]
        return Response(json.dumps(snapshot, default=str), media_type="application/json")

    p = EVENTS_PREFIX
    return [
        Route(p + "/sessions", guarded(start_session), methods=["POST"]),
        Route(p + "/sessions/{session_id}", guarded(end_session), methods=["DELETE"]),
        Route(p + "/programs/{program_id}/{event}", guarded(program_event), methods=["POST"]),
        Route(p + "/programs", guarded(programs), methods=["GET"]),
        Route(p + "/queues", guarded(queues), methods=["GET"]),
    ]
