"""Loopback servers for the replay tests: the emulator behind a recording ASGI wrapper."""

from __future__ import annotations

import contextlib
import json
import math
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import uvicorn

from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import EmulatorConfig, EmulatorState, build_app, build_state
from agentrt_emulator.server.prepare import chat_messages
from agentrt_emulator.server.wire import ChatMessageIn
from agentrt_sim.workloads.program import Program
from agentrt_sim.workloads.trace import load_trace

TRACE = Path(__file__).with_name("small_trace.jsonl")


def small_trace() -> list[Program]:
    return load_trace(TRACE)


@dataclass
class Seen:
    """One chat request as the server received it (anyio clock, wall seconds)."""

    headers: dict[str, str]
    body: dict[str, Any]
    start_s: float
    end_s: float = math.nan

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass
class Recorder:
    """ASGI wrapper that records every ``/v1/chat/completions`` request it passes on."""

    app: Any
    seen: list[Seen] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            await self.app(scope, receive, send)
            return
        parts: list[bytes] = []
        more = True
        while more:
            message = await receive()
            parts.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(parts)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        record = Seen(headers, json.loads(body), anyio.current_time())
        self.seen.append(record)
        given = False

        async def replayed() -> Any:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def recording(message: Any) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                record.end_s = anyio.current_time()
            await send(message)

        await self.app(scope, replayed, recording)

    def tagged(self) -> list[Seen]:
        """Requests made inside a program (the replay's calls, not its probe)."""
        return [s for s in self.seen if s.header("X-Agentrt-Program-Id")]


def prompt_tokens(state: EmulatorState, seen: Seen) -> int:
    """Prompt tokens of ``seen`` as the emulator's tokenizer and template count them."""
    messages = [ChatMessageIn.model_validate(m) for m in seen.body["messages"]]
    return len(state.tokenizer.render_chat(chat_messages(messages), [], add_generation_prompt=True))


@dataclass
class RecordedEmulator:
    base_url: str
    state: EmulatorState
    recorder: Recorder

    @property
    def openai_base_url(self) -> str:
        return self.base_url + "/v1"


@contextlib.asynccontextmanager
async def recording_emulator(
    time_scale: float = 20.0, wrap: Callable[[Any], Any] | None = None
) -> AsyncIterator[RecordedEmulator]:
    """An emulator on a free loopback port, every chat request recorded; ``wrap(app)`` (an
    ASGI middleware) sits between the recorder and the emulator."""
    config = EmulatorConfig(engine=EngineConfig(num_gpu_blocks=4096), time_scale=time_scale)
    state = build_state(config)
    app = build_app(state)
    recorder = Recorder(app if wrap is None else wrap(app))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(recorder, log_level="error", lifespan="on", access_log=False)
    )
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, [sock])
            with anyio.fail_after(20):
                while not server.started:  # noqa: ASYNC110 - uvicorn offers no event for this
                    await anyio.sleep(0.005)
            try:
                yield RecordedEmulator(f"http://127.0.0.1:{port}", state, recorder)
            finally:
                server.should_exit = True
    finally:
        sock.close()
