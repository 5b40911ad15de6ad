"""A small vLLM-like server for backend tests; runs in-process or as a process we can kill.

Answers ``/v1/chat/completions`` (streamed one chunk per token, as vLLM does, or whole), with
answer ids ``chatcmpl-<name>`` so tests see which server answered; ``/health``,
``/v1/models`` and ``/metrics`` (vLLM names, or garbage). ``first_token_delay_s`` holds every
answer before its first byte of body (streams: after the status line, as vLLM's streaming
response does); ``chunk_delay_s`` spaces the chunks. ``no_priority`` refuses a non-zero
``priority`` exactly as vLLM without ``--scheduling-policy priority`` does.

As a process: ``python fake_vllm.py --name a [--first-token-delay S] ...`` prints
``PORT <n>`` on stdout once listening; kill it to simulate a crash (connections reset).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

GARBAGE_METRICS = "<html>oops</html>\nvllm:num_requests_waiting NaN\nvllm:num_requests_running -3\n"
GARBAGE_METRICS += 'vllm:kv_cache_usage_perc 17\n\x00\xff{{{\nvllm:num_requests_waiting{x="1" 4\n'


@dataclass
class FakeVllm:
    name: str = "a"
    model: str = "tiny"
    tokens: int = 5
    first_token_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    metrics: str = "vllm:num_requests_running 1\nvllm:num_requests_waiting 2\n"
    no_priority: bool = False
    #: Seconds every health check waits before answering (a hung server: set it high).
    health_delay_s: float = 0.0
    #: Seconds every ``/metrics`` scrape waits before answering.
    metrics_delay_s: float = 0.0
    #: Bodies received (in-process use).
    requests: list[dict[str, Any]] = field(default_factory=list)


def build_app(fake: FakeVllm) -> Starlette:
    async def chat(request: Request) -> Response:
        body = await request.json()
        fake.requests.append(body)
        if fake.no_priority and body.get("priority", 0) != 0:
            message = f"Got priority {body['priority']} but Priority scheduling is not enabled."
            error = {"message": message, "type": "BadRequestError", "param": None, "code": 400}
            return JSONResponse({"error": error}, status_code=400)
        if body.get("stream"):
            return StreamingResponse(_stream(fake), media_type="text/event-stream")
        await anyio.sleep(fake.first_token_delay_s)
        message = {"role": "assistant", "content": "x" * fake.tokens}
        return JSONResponse(
            {
                "id": f"chatcmpl-{fake.name}",
                "object": "chat.completion",
                "created": 0,
                "model": fake.model,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": fake.tokens,
                          "total_tokens": 3 + fake.tokens},
            }
        )  # fmt: skip

    async def completions(request: Request) -> Response:
        body = await request.json()
        if fake.no_priority and body.get("priority", 0) != 0:
            message = f"Got priority {body['priority']} but Priority scheduling is not enabled."
            return JSONResponse({"error": {"message": message, "code": 400}}, status_code=400)
        return JSONResponse({"id": f"cmpl-{fake.name}", "choices": [{"index": 0, "text": "x"}]})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": fake.model, "object": "model"}]})

    async def metrics(request: Request) -> Response:
        await anyio.sleep(fake.metrics_delay_s)
        return PlainTextResponse(fake.metrics)

    async def health(request: Request) -> Response:
        await anyio.sleep(fake.health_delay_s)
        return Response(status_code=200)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models),
            Route("/metrics", metrics),
            Route("/health", health),
        ]
    )


async def _stream(fake: FakeVllm) -> AsyncIterator[bytes]:
    await anyio.sleep(fake.first_token_delay_s)
    base = {"id": f"chatcmpl-{fake.name}", "object": "chat.completion.chunk", "created": 0,
            "model": fake.model}  # fmt: skip
    for i in range(fake.tokens):
        delta = {"content": "x"} if i else {"role": "assistant", "content": "x"}
        finish = "stop" if i == fake.tokens - 1 else None
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
        await anyio.sleep(fake.chunk_delay_s)
    yield b"data: [DONE]\n\n"


def _main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="a")
    parser.add_argument("--tokens", type=int, default=5)
    parser.add_argument("--first-token-delay", type=float, default=0.0)
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    parser.add_argument("--garbage-metrics", action="store_true")
    args = parser.parse_args()
    fake = FakeVllm(
        name=args.name,
        tokens=args.tokens,
        first_token_delay_s=args.first_token_delay,
        chunk_delay_s=args.chunk_delay,
    )
    if args.garbage_metrics:
        fake.metrics = GARBAGE_METRICS
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(build_app(fake), log_level="error", lifespan="off", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(_main())
