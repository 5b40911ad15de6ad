"""The emulator's Starlette app: OpenAI / vLLM endpoints over one :class:`EngineDriver`.

Endpoints (docs/engine-emulator.md): ``/v1/chat/completions``, ``/v1/completions``,
``/v1/responses``, ``/v1/embeddings``, ``/v1/models``, ``/health``, ``/version``, ``/tokenize``,
``/detokenize``, ``/metrics``, the retention pins under
``/agentrt/engine/v1/pins`` and ``/agentrt/engine/v1/state``.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack, asynccontextmanager
from typing import Any, TypeVar

import anyio
import prometheus_client
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentrt import __version__
from agentrt.errors import InvalidRequest
from agentrt_emulator.core.types import EngineRequest
from agentrt_emulator.scripted_model import ScriptedModel
from agentrt_emulator.server.body import read_json
from agentrt_emulator.server.driver import ChoiceEvent, RequestGroup
from agentrt_emulator.server.errors import error_body, error_response, from_validation_error
from agentrt_emulator.server.extras import ExtraEndpoints
from agentrt_emulator.server.metrics import ServerMetrics
from agentrt_emulator.server.openapi import OPENAPI_PATH, emulator_openapi
from agentrt_emulator.server.pins import pin_routes
from agentrt_emulator.server.prepare import (
    PreparedRequest,
    chat_messages,
    prepare_chat,
    prepare_completion,
    prepare_in_thread,
)
from agentrt_emulator.server.responses import Kind, ResponseBuilder, sse
from agentrt_emulator.server.responses_api import ResponsesEndpoint
from agentrt_emulator.server.state import EmulatorState
from agentrt_emulator.server.streaming import EventStreamResponse, watch_disconnect
from agentrt_emulator.server.wire import ChatRequest, CompletionRequest, TokenizeRequest
from agentrt_emulator.tokenizer import Tokenizer
from agentrt_serving.asgi import Scope
from agentrt_serving.hardening import INTERNAL_ERROR_MESSAGE, HardenedApp, HttpLimits
from agentrt_serving.openapi import OpenApiEndpoint

__all__ = ["build_app"]

_log = logging.getLogger(__name__)
# The guard's crash records keep the logger name they had when the guard lived here.
_HARDENING_LOG = logging.getLogger("agentrt_emulator.server.hardening")
_HEADER_REQUEST_ID = "x-request-id"
# Status sent (to nobody) when the client left before a non-streamed answer was ready.
_CLIENT_CLOSED = 499


M = TypeVar("M", bound=BaseModel)


def _validate(model: type[M], body: dict[str, Any]) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


Handler = Callable[[Request], Awaitable[Response]]


def _answers_errors(handler: Handler, metrics: ServerMetrics) -> Handler:
    """``handler`` answering our errors in vLLM's envelope; a refused model is counted
    (``agentrt_engine_unserved_model_requests_total``)."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except InvalidRequest as exc:
            if exc.status_code == 404 and exc.param == "model":
                metrics.unserved_model += 1
            return error_response(exc)

    return wrapped


