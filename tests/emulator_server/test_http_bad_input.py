"""Bad input gets a 4xx with an OpenAI-style error body: never a 500, never a hang."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentrt_emulator.server import EmulatorConfig, RunningEmulator, serve_engine

from .helpers import MODEL, make_config

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
PINS = "/agentrt/engine/v1/pins"
OK_MESSAGES = [{"role": "user", "content": "hi"}]
MAX_MODEL_LEN = 256


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": OK_MESSAGES, **fields}


# (case id, method, path, json body or raw bytes, extra headers, expected status)
CASES: list[tuple[str, str, str, Any, dict[str, str], int]] = [
    ("malformed json", "POST", CHAT, b'{"model": ', {}, 400),
    ("body not an object", "POST", CHAT, [1, 2], {}, 400),
    ("not utf-8", "POST", CHAT, b"\xff\xfe{}", {}, 400),
    ("missing messages", "POST", CHAT, {"model": MODEL}, {}, 400),
    ("messages not a list", "POST", CHAT, chat(messages="hi"), {}, 400),
    ("messages empty", "POST", CHAT, chat(messages=[]), {}, 400),
    ("unknown role", "POST", CHAT, chat(messages=[{"role": "wizard", "content": "x"}]), {}, 400),
    ("image part", "POST", CHAT,
     chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
     {}, 400),
    ("max_tokens string", "POST", CHAT, chat(max_tokens="ten"), {}, 400),
    ("max_tokens zero", "POST", CHAT, chat(max_tokens=0), {}, 400),
    ("max_tokens past context", "POST", CHAT, chat(max_tokens=MAX_MODEL_LEN), {}, 400),
    ("n zero", "POST", CHAT, chat(n=0), {}, 400),
    ("n bool", "POST", CHAT, chat(n=True), {}, 400),
    ("stream not bool", "POST", CHAT, chat(stream="yes"), {}, 400),
    ("priority string", "POST", CHAT, chat(priority="high"), {}, 400),
    ("priority float", "POST", CHAT, chat(priority=1.5), {}, 400),
    ("priority under fcfs", "POST", CHAT, chat(priority=3), {}, 400),
    ("priority header not int", "POST", CHAT, chat(), {"X-Vllm-Priority": "soon"}, 400),
    ("priority header under fcfs", "POST", CHAT, chat(), {"X-Vllm-Priority": "-1"}, 400),
    ("empty cache_salt", "POST", CHAT, chat(cache_salt=""), {}, 400),
    ("cache_salt number", "POST", CHAT, chat(cache_salt=7), {}, 400),
    ("unknown model", "POST", CHAT, chat(model="gpt-nope"), {}, 404),
    ("prompt too long", "POST", CHAT,
     chat(messages=[{"role": "user", "content": "word " * 400}]), {}, 400),
    ("tool_choice unknown function", "POST", CHAT,
     chat(tools=[{"type": "function", "function": {"name": "a"}}],
          tool_choice={"type": "function", "function": {"name": "b"}}), {}, 400),
    ("tool_choice required without tools", "POST", CHAT, chat(tool_choice="required"), {}, 400),
    ("tool without name", "POST", CHAT, chat(tools=[{"type": "function", "function": {}}]),
     {}, 400),
    ("duplicate tool names", "POST", CHAT,
     chat(tools=[{"type": "function", "function": {"name": "a"}}] * 2), {}, 400),
    ("json_schema without schema", "POST", CHAT,
     chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}), {}, 400),
    ("bad response_format type", "POST", CHAT, chat(response_format={"type": "yaml"}), {}, 400),
    ("output hint header", "POST", CHAT, chat(), {"X-Agentrt-Output-Tokens": "0"}, 400),
    ("output hint body", "POST", CHAT, chat(agentrt_output_tokens=-2), {}, 400),
    ("temperature negative", "POST", CHAT, chat(temperature=-1), {}, 400),
    ("completion without prompt", "POST", COMPLETIONS, {"model": MODEL}, {}, 400),
    ("completion empty prompt list", "POST", COMPLETIONS, {"model": MODEL, "prompt": []}, {}, 400),
    ("completion token out of range", "POST", COMPLETIONS,
     {"model": MODEL, "prompt": [1, 10**9]}, {}, 400),
    ("completion mixed prompt list", "POST", COMPLETIONS, {"model": MODEL, "prompt": ["a", 1]},
     {}, 400),
    ("completion echo", "POST", COMPLETIONS, {"model": MODEL, "prompt": "a", "echo": True},
     {}, 400),
    ("tokenize neither", "POST", "/tokenize", {"model": MODEL}, {}, 400),
    ("tokenize unknown model", "POST", "/tokenize", {"model": "x", "prompt": "a"}, {}, 404),
    ("pin without ttl", "POST", PINS, {"pin_id": "p", "prompt": "a"}, {}, 400),
    ("pin negative ttl", "POST", PINS, {"pin_id": "p", "prompt": "a", "ttl_s": -1}, {}, 400),
    ("pin unknown field", "POST", PINS, {"pin_id": "p", "prompt": "a", "ttl_s": 1, "x": 1},
     {}, 400),
    ("pin two sources", "POST", PINS,
     {"pin_id": "p", "prompt": "a", "token_ids": [1], "ttl_s": 1}, {}, 400),
    ("pin empty salt", "POST", PINS, {"pin_id": "p", "prompt": "a", "ttl_s": 1, "cache_salt": ""},
     {}, 400),
    ("unpin unknown", "DELETE", PINS + "/nobody", None, {}, 404),
    ("unknown path", "GET", "/v1/nothing", None, {}, 404),
    ("wrong method", "GET", CHAT, None, {}, 405),
    ("body too large", "POST", CHAT, chat(messages=[{"role": "user", "content": "x" * 40000}]),
     {}, 413),
]  # fmt: skip


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[RunningEmulator]:
    """One server for the whole table (each case also checks it still serves afterwards)."""
    base = make_config(max_model_len=MAX_MODEL_LEN)
    config = EmulatorConfig(engine=base.engine, time_scale=base.time_scale, max_body_bytes=32768)
    async with serve_engine(config) as running:
        yield running


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
async def test_bad_input_gets_openai_style_4xx(
    engine: RunningEmulator,
    method: str,
    path: str,
    body: Any,
    headers: dict[str, str],
    status: int,
) -> None:
    kwargs: dict[str, Any] = {"headers": headers}
    if isinstance(body, bytes):
        kwargs["content"] = body
        kwargs["headers"] = {"content-type": "application/json", **headers}
    elif body is not None:
        kwargs["json"] = body
    async with httpx.AsyncClient(base_url=engine.base_url, timeout=10) as http:
        response = await http.request(method, path, **kwargs)
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["message"] and error["code"] == status
        # The server is still healthy and serves a good request afterwards.
        ok = await http.post(CHAT, json=chat(max_tokens=2))
        assert ok.status_code == 200


async def test_error_messages_name_the_field(engine: RunningEmulator) -> None:
    async with httpx.AsyncClient(base_url=engine.base_url) as http:
        response = await http.post(CHAT, json=chat(max_tokens="ten"))
        assert response.json()["error"]["param"] == "max_tokens"
        response = await http.post(CHAT, json=chat(priority=2))
        assert "Priority scheduling is not enabled" in response.json()["error"]["message"]
        response = await http.post(CHAT, json=chat(model="nope"))
        assert response.json()["error"]["type"] == "NotFoundError"
