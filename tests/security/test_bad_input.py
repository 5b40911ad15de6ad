"""Each class of bad input that used to crash a server (500 with a traceback) is a 400 in the
server's error envelope, on the controller (in front of an emulator) and on the emulator,
over real HTTP. Table-driven: one row per input class and endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import httpx
import pytest

from .stack import MODEL, Stack, threaded_stack

Server = Literal["controller", "engine"]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with threaded_stack() as running:
        yield running


def _chat(content: str = "hi", **extra: object) -> bytes:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 2}
    return json.dumps({**body, **extra}).encode()


_TAGS = {"X-Agentrt-Program-Id": b"p-1", "X-Agentrt-Session-Id": b"s-1"}
_LONE = b'{"model":"%s","messages":[{"role":"user","content":"a\\ud800b"}],"max_tokens":2}' % (
    MODEL.encode()
)
_LONE_RAW = b'{"model":"%s","prompt":"\xed\xa0\x80","max_tokens":2}' % MODEL.encode()
_DEEP = b"[" * 100_000
_DEEP_IN_FIELD = b'{"model":"m","x":' + b"[" * 5000 + b"]" * 5000 + b"}"


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: bytes
    headers: dict[str, bytes] = field(default_factory=dict)
    #: The ``param`` the error names, when it names one.
    param: str | None = None
    servers: tuple[Server, ...] = ("controller", "engine")


CASES = [
    Case("lone surrogate in content", "/v1/chat/completions", _LONE,
         param="messages.0.content"),
    Case("lone surrogate in prompt", "/v1/completions",
         b'{"model":"%s","prompt":"\\udc00","max_tokens":2}' % MODEL.encode(), param="prompt"),
    Case("UTF-8-encoded surrogate in prompt", "/v1/completions", _LONE_RAW, param="prompt"),
    Case("lone surrogate at /tokenize", "/tokenize", b'{"prompt":"\\ud800"}', param="prompt",
         servers=("engine",)),
    Case("lone surrogate in a key", "/v1/chat/completions",
         b'{"model":"m","messages":[],"\\udfff":1}'),
    Case("non-ASCII Authorization", "/v1/chat/completions", _chat(),
         {"Authorization": "Bearer cl\u00e9".encode("latin-1")}, param="authorization"),
    Case("non-ASCII X-Request-Id", "/v1/chat/completions", _chat(),
         {"X-Request-Id": "r\u00e9q".encode("latin-1")}, param="x-request-id"),
    Case("non-ASCII OpenAI-Organization", "/v1/chat/completions", _chat(),
         {"OpenAI-Organization": b"org-\xff"}, param="openai-organization"),
    Case("non-ASCII program id", "/v1/chat/completions", _chat(),
         {**_TAGS, "X-Agentrt-Program-Id": b"p\xe9"}, param="x-agentrt-program-id"),
    Case("401-digit X-Agentrt-Timeout-Ms", "/v1/chat/completions", _chat(),
         {**_TAGS, "X-Agentrt-Timeout-Ms": b"9" * 401}, param="x-agentrt-timeout-ms"),
    Case("20-digit X-Agentrt-Attempt", "/v1/chat/completions", _chat(),
         {**_TAGS, "X-Agentrt-Attempt": b"1" + b"0" * 19}, param="x-agentrt-attempt"),
    Case("huge x-vllm-priority", "/v1/chat/completions", _chat(),
         {"x-vllm-priority": b"-" + b"9" * 30}, param="x-vllm-priority", servers=("engine",)),
    Case("401-digit max_tokens", "/v1/chat/completions",
         b'{"model":"%s","messages":[{"role":"user","content":"x"}],"max_tokens":%s}'
         % (MODEL.encode(), b"9" * 401)),
    Case("1e999 temperature", "/v1/chat/completions",
         b'{"model":"%s","messages":[{"role":"user","content":"x"}],"temperature":1e999}'
         % MODEL.encode()),
    Case("NaN top_p", "/v1/completions",
         b'{"model":"%s","prompt":"x","top_p":NaN}' % MODEL.encode()),
    Case("100,000 nested [", "/v1/chat/completions", _DEEP),
    Case("5,000 nested [ in a field", "/v1/chat/completions", _DEEP_IN_FIELD),
    Case("65 nested objects in tool parameters", "/v1/chat/completions",
         _chat(tools=[{"type": "function", "function": {"name": "f", "parameters":
               json.loads('{"a":' * 65 + "1" + "}" * 65)}}])),
    Case("100,000 nested [ at /tokenize", "/tokenize", _DEEP, servers=("engine",)),
    Case("401-digit timeout_ms in program start", "/agentrt/v1/programs/p-1/start",
         b'{"session_id":"s-1","timeout_ms":%s}' % (b"9" * 401), servers=("controller",)),
    Case("1e999 predicted duration", "/agentrt/v1/programs/p-1/tool-start",
         b'{"session_id":"s-1","thread_id":"main","node_id":"n1","tool_name":"t",'
         b'"predicted_duration_s":1e999}', servers=("controller",)),
    Case("lone surrogate in tool name", "/agentrt/v1/programs/p-1/tool-start",
         b'{"session_id":"s-1","thread_id":"main","node_id":"n1","tool_name":"\\ud800"}',
         servers=("controller",)),
    Case("deep pin request", "/agentrt/engine/v1/pins", _DEEP, servers=("engine",)),
]  # fmt: skip

ROWS = [(case, server) for case in CASES for server in case.servers]


def _check_envelope(server: Server, response: httpx.Response, case: Case) -> None:
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in response.text
    if server == "controller":
        assert error["type"] == "invalid_request_error"
    else:  # the emulator answers as vLLM does
        assert error["type"] == "BadRequestError" and error["code"] == 400
    if case.param is not None:
        assert error["param"] == case.param


@pytest.mark.parametrize(("case", "server"), ROWS, ids=[f"{s}: {c.name}" for c, s in ROWS])
def test_bad_input_is_a_400(stack: Stack, case: Case, server: Server) -> None:
    base = stack.controller_url if server == "controller" else stack.engine_url
    stack.logs.clear()
    headers = {b"content-type": b"application/json"}
    headers.update((name.encode(), value) for name, value in case.headers.items())
    with httpx.Client(timeout=10) as http:
        response = http.post(base + case.path, content=case.body, headers=headers)
    assert response.status_code == 400, response.text
    _check_envelope(server, response, case)
    assert stack.logs.tracebacks() == []


def test_valid_surrogate_pairs_and_big_int64_values_still_pass(stack: Stack) -> None:
    body = (
        b'{"model":"%s","messages":[{"role":"user","content":"\\ud83d\\ude00 \\u00e9"}],'
        b'"max_tokens":2,"seed":9223372036854775807}' % MODEL.encode()
    )
    with httpx.Client(timeout=10) as http:
        for base in (stack.controller_url, stack.engine_url):
            response = http.post(base + "/v1/chat/completions", content=body)
            assert response.status_code == 200, response.text


def test_no_internal_errors_were_counted(stack: Stack) -> None:
    with httpx.Client(timeout=10) as http:
        controller = http.get(stack.controller_url + "/metrics").text
        engine = http.get(stack.engine_url + "/metrics").text
    assert "# TYPE agentrt_controller_http_internal_errors_total counter" in controller
    assert "agentrt_controller_http_internal_errors_total{" not in controller
    assert "# TYPE agentrt_engine_internal_errors_total counter" in engine
    assert "agentrt_engine_internal_errors_total{" not in engine