class _Endpoints:
    def __init__(self, state: EmulatorState) -> None:
        self.state = state

    # -- generation ---------------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        body = await read_json(request, self.state.config.max_body_bytes)
        parsed = _validate(ChatRequest, body)
        prepared = await self._prepare(request, prepare_chat, parsed, body)
        include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
        return await self._generate(request, "chat", prepared, parsed.stream, include_usage)

    async def completions(self, request: Request) -> Response:
        body = await read_json(request, self.state.config.max_body_bytes)
        parsed = _validate(CompletionRequest, body)
        prepared = await self._prepare(request, prepare_completion, parsed, body)
        include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
        return await self._generate(request, "completion", prepared, parsed.stream, include_usage)

    async def _prepare(
        self,
        request: Request,
        prepare: Callable[..., PreparedRequest],
        parsed: ChatRequest | CompletionRequest,
        body: dict[str, Any],
    ) -> PreparedRequest:
        """``prepare(...)``: tokenize the prompt and plan the outputs. A large request
        (:func:`prepare_in_thread`: a 16 MiB prompt, 20,000 ``ignore_eos`` tokens) is prepared
        in a worker thread, with a tokenizer and scripted model of its own (they keep caches,
        not thread-safe; results never depend on those), so that it does not stall the engine
        loop, the other streams and the health probes."""
        s = self.state
        if not prepare_in_thread(parsed, request.headers, s.rules):
            return prepare(parsed, body, request.headers, s.rules, s.tokenizer, s.model)
        tokenizer = Tokenizer(s.tokenizer.vocab_size)
        model = ScriptedModel(tokenizer, s.config.seed)
        return await anyio.to_thread.run_sync(
            lambda: prepare(parsed, body, request.headers, s.rules, tokenizer, model),
            limiter=s.prepare_limiter,
        )

    async def _generate(
        self,
        request: Request,
        kind: Kind,
        prepared: PreparedRequest,
        stream: bool,
        include_usage: bool,
    ) -> Response:
        driver = self.state.driver
        client_id = request.headers.get(_HEADER_REQUEST_ID)
        response_id = ("chatcmpl-" if kind == "chat" else "cmpl-") + (client_id or uuid.uuid4().hex)
        builder = ResponseBuilder(
            kind, response_id, self.state.config.model_name, int(time.time()), prepared
        )
        arrival = driver.now_s()
        engine_requests = [
            EngineRequest(
                request_id=driver.new_request_id(response_id),
                prompt_token_ids=prompt.prompt_token_ids,
                output_token_ids=output.token_ids,
                arrival_s=arrival,
                priority=prepared.priority,
                cache_salt=prepared.cache_salt,
            )
            for prompt in prepared.prompts
            for output in prompt.outputs
        ]
        reasons = [choice.output.finish_reason for choice in builder.choices]
        headers = {"X-Request-Id": client_id} if client_id else {}
        stack = ExitStack()
        group = stack.enter_context(driver.submit(engine_requests, reasons))
        if stream:

            async def produce(emit: Callable[[bytes], Awaitable[None]]) -> None:
                await _stream_events(
                    group, builder, emit, include_usage, self.state.config.stream_interval_wall_s
                )

            return EventStreamResponse(produce, on_close=stack.close, headers=headers)
        finished = False
        error: str | None = None
        with stack:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_disconnect, request.receive, tg.cancel_scope)
                error = await _wait_all(group, builder)
                finished = True
                tg.cancel_scope.cancel()
        if not finished:
            return Response(status_code=_CLIENT_CLOSED)
        if error is not None:
            return error_response(RuntimeError(error), 500)
        return JSONResponse(builder.response(), headers=headers)

    # -- other endpoints ----------------------------------------------------------------------

    async def models(self, request: Request) -> Response:
        config = self.state.config
        card = {
            "id": config.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "agentrt",
            "root": config.model_name,
            "parent": None,
            "max_model_len": config.engine.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": __version__, "engine": "agentrt-emulator"})

    async def tokenize(self, request: Request) -> Response:
        body = await read_json(request, self.state.config.max_body_bytes)
        parsed = _validate(TokenizeRequest, body)
        s = self.state
        if parsed.model is not None and parsed.model != s.config.model_name:
            raise InvalidRequest(
                f"The model `{parsed.model}` does not exist; this server serves "
                f"`{s.config.model_name}`.",
                status_code=404,
                param="model",
            )
        if (parsed.prompt is None) == (parsed.messages is None):
            raise InvalidRequest("give exactly one of prompt or messages", param="prompt")
        if parsed.prompt is not None:
            tokens = s.tokenizer.encode(parsed.prompt, add_bos=parsed.add_special_tokens)
        else:
            tools = [t.model_dump(exclude_none=True) for t in parsed.tools or ()]
            tokens = s.tokenizer.render_chat(
                chat_messages(parsed.messages or []),
                tools,
                add_generation_prompt=parsed.add_generation_prompt,
            )
        return JSONResponse(
            {"tokens": tokens, "count": len(tokens), "max_model_len": s.rules.max_model_len}
        )

    async def metrics(self, request: Request) -> Response:
        text = self.state.driver.metrics.render(self.state.core.stats())
        return Response(text, headers={"content-type": prometheus_client.CONTENT_TYPE_LATEST})

    async def engine_state(self, request: Request) -> Response:
        stats = self.state.core.stats()
        payload = {name: getattr(stats, name) for name in stats.__dataclass_fields__}
        payload["model_time_s"] = self.state.driver.now_s()
        payload["time_scale"] = self.state.config.time_scale
        payload["profile"] = self.state.config.profile
        payload["scheduling_policy"] = self.state.config.engine.scheduling_policy
        return JSONResponse(payload)


async def _wait_all(group: RequestGroup, builder: ResponseBuilder) -> str | None:
    """Read events until every choice finished; return an engine error message, if any."""
    async for event in group.events:
        if event.error is not None:
            return event.error
        builder.apply(event)
        if builder.all_finished:
            return None
    return "the engine stopped before the request finished"


async def _stream_events(
    group: RequestGroup,
    builder: ResponseBuilder,
    emit: Callable[[bytes], Awaitable[None]],
    include_usage: bool,
    interval_s: float = 0.0,
) -> None:
    """Write the group's events as SSE chunks.

    All the chunks of the events that are ready go out in one write: one socket send per
    engine step, not one per chunk, and when this task runs late the steps it missed are
    merged (as vLLM's output collector merges a slow stream's outputs). With ``interval_s``
    > 0 (wall seconds, ``EmulatorConfig.stream_interval_wall_s``) intermediate tokens are
    held until that long after the previous write; the first write and the one that
    finishes the request are never held, so time to first token and end-to-end latency stay
    exact while a long stream costs a fraction of the sends (and of the parsing by whoever
    relays or reads it). The bytes on the wire are the same; only their packaging changes."""
    events = group.events
    body = bytearray()
    written = False
    flush_at = -math.inf
    while True:
        event: ChoiceEvent | None = None
        try:
            if body:  # tokens held back: wait for more until the flush time
                with anyio.move_on_after(max(0.0, flush_at - time.monotonic())):
                    event = await events.receive()
                if event is None:
                    await emit(bytes(body))
                    body.clear()
                    flush_at = time.monotonic() + interval_s
                    continue
            else:
                event = await events.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            break
        while event is not None:
            if event.error is not None:
                payload = {"error": {"message": event.error, "type": "InternalServerError",
                                     "param": None, "code": 500}}  # fmt: skip
                await emit(bytes(body) + sse(payload))
                return
            for chunk in builder.apply(event):
                body += sse(chunk)
            if builder.all_finished:
                if include_usage:
                    body += sse(builder.usage_chunk())
                await emit(bytes(body) + sse("[DONE]"))
                return
            try:
                event = events.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                event = None
        if body and (not written or time.monotonic() >= flush_at):
            await emit(bytes(body))
            body.clear()
            written = True
            flush_at = time.monotonic() + interval_s
    if include_usage:
        body += sse(builder.usage_chunk())
    await emit(bytes(body) + sse("[DONE]"))


#: Headers the emulator parses or echoes: their values must be ASCII.
_PARSED_HEADERS = frozenset({"authorization", "x-request-id", "x-vllm-priority", "traceparent"})
_NUMERIC_HEADERS = frozenset(
    {"x-vllm-priority", "x-agentrt-output-tokens", "x-agentrt-timeout-ms", "x-agentrt-attempt"}
)


def _ascii_only(name: str) -> bool:
    return name in _PARSED_HEADERS or name.startswith(("x-agentrt-", "openai-"))


def _route_of(scope: Scope) -> str:
    """A bounded route label: the matched route's template, or ``unmatched``."""
    template = getattr(scope.get("route"), "path", None)
    return template if isinstance(template, str) else "unmatched"


def build_app(state: EmulatorState) -> HardenedApp:
    """The ASGI app behind the hardened HTTP surface shared with the controller
    (:class:`agentrt_serving.hardening.HardenedApp`, docs/security.md), answering in vLLM's
    error envelope; its lifespan runs the engine loop in a task group. Unhandled errors are
    answered 500, logged once and counted in ``agentrt_engine_internal_errors_total{route}``."""
    endpoints = _Endpoints(state)
    extras = ExtraEndpoints(state)
    metrics = state.driver.metrics

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(state.driver.run)
            yield
            tg.cancel_scope.cancel()

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        response = error_response(InvalidRequest(str(detail), status_code=status))
        if isinstance(exc, HTTPException) and exc.headers:  # 405's Allow
            response.headers.update(exc.headers)
        return response

    post = ["POST"]
    routes = [
        Route("/v1/chat/completions", _answers_errors(endpoints.chat, metrics), methods=post),
        Route("/v1/completions", _answers_errors(endpoints.completions, metrics), methods=post),
        Route("/v1/responses", _answers_errors(ResponsesEndpoint(state), metrics), methods=post),
        Route("/v1/embeddings", _answers_errors(extras.embeddings, metrics), methods=post),
        Route("/detokenize", _answers_errors(extras.detokenize, metrics), methods=post),
        Route("/v1/models", endpoints.models, methods=["GET"]),
        Route("/health", endpoints.health, methods=["GET"]),
        # Kubernetes-style probe names (docs/controller.md, "Lifecycle"): the emulator has no
        # dependency, so liveness and readiness are its /health.
        Route("/livez", endpoints.health, methods=["GET"]),
        Route("/readyz", endpoints.health, methods=["GET"]),
        Route("/version", endpoints.version, methods=["GET"]),
        Route("/tokenize", _answers_errors(endpoints.tokenize, metrics), methods=post),
        Route("/metrics", endpoints.metrics, methods=["GET"]),
        Route("/agentrt/engine/v1/state", endpoints.engine_state, methods=["GET"]),
        Route(OPENAPI_PATH, OpenApiEndpoint(emulator_openapi()), methods=["GET"]),
        *[
            Route(path, _answers_errors(handler, metrics), methods=methods)
            for path, handler, methods in pin_routes(state)
        ],
    ]

    async def internal_error(request: Request, exc: Exception) -> Response:
        # Starlette answers with this and re-raises; HardenedApp logs and counts it once.
        return error_response(RuntimeError(INTERNAL_ERROR_MESSAGE), 500)

    handlers = {HTTPException: http_error, Exception: internal_error}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    return HardenedApp(
        app,
        limits=HttpLimits.from_config(state.config),
        ascii_only=_ascii_only,
        numeric=_NUMERIC_HEADERS,
        error_body=error_body,
        on_internal_error=state.driver.metrics.internal_error,
        route_of=_route_of,
        logger=_HARDENING_LOG,
    )
