"""The controller's OpenAPI document (``GET /openapi.json``): its own endpoints — the
program-event API under ``/agentrt/v1/`` (bodies from :mod:`agentrt.protocol`'s models), the
backend admin API, the probes and ``/metrics`` — and the OpenAI paths as the controller reads
them (the rest of a body is the backend's to judge). Built with
:func:`agentrt_serving.openapi.openapi_document`; docs/controller.md lists the same endpoints
in prose.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from agentrt import __version__
from agentrt.protocol import (
    EVENTS_PREFIX,
    ProgramEnd,
    ProgramStart,
    SessionStart,
    SessionStarted,
    ToolWaitEnd,
    ToolWaitStart,
)
from agentrt_controller.service.http.admin import BACKENDS_PATH
from agentrt_controller.service.http.events import MAX_PAGE
from agentrt_serving.openapi import JSON_OBJECT, Answer, JsonSchema, Operation, openapi_document

__all__ = ["OPENAPI_PATH", "controller_openapi"]

OPENAPI_PATH = "/openapi.json"

#: A program, session or thread id in a path. agentrt.protocol's ids may also hold "/" (sent
#: percent-encoded); the document leaves those out, and ids made of dots only, which clients
#: would resolve as path segments.
_PATH_ID: JsonSchema = {"type": "string", "pattern": "^[A-Za-z0-9_:@+=-][A-Za-z0-9._:@+=-]{0,127}$"}

#: What the controller itself reads of an OpenAI generation body (incoming.py); the backend
#: validates everything else.
_GENERATION_BODY: JsonSchema = {
    "type": "object",
    "required": ["model"],
    "properties": {
        "model": {"type": "string"},
        "stream": {"type": "boolean"},
        "max_tokens": {"type": ["integer", "null"], "minimum": 1},
        "max_completion_tokens": {"type": ["integer", "null"], "minimum": 1},
        # Sequences of the call (docs/controller.md, "Sequences, not calls"): above the
        # controller's cap (max_sequences_per_call, else the backends' batch) they get 400.
        "n": {"type": ["integer", "null"], "minimum": 1},
        "best_of": {"type": ["integer", "null"], "minimum": 1},
        "stream_options": {
            "type": "object",
            "properties": {"include_usage": {"type": "boolean"}},
        },
        "cache_salt": {"type": "string"},
    },
}
_RESPONSES_BODY: JsonSchema = {
    "type": "object",
    "required": ["model"],
    "properties": {
        "model": {"type": "string"},
        "stream": {"type": "boolean"},
        "max_output_tokens": {"type": ["integer", "null"], "minimum": 1},
    },
}

_STATUS: JsonSchema = {
    "type": "object",
    "required": ["status"],
    "properties": {
        "status": {"enum": ["ok", "degraded", "draining"]},
        # /readyz, for the admin token or a loopback caller only:
        "version": {"type": "string"},
        "backends": {"type": "object"},
    },
}

#: In a program's order (clients and fuzzers that follow the document meet a live program).
_EVENT_MODELS: dict[str, type[BaseModel]] = {
    "start": ProgramStart,
    "tool-start": ToolWaitStart,
    "tool-end": ToolWaitEnd,
    "end": ProgramEnd,
}


def _ref(model: type[BaseModel]) -> JsonSchema:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _model_schemas() -> dict[str, JsonSchema]:
    """``agentrt.protocol``'s event models as components (requests as validated, the session
    answer as serialized)."""
    requests: list[type[BaseModel]] = [SessionStart, *_EVENT_MODELS.values()]
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "validation") for m in requests]
    models.append((SessionStarted, "serialization"))
    _, top = models_json_schema(models, ref_template="#/components/schemas/{model}")
    defs: dict[str, JsonSchema] = top.get("$defs", {})
    return defs


def _operations() -> list[Operation]:
    ok = Answer("the answer", JSON_OBJECT)
    generation = Answer("the backend's answer (a stream with `stream: true`)", JSON_OBJECT,
                        streams=True)  # fmt: skip
    ready = {200: Answer("ready", _STATUS), 503: Answer("not ready", _STATUS)}
    ops = [
        *(
            Operation("post", path, f"OpenAI {path}: scheduled", {200: generation},
                      body=_GENERATION_BODY, tag="openai", secured=True)
            for path in ("/v1/chat/completions", "/v1/completions")
        ),
        Operation("post", "/v1/responses", "OpenAI Responses API: scheduled", {200: generation},
                  body=_RESPONSES_BODY, tag="openai", secured=True),
        *(
            Operation("post", path, f"{path}: routed to a backend, not scheduled", {200: ok},
                      body=JSON_OBJECT, tag="openai", secured=True)
            for path in ("/v1/embeddings", "/tokenize", "/detokenize")
        ),
        Operation("get", "/v1/models", "the backends' models", {200: ok}, tag="openai",
                  secured=True),
        Operation("post", EVENTS_PREFIX + "/sessions", "open a client session",
                  {200: Answer("the session", _ref(SessionStarted))}, body=_ref(SessionStart),
                  tag="events", secured=True),
        Operation("delete", EVENTS_PREFIX + "/sessions/{session_id}",
                  "end a session and its programs", {200: ok},
                  path_params={"session_id": _PATH_ID}, tag="events", secured=True),
        *(
            Operation("post", EVENTS_PREFIX + f"/programs/{{program_id}}/{event}",
                      f"program event {model.__name__}", {200: ok}, body=_ref(model),
                      path_params={"program_id": _PATH_ID}, tag="events", secured=True)
            for event, model in _EVENT_MODELS.items()
        ),
        Operation("get", EVENTS_PREFIX + "/programs", "the caller's live programs, paged",
                  {200: ok}, query={"limit": {"type": "integer", "minimum": 0,
                                              "maximum": MAX_PAGE},
                                    "cursor": {"type": "integer", "minimum": -1}},
                  tag="events", secured=True),
        Operation("get", EVENTS_PREFIX + "/queues", "the scheduler's queues", {200: ok},
                  tag="events", secured=True),
        Operation("get", BACKENDS_PATH, "list backends (admin)", {200: ok}, tag="admin",
                  secured=True),
        Operation("post", BACKENDS_PATH, "add a backend (admin)",
                  {201: Answer("the new backend", JSON_OBJECT)}, body=JSON_OBJECT, tag="admin",
                  secured=True),
        Operation("delete", BACKENDS_PATH + "/{backend_id}", "remove a backend (admin)",
                  {200: ok, 202: Answer("draining", JSON_OBJECT)},
                  path_params={"backend_id": _PATH_ID}, tag="admin", secured=True),
        Operation("get", "/health", "readiness, the status only", ready, tag="probes"),
        Operation("get", "/readyz", "readiness; backends for the admin or loopback", ready,
                  tag="probes"),
        Operation("get", "/livez", "liveness", {200: Answer("serving", _STATUS)}, tag="probes"),
        Operation("get", "/metrics", "Prometheus text (loopback, admin, or metrics_public)",
                  {200: Answer("the metrics", {"type": "string"}, media_type="text/plain")},
                  tag="probes"),
        Operation("get", OPENAPI_PATH, "this document", {200: ok}, tag="probes"),
    ]  # fmt: skip
    return ops


def controller_openapi() -> dict[str, Any]:
    """The controller's OpenAPI 3.1 document."""
    return openapi_document(
        title="agentrt controller",
        version=__version__,
        description="The agentrt controller's endpoints (docs/controller.md, docs/protocol.md).",
        operations=_operations(),
        schemas=_model_schemas(),
    )
