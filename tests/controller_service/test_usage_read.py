"""A whole answer's usage is read with orjson where that gives what ``json`` gives, and with
``json`` where it does not (``NaN``, lone surrogates, a byte-order mark, integers past 64 bits)."""

from __future__ import annotations

import json

import pytest

from agentrt_controller.service.core.charging import Usage

pytestmark = pytest.mark.timeout(30)

_USAGE = (
    '"usage":{"prompt_tokens":%s,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":2}}'
)


def _read(body: bytes) -> tuple[int | None, int | None, int | None]:
    usage = Usage()
    usage.read_body(body)
    return usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens


@pytest.mark.parametrize(
    "body",
    [
        ("{" + _USAGE % "12" + "}").encode(),
        ('{"choices":[{"text":"a"}],' + _USAGE % "12" + "}").encode(),
        ('{"x":NaN,' + _USAGE % "12" + "}").encode(),  # json takes NaN, orjson does not
        ('{"x":"\\ud800",' + _USAGE % "12" + "}").encode(),  # a lone surrogate
        b"\xef\xbb\xbf" + ("{" + _USAGE % "12" + "}").encode(),  # json skips a BOM
        ("{" + _USAGE % str(2**70) + "}").encode(),  # past 64 bits: json keeps an int
        ("{" + _USAGE % "-1" + "}").encode(),
        ("{" + _USAGE % "1.5" + "}").encode(),
        ("{" + _USAGE % "true" + "}").encode(),
        b'{"usage": 3}',
        b'[1, "usage"]',
        b'{"usage": {"prompt_tokens": 1}',  # cut short: nothing read
    ],
)
def test_usage_is_what_json_reads(body: bytes) -> None:
    expected = Usage()
    if b'"usage"' in body:  # read_body looks no further otherwise
        try:
            value = json.loads(body)
        except ValueError:
            value = None
        if isinstance(value, dict):
            expected.read_usage(value.get("usage"))
    want = expected.prompt_tokens, expected.completion_tokens, expected.cached_tokens
    assert _read(body) == want
