"""OpenAPI 3.1 documents for the servers' own endpoints (``GET /openapi.json`` of the controller
and of the engine emulator; docs/security.md, "The API surface, described").

Each server lists its endpoints as :class:`Operation` values — request bodies as JSON Schema,
from the servers' pydantic models where they exist (``agentrt.protocol``'s events, the
emulator's wire models) — and :func:`openapi_document` turns them into one document;
:class:`OpenApiEndpoint` serves it (a class, so that routers take it for an ASGI app). Nothing
here knows a framework: the document is a plain dict. The error envelope both servers answer
with is :data:`ERROR_SCHEMA`; every operation documents it as its ``default`` response, so a
client (or schemathesis, ``tests/security/test_schemathesis.py``) can check every status
against it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrt_serving.asgi import Receive, Scope, Send

__all__ = [
    "ERROR_SCHEMA",
    "JSON_OBJECT",
    "Answer",
    "JsonSchema",
    "OpenApiEndpoint",
    "Operation",
    "openapi_document",
]

#: A JSON Schema (draft 2020-12, as OpenAPI 3.1 uses it).
JsonSchema = Mapping[str, Any]

#: ``{"error": {"message", "type", "param", "code"}}``: OpenAI's envelope, which vLLM, the
#: emulator and the controller answer every error with (``code`` a string, a status number
#: or null).
ERROR_SCHEMA: JsonSchema = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "integer", "null"]},
            },
        }
    },
}

#: Any JSON object (an answer whose fields are described in prose, docs/*.md).
JSON_OBJECT: JsonSchema = {"type": "object"}

_PATH_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class Answer:
    """One documented response of an operation."""

    description: str
    #: Schema of the body; ``None`` = no body is described (e.g. an empty 200).
    schema: JsonSchema | None = None
    #: Media type of the body (``application/json``, ``text/plain``, ...).
    media_type: str = "application/json"
    #: The answer may also be a server-sent event stream (``"stream": true`` in the request).
    streams: bool = False


@dataclass(frozen=True, slots=True)
class Operation:
    """One endpoint (path + method) of a server."""

    method: Literal["get", "post", "delete"]
    #: OpenAPI path template, e.g. ``/agentrt/v1/programs/{program_id}/tool-start``.
    path: str
    summary: str
    #: Responses by HTTP status (the error envelope is added as ``default``).
    answers: Mapping[int, Answer]
    #: JSON Schema of the request body (``application/json``); ``None`` = no body.
    body: JsonSchema | None = None
    #: Schemas of the path template's parameters (a parameter not named: a plain string).
    path_params: Mapping[str, JsonSchema] = field(default_factory=dict)
    #: Optional query parameters and their schemas.
    query: Mapping[str, JsonSchema] = field(default_factory=dict)
    #: Grouping in the document (``events``, ``admin``, ``probes``, ``openai``, ...).
    tag: str = ""
    #: Needs ``Authorization: Bearer <key>`` when the server is configured with keys.
    secured: bool = False


def openapi_document(
    *,
    title: str,
    version: str,
    description: str,
    operations: Sequence[Operation],
    schemas: Mapping[str, JsonSchema] | None = None,
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``operations``; ``schemas`` become
    ``components/schemas`` (refer to them as ``#/components/schemas/<name>``). Raises
    :class:`ValueError` for an operation listed twice."""
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        item = paths.setdefault(op.path, {})
        if op.method in item:
            raise ValueError(f"{op.method.upper()} {op.path} is listed twice")
        item[op.method] = _operation(op)
    components: dict[str, Any] = {
        "schemas": {"Error": dict(ERROR_SCHEMA), **(schemas or {})},
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description},
        "paths": paths,
        "components": components,
    }


def _operation(op: Operation) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True,
         "schema": dict(op.path_params.get(name, {"type": "string", "minLength": 1}))}
        for name in _PATH_PARAM.findall(op.path)
    ]  # fmt: skip
    parameters += [
        {"name": name, "in": "query", "required": False, "schema": dict(schema)}
        for name, schema in op.query.items()
    ]
    responses: dict[str, Any] = {str(status): _answer(a) for status, a in op.answers.items()}
    responses["default"] = _answer(
        Answer("an error, in the OpenAI envelope", {"$ref": "#/components/schemas/Error"})
    )
    out: dict[str, Any] = {
        "summary": op.summary,
        "operationId": f"{op.method}_{re.sub(r'[^A-Za-z0-9]+', '_', op.path).strip('_')}",
        "responses": responses,
    }
    if op.tag:
        out["tags"] = [op.tag]
    if parameters:
        out["parameters"] = parameters
    if op.body is not None:
        out["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": dict(op.body)}},
        }
    if op.secured:
        out["security"] = [{"bearer": []}, {}]  # {}: servers without keys accept any call
    return out


#: One server-sent event as a client's parser reads it: its data (a JSON chunk, or ``[DONE]``),
#: its event type, id and retry.
_SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {"type": "string"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer", "minimum": 0},
    },
}


def _answer(answer: Answer) -> dict[str, Any]:
    out: dict[str, Any] = {"description": answer.description}
    if answer.schema is not None:
        content = {answer.media_type: {"schema": dict(answer.schema)}}
        if answer.streams:
            # Before OpenAPI 3.2's itemSchema, an event stream's schema describes each event
            # (its fields as a client's SSE parser reads them), not the body as one string.
            content["text/event-stream"] = {"schema": _SSE_EVENT}
        out["content"] = content
    return out


class OpenApiEndpoint:
    """An ASGI app answering any request with ``document`` as JSON (encoded once)."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.body = json.dumps(document, separators=(",", ":")).encode()
        self._headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.body)).encode()),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self._headers})
        await send({"type": "http.response.body", "body": self.body})
