"""The hardened HTTP surface's ASGI guard: limits and input checks in front of a server's
application, and a catch-all that answers any unhandled exception with a 500 in the server's own
error envelope (docs/security.md, "Hardened HTTP surface").

:class:`HardenedApp` — ASGI middleware, per request::

      headers over max_header_bytes ──► 431
      checked headers (non-ASCII, over-long integers) ──► 400
      body: declared or streamed length over the limit ──► 413, too slow ──► 408
      JSON body: lone surrogate, nesting deeper than max_json_depth, integer of 2**63 or
                 more in magnitude, non-finite number ──► 400
      the app raises ──► 500 (logged once at error level, counted per route)

Every answer it makes itself is shaped by the server's ``error_body`` builder (the controller:
OpenAI's envelope; the emulator: vLLM's). The body checks cost one orjson parse and a walk of
the body's containers in the common case (orjson refuses lone surrogates itself); a body orjson
refuses or might read differently is parsed again the exact way: one parse and a few byte scans,
the parsed body walked only when a scan finds something that could break a rule (its containers
only, unless a scan finds a possible surrogate); bodies over ``thread_bytes`` are checked in a
worker thread so a large body does not stall the event loop.
The parsed value is left in the request's scope (:func:`checked_json`), so the application
reads it instead of parsing the body a second time. The request-head timeout and the
connection limit are uvicorn's part (:mod:`agentrt_serving.uvicorn_server`).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.to_thread
import orjson

from agentrt_serving.asgi import App, Message, Receive, Scope, Send

__all__ = [
    "INTERNAL_ERROR_MESSAGE",
    "MAX_INT_MAGNITUDE",
    "NOT_JSON",
    "BadInput",
    "ErrorBody",
    "HardenedApp",
    "HttpLimits",
    "ServerLimits",
    "check_headers",
    "check_json_body",
    "checked_json",
]

_log = logging.getLogger(__name__)

#: Largest integer magnitude accepted anywhere in a JSON body or a numeric header: int64.
MAX_INT_MAGNITUDE = 2**63 - 1
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Byte patterns of a lone surrogate's two spellings: escaped (a valid pair is fine, a lone one
# is not) and UTF-8-encoded (json.loads lets it through). Separate patterns: a literal prefix
# makes each search fast (a few GB/s), an alternation would not.
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_ENCODED_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_INTEGER = re.compile(r"\s*[+-]?\d+\s*")
#: The scope key under which :class:`HardenedApp` leaves ``(body, parsed value)``.
_SCOPE_KEY = "agentrt.checked_json"


class _NotJson:
    def __repr__(self) -> str:
        return "NOT_JSON"


#: What :func:`check_json_body` returns for a body that is not JSON (``None`` is JSON's null).
NOT_JSON: Any = _NotJson()


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """Limits of one HTTP server (both servers use the same defaults)."""

    #: Largest request body, bytes: 413 as soon as the declared or read length passes it.
    max_body_bytes: int = 16 * 1024 * 1024
    #: Largest request head (request line + headers), bytes (431 beyond).
    max_header_bytes: int = 64 * 1024
    #: Seconds a connection has to deliver a complete request head; idle keep-alive
    #: connections are closed after the same time.
    header_timeout_s: float = 10.0
    #: Seconds a client has to deliver a whole request body (408 after).
    body_timeout_s: float = 60.0
    #: Connections + requests served at once (uvicorn's ``limit_concurrency``; 503 beyond).
    max_concurrency: int = 4096
    #: Deepest nesting of arrays / objects in a JSON body.
    max_json_depth: int = 64
    #: Bodies at least this large (bytes) are checked in a worker thread.
    thread_bytes: int = 1024 * 1024

    @classmethod
    def from_config(cls, config: ServerLimits) -> HttpLimits:
        """The limits a server's config sets (the rest are the defaults above)."""
        return cls(
            max_body_bytes=config.max_body_bytes,
            max_header_bytes=config.max_header_bytes,
            header_timeout_s=config.header_timeout_s,
            max_concurrency=config.max_concurrency,
        )


