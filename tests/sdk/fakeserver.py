"""A small OpenAI-compatible server for SDK tests: captures every request's headers and body,
answers from a script, optionally serves the controller's program-event endpoints, and
notices when a client disconnects (so tests can check cancellation reaches the server)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

Reply = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class Captured:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def text_reply(text: str) -> Reply:
    return lambda body: {"role": "assistant", "content": text}


@dataclass
class FakeState:
    reply: Reply = field(default_factory=lambda: text_reply("ok"))
    #: Seconds each completion takes (checked for client disconnects every 5 ms).
    delay_s: float = 0.0
    #: Serve the controller's program endpoints (else they 404, like a plain server).
    controller: bool = False
    #: Status code to answer completions with (200 = normal).
    status: int = 200
    #: Answer the first N completions with HTTP 503 (then normally).
    fail_first: int = 0
    queue_ms: float | None = None
    requests: list[Captured] = field(default_factory=list)
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    running: int = 0
    peak_running: int = 0
    disconnects: int = 0
    completed: int = 0

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


def _completion(body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": f"cmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def build_app(state: FakeState) -> Starlette:
    async def completions(request: Request) -> Response:
        body = json.loads(await request.body())
        state.requests.append(
            Captured(request.url.path, {k.lower(): v for k, v in request.headers.items()}, body)
        )
        if state.status != 200 or state.fail_first > 0:
            state.fail_first -= 1
            code = state.status if state.status != 200 else 503
            return JSONResponse(
                {"error": {"message": "scripted failure"}}, code, headers={"retry-after-ms": "1"}
            )
        message = state.reply(body)
        headers = {}
        if state.queue_ms is not None:
            headers["x-agentrt-queue-ms"] = str(state.queue_ms)
        if body.get("stream"):
            return StreamingResponse(
                _stream(state, body, message), media_type="text/event-stream", headers=headers
            )
        state.running += 1
        state.peak_running = max(state.peak_running, state.running)
        try:
            deadline = time.monotonic() + state.delay_s
            while time.monotonic() < deadline:
                if await request.is_disconnected():
                    state.disconnects += 1
                    return Response(status_code=499)
                await asyncio.sleep(0.005)
        finally:
            state.running -= 1
        state.completed += 1
        return JSONResponse(_completion(body, message), headers=headers)

    async def session_start(request: Request) -> Response:
        body = json.loads(await request.body() or b"{}")
        state.events.append(("POST", request.url.path, body))
        if not state.controller:
            return JSONResponse({"detail": "not found"}, 404)
        return JSONResponse({"session_id": body.get("session_id") or "s-ctl", "idle_timeout_s": 60})

    async def event(request: Request) -> Response:
        raw = await request.body()
        state.events.append((request.method, request.url.path, json.loads(raw) if raw else {}))
        if not state.controller:
            return JSONResponse({"detail": "not found"}, 404)
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/agentrt/v1/sessions", session_start, methods=["POST"]),
            Route("/agentrt/v1/sessions/{sid}", event, methods=["DELETE"]),
            Route("/agentrt/v1/programs/{pid}/{what}", event, methods=["POST"]),
        ]
    )


async def _stream(state: FakeState, body: dict[str, Any], message: dict[str, Any]):  # type: ignore[no-untyped-def]
    state.running += 1
    state.peak_running = max(state.peak_running, state.running)
    finished = False
    try:
        words = (message.get("content") or "").split(" ") or [""]
        for i in range(max(len(words), 1)):
            chunk = {
                "id": "c1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body.get("model", "fake"),
                "choices": [{"index": 0, "delta": {"content": words[i % len(words)] + " "}}],
            }
            yield f"data: {json.dumps(chunk)}\n\n"
            await asyncio.sleep(state.delay_s / max(len(words), 1))
        yield "data: [DONE]\n\n"
        finished = True
        state.completed += 1
    finally:
        state.running -= 1
        if not finished:
            state.disconnects += 1


class FakeServer:
    """Runs the app with uvicorn on a free loopback port in a background thread."""

    def __init__(self) -> None:
        self.state = FakeState()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        config = uvicorn.Config(
            build_app(self.state),
            host="127.0.0.1",
            port=self.port,
            log_level="error",
            lifespan="off",
            ws="none",
            access_log=False,
            timeout_keep_alive=30,
            backlog=4096,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 3.0) -> None:
    """Poll ``predicate`` (state changed by the server thread) until true or time out."""
    with anyio.fail_after(timeout_s):
        while not predicate():  # noqa: ASYNC110 - the state lives in another thread
            await anyio.sleep(0.005)
