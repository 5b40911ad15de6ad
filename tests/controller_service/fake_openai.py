"""A small OpenAI-compatible server for controller tests (Starlette on loopback).

It records every request (body and headers), answers chat and completion calls with a fixed
number of tokens (streamed one chunk per token, as vLLM does), honours ``priority`` ordering
when asked to hold requests, and serves vLLM-named ``/metrics``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class FakeState:
    model: str = "tiny"
    #: Output tokens per answer.
    tokens: int = 5
    #: Seconds between streamed chunks.
    chunk_delay_s: float = 0.0
    #: Seconds before answering a non-streamed call.
    delay_s: float = 0.0
    #: Cached prompt tokens reported in usage.
    cached_tokens: int = 0
    #: Text served at /metrics.
    metrics_text: str = "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n"
    #: When set, calls wait until it is set (to build up queues).
    gate: anyio.Event | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    #: Streams whose client went away before the end.
    aborted: int = 0
    #: Requests currently being answered.
    active: int = 0
    #: Include a tool call in chat answers.
    tool_call: bool = False
    #: Set-Cookie header value sent with whole answers ("" = none).
    set_cookie: str = ""


def _usage(state: FakeState, prompt_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": state.tokens,
        "total_tokens": prompt_tokens + state.tokens,
        "prompt_tokens_details": {"cached_tokens": state.cached_tokens},
    }


def build_fake(state: FakeState) -> Starlette:
    async def generate(request: Request) -> Response:
        body = await request.json()
        state.requests.append(body)
        state.headers.append(dict(request.headers))
        if body.get("model") != state.model:
            return JSONResponse(
                {"error": {"message": "no such model", "type": "NotFoundError", "code": 404}},
                status_code=404,
            )
        chat = request.url.path.endswith("chat/completions")
        prompt_tokens = len(json.dumps(body.get("messages", body.get("prompt", "")))) // 4
        state.active += 1
        try:
            if state.gate is not None:
                await state.gate.wait()
            if body.get("stream"):
                return StreamingResponse(
                    _stream(state, body, chat, prompt_tokens), media_type="text/event-stream"
                )
            await anyio.sleep(state.delay_s)
        finally:
            if not body.get("stream"):
                state.active -= 1
        text = "x" * state.tokens
        if chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if state.tool_call:
                message["tool_calls"] = [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "search", "arguments": '{"q": "a"}'}}
                ]  # fmt: skip
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "stop"}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "stop"}
        cookie = {"set-cookie": state.set_cookie} if state.set_cookie else None
        return JSONResponse(
            headers=cookie,
            content={
                "id": "cmpl-1",
                "object": "chat.completion" if chat else "text_completion",
                "created": 0,
                "model": state.model,
                "choices": [choice],
                "usage": _usage(state, prompt_tokens),
            },
        )

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": state.model, "object": "model"}]})

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(state.metrics_text)

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", generate, methods=["POST"]),
            Route("/v1/completions", generate, methods=["POST"]),
            Route("/v1/models", models),
            Route("/metrics", metrics),
            Route("/health", health),
        ]
    )


async def _stream(
    state: FakeState, body: dict[str, Any], chat: bool, prompt_tokens: int
) -> AsyncIterator[bytes]:
    finished = False
    try:
        base = {"id": "cmpl-1", "created": 0, "model": state.model}
        kind = "chat.completion.chunk" if chat else "text_completion"
        for i in range(state.tokens):
            if chat:
                delta: dict[str, Any] = (
                    {"content": "x"} if i else {"role": "assistant", "content": "x"}
                )
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
            else:
                choice = {"index": 0, "text": "x", "finish_reason": None}
            if i == state.tokens - 1:
                choice["finish_reason"] = "stop"
            yield (
                b"data: "
                + json.dumps({**base, "object": kind, "choices": [choice]}).encode()
                + b"\n\n"
            )
            await anyio.sleep(state.chunk_delay_s)
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            usage = {**base, "object": kind, "choices": [], "usage": _usage(state, prompt_tokens)}
            yield b"data: " + json.dumps(usage).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"
        finished = True
    finally:
        state.active -= 1
        if not finished:
            state.aborted += 1