class ServerLimits(Protocol):
    """The HTTP limits a server's config sets (the controller's and the emulator's do)."""

    @property
    def max_body_bytes(self) -> int: ...
    @property
    def max_header_bytes(self) -> int: ...
    @property
    def header_timeout_s(self) -> float: ...
    @property
    def max_concurrency(self) -> int: ...


class BadInput(Exception):
    """A request the middleware refuses: ``status`` (400, 408, 413, 431), a message and the
    offending ``param`` (header name or JSON path), if any."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


def check_headers(
    headers: Iterable[tuple[bytes, bytes]],
    ascii_only: Callable[[str], bool],
    numeric: frozenset[str],
) -> None:
    """Raise :class:`BadInput` (400) for a header named by ``ascii_only`` whose value is not
    ASCII, or a ``numeric`` header holding an integer beyond int64 (names lower-case)."""
    for raw_name, raw_value in headers:
        if raw_value.isascii():  # the common case: only a numeric header has more to check
            if not numeric:
                continue
            name = raw_name.decode("latin-1").lower()
            if name not in numeric or not ascii_only(name):
                continue
            value = raw_value.decode("ascii")
            if _INTEGER.fullmatch(value) and abs(int(value)) > MAX_INT_MAGNITUDE:
                raise BadInput(400, f"header {name} is out of range (|n| < 2**63)", param=name)
            continue
        name = raw_name.decode("latin-1").lower()
        if ascii_only(name):
            raise BadInput(400, f"header {name} must be ASCII", param=name)


def check_json_body(body: bytes, max_depth: int) -> Any:
    """The JSON value of ``body`` (the same value as ``json.loads``), or :data:`NOT_JSON` for
    a body that is not JSON at all (it passes: the endpoint answers that in its own words).
    Raise :class:`BadInput` (400) if the body holds a lone surrogate, nests deeper than
    ``max_depth``, holds an integer beyond int64 or a non-finite number.

    Parsed by orjson first (:func:`_fast_json`: no surrogate can pass it, its containers are
    walked for depth and numbers); what it refuses or might read differently takes the exact
    way: numbers are checked while parsing (json's hooks run for numbers only); the parsed body
    is walked only when a byte scan finds a possible surrogate (every string is checked) or
    more brackets than ``max_depth`` (only its containers are visited).
    """
    fast = _fast_json(body, max_depth)
    if fast is not _EXACT:
        return fast
    try:
        value = json.loads(
            body, parse_int=_checked_int, parse_float=_checked_float, parse_constant=_no_constant
        )
    except RecursionError:
        raise BadInput(400, f"JSON nested deeper than {max_depth} levels") from None
    except ValueError:
        return NOT_JSON
    if (
        _ESCAPED_SURROGATE.search(body)
        or (b"\xed" in body and _ENCODED_SURROGATE.search(body))
        or not _utf8(body)
    ):
        _walk(value, max_depth)
    elif _more_brackets(body, max_depth):
        _check_depth(value, max_depth)
    return value


#: :func:`_fast_json`'s "take the exact way".
_EXACT: Any = object()
#: Floats at least this large may be integers orjson read past 64 bits (it makes them floats).
_INT_AS_FLOAT = float(2**63)


def _fast_json(body: bytes, max_depth: int) -> Any:
    """``body``'s value when orjson parses it and it surely breaks no rule, else ``_EXACT``.

    orjson refuses all :func:`check_json_body` refuses in parsing and more (lone surrogates in
    either spelling, ``NaN`` / ``Infinity``, numbers beyond a double, UTF-16 / UTF-32 bodies,
    a byte-order mark) and otherwise gives ``json.loads``' value — but for an integer beyond
    64 bits, which it reads as a float. So the containers are walked (a few hundred items for
    a long chat: a fraction of the parse) for depth, integers beyond int64 and floats that may
    have been such integers; any of those, like anything orjson refuses, goes the exact way
    (which answers it in its own words)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _EXACT
    level: list[Any] = [[value]]
    depth = -1
    while level:
        depth += 1
        if depth > max_depth:
            return _EXACT
        deeper: list[Any] = []
        for container in level:
            for item in container.values() if type(container) is dict else container:
                kind = type(item)
                if kind is str:  # most items (a chat's texts): one test, not four
                    continue
                if kind is dict or kind is list:
                    deeper.append(item)
                elif kind is int:
                    if not -MAX_INT_MAGNITUDE <= item <= MAX_INT_MAGNITUDE:
                        return _EXACT
                elif kind is float and not -_INT_AS_FLOAT < item < _INT_AS_FLOAT:
                    return _EXACT
        level = deeper
    return value


def checked_json(scope: Scope, body: bytes) -> Any:
    """The value :class:`HardenedApp` parsed from ``body`` (this very bytes object, as its
    replayed receive handed it on) for the request of ``scope``, or :data:`NOT_JSON` when it
    did not parse these bytes (no guard in front, or a body that is not JSON)."""
    checked = scope.get(_SCOPE_KEY)
    if checked is not None and checked[0] is body:
        return checked[1]
    return NOT_JSON


def _more_brackets(body: bytes, limit: int) -> bool:
    """Whether ``body`` holds more than ``limit`` opening brackets (``find`` is a memchr:
    several times faster than ``count``, and it stops at ``limit``)."""
    seen = 0
    for bracket in (b"[", b"{"):
        at = body.find(bracket)
        while at >= 0:
            seen += 1
            if seen > limit:
                return True
            at = body.find(bracket, at + 1)
    return False


def _utf8(body: bytes) -> bool:
    """Whether json.loads reads ``body`` as UTF-8 (its other encodings, UTF-16 and UTF-32,
    start with a byte-order mark or hold a zero byte among the first four)."""
    return not (body.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in body[:4])


def _checked_int(text: str) -> int:
    value = int(text)
    if len(text) > 18 and abs(value) > MAX_INT_MAGNITUDE:
        raise BadInput(400, f"integer out of range (|n| < 2**63): {text[:24]}...")
    return value


def _checked_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadInput(400, f"number out of range: {text[:24]}")
    return value


def _no_constant(text: str) -> float:
    raise BadInput(400, f"{text} is not a JSON number")


def _walk(root: Any, max_depth: int) -> None:
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(root, 0, ())]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and _SURROGATE.search(value):
                raise BadInput(400, "string holds a lone UTF-16 surrogate", _param(path))
        elif isinstance(value, dict | list):
            if depth >= max_depth:
                raise BadInput(400, f"JSON nested deeper than {max_depth} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and not key.isascii() and _SURROGATE.search(key):
                    raise BadInput(400, "key holds a lone UTF-16 surrogate", _param(path))
                stack.append((item, depth + 1, (*path, key)))


def _check_depth(root: Any, max_depth: int) -> None:
    """:func:`_walk`'s depth rule alone (for a body without surrogates): containers only."""
    if not isinstance(root, dict | list):
        return
    level: list[Any] = [root]
    depth = 0
    while level:
        deeper: list[Any] = []
        for value in level:
            items = value.values() if isinstance(value, dict) else value
            deeper.extend(item for item in items if isinstance(item, dict | list))
        if not deeper:
            return
        depth += 1
        if depth >= max_depth:
            raise BadInput(400, f"JSON nested deeper than {max_depth} levels")
        level = deeper


def _param(path: tuple[str | int, ...]) -> str | None:
    return ".".join(str(part) for part in path) or None


#: ``error_body(status, message, param)`` — the server's error envelope as bytes.
ErrorBody = Callable[[int, str, str | None], bytes]
#: What a 500 says (the details are in the server's log, never in the answer).
INTERNAL_ERROR_MESSAGE = "internal server error (see the server log)"


class HardenedApp:
    """ASGI middleware in front of ``app`` (see the module docstring).

    ``ascii_only(name)`` says which headers must be ASCII (those the server forwards or
    parses); ``numeric`` names integer headers; ``error_body`` shapes every answer made here;
    ``on_internal_error(route)`` counts a crash; ``route_of(scope)`` names a route with a
    bounded set of labels (a template, never a raw path); ``logger`` receives the one error
    record per crash (default: this module's).
    """

    def __init__(
        self,
        app: App,
        *,
        limits: HttpLimits,
        ascii_only: Callable[[str], bool],
        numeric: frozenset[str],
        error_body: ErrorBody,
        on_internal_error: Callable[[str], None],
        route_of: Callable[[Scope], str],
        logger: logging.Logger | None = None,
    ) -> None:
        self.app = app
        self.limits = limits
        self._ascii_only = ascii_only
        self._numeric = numeric
        self._error_body = error_body
        self._on_internal_error = on_internal_error
        self._route_of = route_of
        self._log = logger or _log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            try:
                self.check_head(scope["headers"])
                if scope["method"] in _BODY_METHODS:
                    receive = await self._checked_body(scope, receive)
            except BadInput as bad:
                await self._answer(send, bad)
                return
            await self.app(scope, receive, tracked_send)
        except Exception as exc:  # the catch-all: anything the app did not answer itself
            self.crashed(scope.get("method"), self._route_of(scope), exc)
            if not started:  # else a framework answered (Starlette: with its handler) and re-raised
                await self._answer(send, BadInput(500, INTERNAL_ERROR_MESSAGE))

    # --- the checks, also for a server's direct routes (agentrt_serving.direct) -------------

    def check_head(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Raise :class:`BadInput`: 431 for headers over ``max_header_bytes`` (the server
        protocol enforces its limit only on a head still incomplete; one that arrived in a
        single read is measured here), 400 for a header :func:`check_headers` refuses."""
        # (name, value) pairs flattened: the lengths summed without a Python frame per header.
        head_bytes = sum(map(len, itertools.chain.from_iterable(headers))) + 4 * len(headers)
        if head_bytes > self.limits.max_header_bytes:
            raise BadInput(431, f"request headers over {self.limits.max_header_bytes} bytes")
        check_headers(headers, self._ascii_only, self._numeric)

    async def checked_value(self, body: bytes) -> Any:
        """:func:`check_json_body` of ``body`` under the limits (in a worker thread from
        ``thread_bytes`` on); raises :class:`BadInput` 400."""
        if len(body) >= self.limits.thread_bytes:
            return await anyio.to_thread.run_sync(check_json_body, body, self.limits.max_json_depth)
        return check_json_body(body, self.limits.max_json_depth)

    def refusal(self, bad: BadInput) -> tuple[list[tuple[bytes, bytes]], bytes]:
        """The headers (without ``content-length``) and body answering ``bad`` (its status)
        in the server's envelope; 408 and 413 close the connection (the rest of the body is
        not read)."""
        body = self._error_body(bad.status, bad.message, bad.param)
        headers = [(b"content-type", b"application/json")]
        if bad.status in (408, 413):
            headers.append((b"connection", b"close"))
        return headers, body

    def crashed(self, method: object, route: str, exc: BaseException) -> None:
        """Log an unhandled error once, at error level (the request body is never logged: it
        holds prompts), and count it for ``route``."""
        self._log.error("unhandled %s answering %s %s", type(exc).__name__, method, route,
                        exc_info=exc)  # fmt: skip
        self._on_internal_error(route)

    async def _checked_body(self, scope: Scope, receive: Receive) -> Receive:
        """Read the whole body under the limits and check it; a receive that replays it."""
        limit = self.limits.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                raise BadInput(413, f"request body over {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        more = True
        disconnected: Message | None = None
        with anyio.move_on_after(self.limits.body_timeout_s) as timer:
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    disconnected = message
                    break
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise BadInput(413, f"request body over {limit} bytes")
                chunks.append(chunk)
                more = message.get("more_body", False)
        if timer.cancelled_caught:
            raise BadInput(408, f"request body not received within {self.limits.body_timeout_s} s")
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if disconnected is None and body:
            value = await self.checked_value(body)
            if value is not NOT_JSON:  # the application reads it: one parse per request
                scope[_SCOPE_KEY] = (body, value)
        return _replay(body, receive, disconnected)

    async def _answer(self, send: Send, bad: BadInput) -> None:
        headers, body = self.refusal(bad)
        headers.append((b"content-length", b"%d" % len(body)))
        await send({"type": "http.response.start", "status": bad.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Receive, disconnected: Message | None) -> Receive:
    """A receive that first returns ``body`` whole, then defers to ``receive`` (which reports
    the disconnect); a client that left while sending is reported gone at once."""
    pending: Message | None = disconnected or {
        "type": "http.request",
        "body": body,
        "more_body": False,
    }

    async def replayed() -> Message:
        nonlocal pending
        if pending is not None:
            message, pending = pending, None
            return message
        return await receive()

    return replayed
