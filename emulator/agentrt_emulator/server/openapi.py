"""The engine emulator's OpenAPI document (``GET /openapi.json``): vLLM's OpenAI paths as the
emulator accepts them (bodies from :mod:`~agentrt_emulator.server.wire`'s models), its probes
and metrics, and its extras — the retention pins and the engine state (docs/engine-emulator.md).
Built with :func:`agentrt_serving.openapi.openapi_document`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from agentrt import __version__
from agentrt_emulator.server.pins import PIN_PREFIX
from agentrt_emulator.server.wire import ChatRequest, CompletionRequest, PinRequest, TokenizeRequest
from agentrt_serving.openapi import JSON_OBJECT, Answer, JsonSchema, Operation, openapi_document

__all__ = ["OPENAPI_PATH", "emulator_openapi"]

OPENAPI_PATH = "/openapi.json"

_MODELS: tuple[type[BaseModel], ...] = (ChatRequest, CompletionRequest, TokenizeRequest, PinRequest)
#: A pin id in a path: any id the body allows but "/" (sent percent-encoded) and dots only
#: (which clients resolve as path segments).
_PIN_ID: JsonSchema = {"type": "string", "pattern": "^[A-Za-z0-9_:@+=-][A-Za-z0-9._:@+=-]{0,127}$"}


def _ref(model: type[BaseModel]) -> JsonSchema:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _model_schemas() -> dict[str, JsonSchema]:
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "validation") for m in _MODELS]
    _, top = models_json_schema(models, ref_template="#/components/schemas/{model}")
    defs: dict[str, JsonSchema] = top.get("$defs", {})
    return defs


def _operations() -> list[Operation]:
    ok = Answer("the answer", JSON_OBJECT)
    generation = Answer("the answer (a stream with `stream: true`)", JSON_OBJECT, streams=True)
    empty = {200: Answer("serving")}
    return [
        Operation("post", "/v1/chat/completions", "OpenAI chat completion", {200: generation},
                  body=_ref(ChatRequest), tag="openai"),
        Operation("post", "/v1/completions", "OpenAI completion", {200: generation},
                  body=_ref(CompletionRequest), tag="openai"),
        Operation("post", "/v1/responses", "OpenAI Responses API", {200: generation},
                  body=JSON_OBJECT, tag="openai"),
        Operation("post", "/v1/embeddings", "embeddings", {200: ok}, body=JSON_OBJECT,
                  tag="openai"),
        Operation("post", "/tokenize", "vLLM's tokenizer", {200: ok}, body=_ref(TokenizeRequest),
                  tag="openai"),
        Operation("post", "/detokenize", "vLLM's detokenizer", {200: ok}, body=JSON_OBJECT,
                  tag="openai"),
        Operation("get", "/v1/models", "the served model", {200: ok}, tag="openai",
                 ),
        Operation("get", "/health", "vLLM's health probe (empty 200)", empty, tag="probes"),
        Operation("get", "/livez", "liveness (as /health)", empty, tag="probes"),
        Operation("get", "/readyz", "readiness (as /health)", empty, tag="probes"),
        Operation("get", "/version", "version", {200: ok}, tag="probes"),
        Operation("get", "/metrics", "Prometheus text (vllm:* and agentrt_engine_*)",
                  {200: Answer("the metrics", {"type": "string"}, media_type="text/plain")},
                  tag="probes"),
        Operation("get", "/agentrt/engine/v1/state", "the engine's state", {200: ok},
                  tag="extras"),
        Operation("post", PIN_PREFIX, "pin a prefix's KV blocks", {200: ok},
                  body=_ref(PinRequest), tag="extras"),
        Operation("get", PIN_PREFIX, "live pins", {200: ok}, tag="extras"),
        Operation("delete", PIN_PREFIX + "/{pin_id}", "release a pin", {200: ok},
                  path_params={"pin_id": _PIN_ID}, tag="extras"),
        Operation("get", OPENAPI_PATH, "this document", {200: ok}, tag="probes"),
    ]  # fmt: skip


def emulator_openapi() -> dict[str, Any]:
    """The emulator's OpenAPI 3.1 document."""
    return openapi_document(
        title="agentrt engine emulator",
        version=__version__,
        description="The engine emulator's endpoints (docs/engine-emulator.md).",
        operations=_operations(),
        schemas=_model_schemas(),
    )
