"""Property-based fuzzing of both HTTP servers over real HTTP (docs/security.md, "Fuzzing").

Hypothesis draws request bodies (random JSON, near-valid OpenAI bodies, raw bytes, deep
nesting), header values (non-ASCII, huge numbers) and agentrt tag headers, and sends them to
the controller (in front of an emulator) and to the emulator itself. Properties, per request:

* the answer comes within :data:`REQUEST_TIMEOUT_S` (no hang) and is below 500 — a 504 only
  for a call that carried a deadline (``X-Agentrt-Timeout-Ms``);
* an error answer is the server's JSON error envelope;
* no server wrote an error record or a traceback to its log.

``AGENTRT_FUZZ_EXAMPLES`` is the number of cases per server (default 2000, the CI budget);
``AGENTRT_FUZZ_REPORT=path`` writes the counts (cases, answers by status class) as JSON.
"""

from __future__ import annotations

import json
import os
import string
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote as _quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt import protocol

from .stack import MODEL, Stack, threaded_stack

#: Cases per server (all its fuzz tests together).
EXAMPLES = int(os.environ.get("AGENTRT_FUZZ_EXAMPLES", "2000"))
#: Longest wait for one answer (seconds); more is a hang.
REQUEST_TIMEOUT_S = 15.0

COUNTS: dict[str, Counter[str]] = {"controller": Counter(), "engine": Counter()}


def fuzz(share: float) -> Callable[[Any], Any]:
    """Hypothesis settings for a test that gets ``share`` of its server's cases."""
    return settings(
        max_examples=max(1, round(EXAMPLES * share)),
        deadline=None,
        database=None,  # nothing written into the checkout
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# --- strategies ------------------------------------------------------------------------------

# Any code point, surrogates included (json.dumps writes those as \udXXX escapes).
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=24)
HUGE_INTS = st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -(10**400), 10**400])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | HUGE_INTS
    | st.floats(allow_nan=True, allow_infinity=True)
    | ANY_TEXT
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=16,
)


