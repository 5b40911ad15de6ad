"""Must-show: behind a backend that frames its server-sent events with ``\\r\\n\\r\\n``
(sse-starlette's default) — or ``\\r\\r``, or ``\\n\\n`` — the controller streams
incrementally: the client holds the first event while the backend has not sent the last (the
backend waits for the client's word before going on), tokens are counted and the usage chunk
the controller asked for is not passed on."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from agentrt.protocol import CallTags
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from tests.backends.servers import serve_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

FRAMINGS = {"crlf": b"\r\n", "cr": b"\r", "lf": b"\n"}
TOKENS = 6


@dataclass
class Backend:
    """A vLLM-like backend whose stream waits after its first event until :attr:`go`."""

    eol: bytes
    #: Send a usage chunk when the request asks for one (stream_options.include_usage).
    usage: bool = True
    go: anyio.Event = field(default_factory=anyio.Event)
    #: The last event was sent.
    finished: bool = False
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def event(self, payload: dict[str, Any] | str, kind: str | None = None) -> bytes:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        lines = ([f"event: {kind}"] if kind else []) + [f"data: {data}"]
        return self.eol.join(line.encode() for line in lines) + self.eol + self.eol

    async def chat_stream(self, wants_usage: bool) -> AsyncIterator[bytes]:
        for i in range(TOKENS):
            choice = {"index": 0, "delta": {"content": f"t{i}"}}
            yield self.event({"id": "c", "object": "chat.completion.chunk", "choices": [choice]})
            if i == 0:
                await self.go.wait()
        if wants_usage:
            usage = {"prompt_tokens": 4, "completion_tokens": TOKENS, "total_tokens": 10}
            yield self.event({"id": "c", "choices": [], "usage": usage})
        self.finished = True
        yield self.event("[DONE]")

    async def responses_stream(self) -> AsyncIterator[bytes]:
        yield self.event({"type": "response.created", "sequence_number": 0,
                          "response": {"id": "r", "usage": None}}, "response.created")  # fmt: skip
        await self.go.wait()
        for i in range(TOKENS):
            kind = "response.output_text.delta"
            yield self.event({"delta": f"t{i}", "item_id": "m", "type": kind}, kind)
        usage = {"input_tokens": 4, "output_tokens": TOKENS, "total_tokens": 10,
                 "input_tokens_details": {"cached_tokens": 0}} if self.usage else None  # fmt: skip
        self.finished = True
        kind = "response.completed"
        yield self.event({"type": kind, "response": {"id": "r", "usage": usage}}, kind)

    def app(self) -> Starlette:
        async def generate(request: Request) -> Response:
            body = await request.json()
            self.bodies.append(body)
            if request.url.path == "/v1/responses":
                stream = self.responses_stream()
            else:
                options = body.get("stream_options") or {}
                stream = self.chat_stream(self.usage and options.get("include_usage") is True)
            return StreamingResponse(stream, media_type="text/event-stream")

        async def ok(request: Request) -> Response:
            return PlainTextResponse("")

        paths = ("/v1/chat/completions", "/v1/responses")
        return Starlette(
            routes=[
                *[Route(p, generate, methods=["POST"]) for p in paths],
                Route("/health", ok),
                Route("/metrics", ok),
            ]
        )


@contextlib.asynccontextmanager
async def through_controller(backend: Backend) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    def cost(uncached_prompt_tokens: int, output_tokens: int) -> float:
        return float(output_tokens)  # attained service = output tokens counted

    async with serve_app(backend.app()) as backend_url:
        config = ControllerConfig(
            port=0, backends=(BackendSpec(backend_url, kind="vllm"),), scrape_interval_s=0.2
        )
        async with serve_controller(config, cost=cost) as url, httpx.AsyncClient() as http:
            yield url, http


TAGS = CallTags(session_id="s", program_id="p-sse", thread_id="main", node_id="n").to_headers()


async def _read_incrementally(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], backend: Backend
) -> tuple[bytes, bytes]:
    """POST ``body``; returns (what arrived before the backend was let go on, everything)."""
    first = b""
    received = b""
    with anyio.fail_after(10):  # a controller that buffers never shows the first event
        async with http.stream("POST", url, json=body, headers=TAGS) as response:
            assert response.status_code == 200
            async for chunk in response.aiter_raw():
                received += chunk
                if not backend.go.is_set() and backend.eol * 2 in received:
                    first = received
                    assert not backend.finished
                    backend.go.set()
    return first, received


async def _attained_service_s(http: httpx.AsyncClient, url: str) -> float:
    table = (await http.get(url + "/agentrt/v1/programs")).json()
    (entry,) = table["entries"]
    return float(entry["attained_service_s"])


@pytest.mark.parametrize("usage", [True, False], ids=["usage", "no-usage"])
@pytest.mark.parametrize("eol", FRAMINGS.values(), ids=FRAMINGS.keys())
async def test_chat_streams_incrementally_in_every_framing(eol: bytes, usage: bool) -> None:
    backend = Backend(eol, usage=usage)
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with through_controller(backend) as (url, http):
        first, received = await _read_incrementally(
            http, url + "/v1/chat/completions", body, backend
        )
        service_s = await _attained_service_s(http, url)
    assert first.startswith(b"data: ") and b"t0" in first and b"t5" not in first
    assert backend.bodies[0]["stream_options"] == {"include_usage": True}  # added by us
    assert b'"usage"' not in received  # ... and its answer taken out again
    assert received.count(b"data: ") == TOKENS + 1
    assert received.endswith(b"data: [DONE]" + eol + eol)
    assert service_s == TOKENS  # from usage, or counted chunk by chunk without it


@pytest.mark.parametrize("usage", [True, False], ids=["usage", "no-usage"])
@pytest.mark.parametrize("eol", FRAMINGS.values(), ids=FRAMINGS.keys())
async def test_responses_streams_incrementally_in_every_framing(eol: bytes, usage: bool) -> None:
    backend = Backend(eol, usage=usage)
    body = {"model": "m", "stream": True, "input": "hi"}
    async with through_controller(backend) as (url, http):
        first, received = await _read_incrementally(http, url + "/v1/responses", body, backend)
        service_s = await _attained_service_s(http, url)
    assert b"response.created" in first and b"delta" not in first
    assert "stream_options" not in backend.bodies[0]
    assert received.count(b"response.output_text.delta") == 2 * TOKENS  # event: and data:
    assert received.endswith(eol + eol) and b"response.completed" in received
    assert service_s == TOKENS  # usage from response.completed, or the delta events
