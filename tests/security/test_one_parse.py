"""One JSON parse per request: the hardened guard's check returns the value it parsed (the same
as ``json.loads``) and the controller reads it from the scope instead of parsing the body again
(docs/security.md, "Hardened HTTP surface")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentrt_controller.service.http import incoming
from agentrt_serving.hardening import NOT_JSON, BadInput, check_json_body, checked_json

from .stack import MODEL, Stack, threaded_stack

pytestmark = pytest.mark.timeout(60)


def _nested(levels: int) -> bytes:
    return b'{"model":"m","x":' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}"


def _conversation(messages: int) -> bytes:
    turns = [
        {"role": "user", "content": [{"type": "text", "text": f"t{i} é"}]} for i in range(messages)
    ]
    body = {"model": "m", "messages": turns, "seed": 2**63 - 1, "temperature": 0.5, "stop": None}
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}',
        _conversation(200),  # many more brackets than the depth limit, all shallow
        json.dumps({"c": "\U0001f600 and \u00e9"}).encode(),  # an escaped surrogate pair
        json.dumps({"c": "\U0001f600"}, ensure_ascii=False).encode(),
        _nested(64),  # exactly at the limit
        b"null",
        b"[1, 2.5, true]",
        b'"a string"',
        '{"k": "\U0001f600"}'.encode("utf-16"),
    ],
    ids=["small", "200 turns", "pair", "raw emoji", "64 levels", "null", "list", "str", "utf-16"],
)
def test_the_check_returns_what_json_loads_returns(body: bytes) -> None:
    assert check_json_body(body, 64) == json.loads(body)


@pytest.mark.parametrize(
    "body", [b"", b"{", b"not json", b'{"a": "\xff"}', b'{"a": 1}{', b"{'a': 1}"]
)
def test_a_body_that_is_not_json_passes_as_not_json(body: bytes) -> None:
    assert check_json_body(body, 64) is NOT_JSON


@pytest.mark.parametrize("body", [_nested(65), b"[" * 65 + b"]" * 65, _nested(5000)])
def test_nesting_past_the_limit_is_refused_with_the_same_message(body: bytes) -> None:
    with pytest.raises(BadInput) as refused:
        check_json_body(body, 64)
    assert (refused.value.status, refused.value.message, refused.value.param) == (
        400,
        "JSON nested deeper than 64 levels",
        None,
    )


def test_a_lone_surrogate_in_a_utf16_body_is_refused() -> None:
    # json.loads reads UTF-16 (byte-order mark first) and lets a lone surrogate through
    body = b"\xff\xfe" + '{"p": "'.encode("utf-16-le") + b"\x00\xd8" + '"}'.encode("utf-16-le")
    with pytest.raises(BadInput) as refused:
        check_json_body(body, 64)
    assert (refused.value.message, refused.value.param) == (
        "string holds a lone UTF-16 surrogate",
        "p",
    )


def test_the_scope_value_is_read_only_for_the_very_bytes_checked() -> None:
    body = b'{"a": 1}'
    scope: dict[str, Any] = {}
    assert checked_json(scope, body) is NOT_JSON
    scope["agentrt.checked_json"] = (body, {"a": 1})
    assert checked_json(scope, body) == {"a": 1}
    assert checked_json(scope, bytes(bytearray(body))) is NOT_JSON  # equal, not the same


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    def second_parse(raw: bytes) -> object:
        raise AssertionError(f"the controller parsed a {len(raw)}-byte body a second time")

    monkeypatch.setattr(incoming, "_decode", second_parse)
    with threaded_stack() as running:
        yield running


def test_the_controller_parses_each_body_once(stack: Stack) -> None:
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with httpx.Client(timeout=10) as http:
        answer = http.post(stack.controller_url + "/v1/chat/completions", json=chat)
        assert answer.status_code == 200, answer.text
        tokens = http.post(stack.controller_url + "/tokenize", json={"prompt": "hi"})
        assert tokens.status_code == 200, tokens.text
        completion = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
        answer = http.post(stack.controller_url + "/v1/completions", json=completion)
        assert answer.status_code == 200, answer.text
    assert stack.logs.tracebacks() == []