def mostly(valid: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` about nine times in ten: most requests get past validation to the code
    behind it (``one_of`` with ``valid`` repeated would be deduplicated)."""
    return st.integers(0, 9).flatmap(lambda draw: bad if draw == 9 else valid)


# Small where a large value means a long generation, else anything.
SMALL_OR_BAD = mostly(st.integers(1, 6), st.integers(-3, 0) | HUGE_INTS | JSON)
PLAIN_TEXT = st.text(max_size=40)
ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "x"])
TOOL = st.fixed_dictionaries(
    {"type": mostly(st.just("function"), ANY_TEXT),
     "function": st.fixed_dictionaries(
         {"name": mostly(st.text(string.ascii_letters, min_size=1, max_size=8), ANY_TEXT)},
         optional={"parameters": mostly(st.just({"type": "object"}), JSON)})}
)  # fmt: skip
MESSAGE = st.fixed_dictionaries(
    {"role": mostly(st.sampled_from(["user", "system"]), ROLES),
     "content": mostly(PLAIN_TEXT, ANY_TEXT | st.none() | JSON)},
    optional={
        "name": ANY_TEXT,
        "tool_call_id": ANY_TEXT,
        "tool_calls": st.lists(
            st.fixed_dictionaries(
                {"id": ANY_TEXT, "type": st.just("function"),
                 "function": st.fixed_dictionaries({"name": ANY_TEXT, "arguments": ANY_TEXT})}
            ),
            max_size=2,
        ),
    },
)  # fmt: skip
WEIRD_FLOATS = st.floats(allow_nan=True, allow_infinity=True) | HUGE_INTS | JSON
GENERATION_FIELDS = {
    "max_tokens": SMALL_OR_BAD,
    "max_completion_tokens": SMALL_OR_BAD,
    "n": mostly(st.integers(1, 3), st.integers(-1, 0) | HUGE_INTS | JSON),
    "stream": mostly(st.booleans(), JSON),
    "stream_options": mostly(st.fixed_dictionaries({"include_usage": st.booleans()}), JSON),
    "tools": mostly(st.lists(TOOL, max_size=2), JSON),
    "tool_choice": mostly(st.sampled_from(["none", "auto", "required"]), JSON),
    "priority": mostly(st.just(0), st.integers(-5, 5) | HUGE_INTS),
    "cache_salt": mostly(st.text(min_size=1, max_size=8), ANY_TEXT | JSON),
    "temperature": mostly(st.floats(0, 2), WEIRD_FLOATS),
    "top_p": mostly(st.floats(0.01, 1), WEIRD_FLOATS),
    "seed": st.integers(-(2**63), 2**63 - 1) | HUGE_INTS,
    "stop": ANY_TEXT | st.lists(ANY_TEXT, max_size=3),
    "response_format": st.fixed_dictionaries(
        {"type": mostly(st.sampled_from(["text", "json_object", "json_schema"]), ANY_TEXT)},
        optional={"json_schema": st.fixed_dictionaries({"name": ANY_TEXT, "schema": JSON})},
    ),
    "logprobs": mostly(st.booleans(), st.integers(-1, 3) | JSON),
    "agentrt_output_tokens": SMALL_OR_BAD,
    "agentrt_tool_call": mostly(st.booleans(), JSON),
    "user": mostly(PLAIN_TEXT, JSON),
}


def some_of(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Up to three of ``fields`` (with all of them a body almost never passes validation)."""
    names = st.lists(st.sampled_from(sorted(fields)), max_size=3, unique=True)
    return names.flatmap(lambda chosen: st.fixed_dictionaries({n: fields[n] for n in chosen}))


def merged(
    base: st.SearchStrategy[dict[str, Any]], extra: st.SearchStrategy[dict[str, Any]]
) -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(base, extra).map(lambda parts: {**parts[0], **parts[1]})


MODELS = mostly(st.just(MODEL), st.sampled_from(["other-model", ""]) | ANY_TEXT | JSON)
CHAT = merged(
    st.fixed_dictionaries(
        {"model": MODELS, "messages": mostly(st.lists(MESSAGE, min_size=1, max_size=3), JSON)}
    ),
    some_of(GENERATION_FIELDS),
)
PROMPTS = mostly(
    PLAIN_TEXT,
    ANY_TEXT
    | st.lists(st.integers(-10, 200_000) | HUGE_INTS, max_size=8)
    | st.lists(ANY_TEXT, max_size=3)
    | st.lists(st.lists(st.integers(-10, 200_000), max_size=4), max_size=2)
    | JSON,
)
COMPLETION = merged(
    st.fixed_dictionaries({"model": MODELS, "prompt": PROMPTS}),
    some_of({**GENERATION_FIELDS, "echo": mostly(st.booleans(), JSON)}),
)
TOKENIZE = st.fixed_dictionaries(
    {},
    optional={
        "model": MODELS,
        "prompt": ANY_TEXT | JSON,
        "messages": st.lists(MESSAGE, max_size=3) | JSON,
        "tools": st.lists(TOOL, max_size=2) | JSON,
        "add_special_tokens": st.booleans() | JSON,
        "add_generation_prompt": st.booleans() | JSON,
    },
)
PIN = st.fixed_dictionaries(
    {"pin_id": ANY_TEXT | JSON, "ttl_s": st.floats(allow_nan=True, allow_infinity=True) | JSON},
    optional={
        "prompt": ANY_TEXT | JSON,
        "messages": st.lists(MESSAGE, max_size=2),
        "token_ids": st.lists(st.integers(-10, 200_000) | HUGE_INTS, max_size=8) | JSON,
        "cache_salt": ANY_TEXT | JSON,
        "add_generation_prompt": st.booleans(),
    },
)
_ID_CHARS = string.ascii_letters + string.digits + "._:@/+=-"
WIRE_IDS = st.text(st.sampled_from(_ID_CHARS), min_size=1, max_size=12) | ANY_TEXT
EVENT = st.fixed_dictionaries(
    {},
    optional={
        "session_id": WIRE_IDS | JSON,
        "thread_id": WIRE_IDS | JSON,
        "node_id": WIRE_IDS | JSON,
        "tool_name": ANY_TEXT | JSON,
        "predicted_duration_s": st.floats(allow_nan=True, allow_infinity=True) | HUGE_INTS,
        "duration_s": st.floats(allow_nan=True, allow_infinity=True) | HUGE_INTS,
        "kind": st.sampled_from(["tool", "human", "x"]),
        "status": st.sampled_from(["ok", "error", "cancelled", "x"]),
        "timeout_ms": st.integers(-5, 10**6) | HUGE_INTS | JSON,
        "name": ANY_TEXT,
        "client": ANY_TEXT,
    },
)


def quote(text: str, safe: str = "") -> str:
    """``text`` as a URL path segment; a lone surrogate goes as its 3 UTF-8 bytes."""
    return _quote(text, safe=safe, errors="surrogatepass")


def _serialised(value: Any) -> st.SearchStrategy[bytes]:
    """One value as bytes: escaped JSON, raw UTF-8 (lone surrogates as their 3 bytes)."""
    return st.sampled_from(
        [
            json.dumps(value).encode(),
            json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"),
        ]
    )


def bodies(structured: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """Mostly near-valid bodies, some random JSON, raw bytes and deep nesting."""
    other = st.one_of(
        JSON.flatmap(_serialised),
        st.binary(max_size=64),
        st.integers(60, 3000).map(lambda depth: b"[" * depth + b"]" * depth),
        st.integers(1, 200_000).map(lambda depth: b'{"model":"m","x":' + b"[" * depth),
    )
    return mostly(structured.flatmap(_serialised), other)


HEADER_NAMES = [
    protocol.HEADER_SESSION_ID, protocol.HEADER_PROGRAM_ID, protocol.HEADER_THREAD_ID,
    protocol.HEADER_NODE_ID, protocol.HEADER_PARENT_IDS, protocol.HEADER_ATTEMPT,
    protocol.HEADER_TIMEOUT_MS, protocol.HEADER_OBJECTIVE, protocol.HEADER_TRACEPARENT,
    "Authorization", "X-Request-Id", "OpenAI-Organization", "OpenAI-Project",
    "x-vllm-priority", "x-agentrt-output-tokens",
]  # fmt: skip
# What a client can send in a header value: no control characters, no edge whitespace.
_HEADER_CHARS = st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f")
HEADER_VALUES = st.one_of(
    st.text(_HEADER_CHARS, max_size=40).map(str.strip),
    st.integers(-(10**6), 64).map(str),
    st.integers(1, 500).map(lambda digits: "9" * digits),
    WIRE_IDS.filter(lambda text: text.isascii() and text.isprintable()).map(str.strip),
    st.sampled_from(["latency", "throughput", "0", "-1", "1e3", "a,b,,c", ","]),
)
RANDOM_HEADERS = st.dictionaries(st.sampled_from(HEADER_NAMES), HEADER_VALUES, max_size=6)
SAFE_IDS = st.text(st.sampled_from(_ID_CHARS), min_size=1, max_size=12)
VALID_TAGS = st.fixed_dictionaries(
    {},
    optional={
        protocol.HEADER_PROGRAM_ID: SAFE_IDS,
        protocol.HEADER_SESSION_ID: SAFE_IDS,
        protocol.HEADER_THREAD_ID: SAFE_IDS,
        protocol.HEADER_NODE_ID: SAFE_IDS,
        protocol.HEADER_TIMEOUT_MS: st.integers(1000, 60_000).map(str),
        protocol.HEADER_ATTEMPT: st.integers(1, 3).map(str),
        protocol.HEADER_OBJECTIVE: st.sampled_from(["latency", "throughput"]),
    },
)
HEADERS = mostly(VALID_TAGS, RANDOM_HEADERS)


# --- the property ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with threaded_stack(scrape_interval_s=1.0) as running:
        yield running
    report = os.environ.get("AGENTRT_FUZZ_REPORT")
    if report:
        with open(report, "w", encoding="utf-8") as out:
            json.dump({name: dict(counts) for name, counts in COUNTS.items()}, out, indent=2)


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        yield client


def _encoded(headers: dict[str, str]) -> dict[bytes, bytes]:
    return {name.encode(): value.encode("latin-1") for name, value in headers.items()}


def exchange(
    stack: Stack,
    http: httpx.Client,
    server: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    """Send one request and check the property; count it."""
    base = stack.controller_url if server == "controller" else stack.engine_url
    headers = headers or {}
    stack.logs.clear()
    request = http.build_request(
        method,
        base + path,
        content=body,
        headers={b"content-type": b"application/json", **_encoded(headers)},
    )
    try:
        response = http.send(request, stream=True)
        try:
            raw = response.read()
        finally:
            response.close()
    except httpx.TimeoutException as exc:
        raise AssertionError(f"no answer within {REQUEST_TIMEOUT_S} s: {method} {path}") from exc
    status = response.status_code
    COUNTS[server]["cases"] += 1
    COUNTS[server][f"{status // 100}xx"] += 1
    deadline = any(name.lower() == "x-agentrt-timeout-ms" for name in headers)
    assert status < 500 or (status == 504 and deadline), (status, raw[:500])
    if status >= 400 and status != 404:
        error = json.loads(raw)["error"]
        assert {"message", "type"} <= set(error), raw[:500]
    if status == 200 and response.headers.get("content-type", "").startswith("text/event-stream"):
        assert b"InternalServerError" not in raw and b"server_error" not in raw, raw[-500:]
    assert b"Traceback" not in raw
    assert stack.logs.tracebacks() == []


SERVERS = pytest.mark.parametrize("server", ["controller", "engine"])


@SERVERS
@fuzz(0.35)
@given(body=bodies(CHAT), headers=HEADERS)
def test_chat_completions(
    stack: Stack, http: httpx.Client, server: str, body: bytes, headers: dict[str, str]
) -> None:
    exchange(stack, http, server, "POST", "/v1/chat/completions", body, headers)


@SERVERS
@fuzz(0.25)
@given(body=bodies(COMPLETION), headers=HEADERS)
def test_completions(
    stack: Stack, http: httpx.Client, server: str, body: bytes, headers: dict[str, str]
) -> None:
    exchange(stack, http, server, "POST", "/v1/completions", body, headers)


_KINDS = st.sampled_from(["start", "end", "tool-start", "tool-end", "bogus"])


@fuzz(0.3)
@given(
    program_id=WIRE_IDS,
    encode=st.booleans(),
    kind=_KINDS,
    body=bodies(EVENT),
    headers=HEADERS,
)
def test_controller_program_events(
    stack: Stack,
    http: httpx.Client,
    program_id: str,
    encode: bool,
    kind: str,
    body: bytes,
    headers: dict[str, str],
) -> None:
    segment = quote(program_id, "" if encode else "/:@+=")
    path = f"{protocol.EVENTS_PREFIX}/programs/{segment}/{kind}"
    exchange(stack, http, "controller", "POST", path, body, headers)


@fuzz(0.1)
@given(
    action=st.sampled_from(["open", "close", "programs", "queues"]),
    value=WIRE_IDS | st.integers().map(str) | HUGE_INTS.map(str),
    body=bodies(EVENT),
)
def test_controller_sessions_and_introspection(
    stack: Stack, http: httpx.Client, action: str, value: str, body: bytes
) -> None:
    prefix = protocol.EVENTS_PREFIX
    if action == "open":
        exchange(stack, http, "controller", "POST", prefix + "/sessions", body)
    elif action == "close":
        exchange(stack, http, "controller", "DELETE", f"{prefix}/sessions/{quote(value)}")
    else:
        query = f"?limit={quote(value)}" if action == "programs" else ""
        exchange(stack, http, "controller", "GET", f"{prefix}/{action}{query}")


@fuzz(0.3)
@given(body=bodies(TOKENIZE), headers=HEADERS)
def test_engine_tokenize(
    stack: Stack, http: httpx.Client, body: bytes, headers: dict[str, str]
) -> None:
    exchange(stack, http, "engine", "POST", "/tokenize", body, headers)


@fuzz(0.1)
@given(body=bodies(PIN), pin_id=WIRE_IDS, delete=st.booleans())
def test_engine_pins(
    stack: Stack, http: httpx.Client, body: bytes, pin_id: str, delete: bool
) -> None:
    path = "/agentrt/engine/v1/pins"
    if delete:
        exchange(stack, http, "engine", "DELETE", f"{path}/{quote(pin_id)}")
    else:
        exchange(stack, http, "engine", "POST", path, body)
