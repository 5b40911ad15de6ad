"""Wire helpers shared by the HTTP backend kinds: body encoding, httpx error mapping, the
response adapter and JSON side-request answers. Private to :mod:`agentrt_controller.backends`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping

import httpx

from agentrt_controller.backends.api import BackendDisconnected, BackendError, BackendRequest

__all__ = [
    "BROKEN_BEFORE_STATUS",
    "NOTHING_RECEIVED",
    "HttpxResponse",
    "broken",
    "encode_body",
    "json_answer",
]

# Failures that happen before any byte of a response arrived: a retry elsewhere is safe.
NOTHING_RECEIVED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
BROKEN_BEFORE_STATUS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
# Failures of an answer already under way that mean the connection died (not a timeout).
_CONNECTION_LOST = (httpx.RemoteProtocolError, httpx.NetworkError)


#: JSON's whitespace bytes, and "{".
_JSON_SPACE = b" \t\n\r"
_OPEN_BRACE = ord("{")


def encode_body(request: BackendRequest, extra: Mapping[str, object]) -> bytes:
    """The request body with ``extra`` top-level fields set, and with
    ``stream_options.include_usage`` true when :attr:`BackendRequest.add_stream_usage`.

    Fast path: when only new keys are added to a body that does not have them (``extra``'s,
    and ``stream_options`` when the body has none), splice them before the closing brace
    instead of re-serialising the prompt (a large body costs milliseconds to dump): one copy
    of the body's bytes. A body that has one of the keys already is encoded again.
    """
    add_usage = request.add_stream_usage
    if not extra and not add_usage:
        return request.raw_body
    body = request.body
    if any(key in body for key in extra) or (add_usage and "stream_options" in body):
        return _encode_with(request, extra)
    raw = request.raw_body
    if (raw[:1] != b"{" and not raw.lstrip(_JSON_SPACE).startswith(b"{")) or b"\x00" in raw[:4]:
        return _encode_with(request, extra)  # a byte-order mark, or UTF-16 / UTF-32
    fields = [
        f"{json.dumps(key)}:{json.dumps(value, separators=(',', ':'))}"
        for key, value in extra.items()
    ]
    if add_usage:
        fields.append('"stream_options":{"include_usage":true}')
    # A parsed JSON object's bytes end with "}" and maybe whitespace; the fields go after its
    # last member (the whitespace before the brace dropped), with a comma unless it is empty.
    last = raw.rindex(b"}") - 1
    while last >= 0 and raw[last] in _JSON_SPACE:
        last -= 1
    separator = b"" if raw[last] == _OPEN_BRACE else b","
    return b"".join((memoryview(raw)[: last + 1], separator, ",".join(fields).encode(), b"}"))


def _encode_with(request: BackendRequest, extra: Mapping[str, object]) -> bytes:
    """The body encoded again with ``extra`` set (and ``stream_options.include_usage`` true
    when :attr:`BackendRequest.add_stream_usage`, the body's other options kept)."""
    body = dict(request.body)
    body.update(extra)
    if request.add_stream_usage:
        options = body.get("stream_options")
        body["stream_options"] = {
            **(options if isinstance(options, dict) else {}),
            "include_usage": True,
        }
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate: only the \uXXXX escape can carry it
        return json.dumps(body, separators=(",", ":")).encode()


class HttpxResponse:
    """Adapts an ``httpx.Response`` opened with ``stream=True`` to the backend seam."""

    __slots__ = ("_response", "headers", "status_code")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status_code = response.status_code
        self.headers: Mapping[str, str] = response.headers

    async def aread(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.HTTPError as exc:
            raise broken(exc, "answer") from exc
        finally:
            await self._response.aclose()

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_bytes():
                yield chunk
        except httpx.HTTPError as exc:
            raise broken(exc, "stream") from exc

    async def aclose(self) -> None:
        await self._response.aclose()


def broken(exc: httpx.HTTPError, what: str) -> BackendError:
    """The seam's error for ``exc``, raised while reading an answer's body (``what``):
    :class:`BackendDisconnected` when the connection died, else :class:`BackendError`."""
    if isinstance(exc, _CONNECTION_LOST) and not isinstance(exc, httpx.TimeoutException):
        return BackendDisconnected(f"backend connection lost during its {what}: {exc!r}")
    return BackendError(f"backend broke off its {what}: {exc!r}")


def json_answer(backend_id: str, path: str, response: httpx.Response) -> object:
    if not 200 <= response.status_code < 300:
        message = _error_message(response)
        raise BackendError(
            f"backend {backend_id} {path}: HTTP {response.status_code}: {message}",
            status_code=response.status_code,
        )
    try:
        return response.json()
    except ValueError as exc:
        raise BackendError(f"backend {backend_id} {path}: answer is not JSON") from exc


def _error_message(response: httpx.Response) -> str:
    """The server's error message (OpenAI envelope, FastAPI ``detail``, or text), short."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])[:200]
        for key in ("message", "detail", "error"):
            if isinstance(data.get(key), str):
                return str(data[key])[:200]
    return json.dumps(data)[:200]
