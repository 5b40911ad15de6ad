"""The JSON body check parses with orjson first and falls back to the exact parse wherever
orjson refuses a body or might read it differently: the outcome is json.loads' value or the
same 400 as before, body for body."""

from __future__ import annotations

import json

import pytest

from agentrt_serving.hardening import NOT_JSON, BadInput, check_json_body

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "m", "messages": [{"role": "user", "content": "hi \\ud83d\\ude00"}]}',
        b'{"max_tokens": 9223372036854775807, "t": -9223372036854775807}',
        b'{"big": 1e19, "small": -1.5e300, "zero": -0}',  # floats taken the exact way
        b"\xef\xbb\xbf{}",  # a byte-order mark: orjson refuses, json.loads reads it
        '{"a": "é"}'.encode("utf-16"),
        b"[" * 64 + b"]" * 64,
    ],
)
def test_bodies_within_the_rules_give_json_loads_value(body: bytes) -> None:
    assert check_json_body(body, 64) == json.loads(body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"n": 18446744073709551616}', "integer out of range"),  # orjson: a float
        (b'{"n": 9223372036854775808}', "integer out of range"),
        (b'{"n": 1e400}', "number out of range"),
        (b'{"n": NaN}', "NaN is not a JSON number"),
        (b'{"s": "\\ud800"}', "lone UTF-16 surrogate"),
        (b'{"s": "\xed\xa0\x80"}', "lone UTF-16 surrogate"),
        (b"[" * 65 + b"]" * 65, "nested deeper than 64"),
    ],
)
def test_bodies_breaking_a_rule_get_the_same_400(body: bytes, message: str) -> None:
    with pytest.raises(BadInput, match=message) as raised:
        check_json_body(body, 64)
    assert raised.value.status == 400


def test_a_body_that_is_not_json_passes_as_such() -> None:
    assert check_json_body(b'{"a": 1,}', 64) is NOT_JSON
