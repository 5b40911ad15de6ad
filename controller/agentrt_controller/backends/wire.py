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


def encode_body(request: BackendRequest, extra: Mapping[str, object]) -> bytes:
    """The request body with ``extra`` top-level fields set.

    Fast path: when only new keys are added to a body that does not have them, splice them
    before the closing brace instead of re-serialising the prompt (a large body costs
    milliseconds to dump).
    """
    if not extra and not request.add_stream_usage:
        return request.raw_body
    if request.add_stream_usage or any(key in request.body for key in extra):
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
    raw = request.raw_body.rstrip()
    inner = raw[:-1].rstrip()  # a parsed JSON object's bytes end with "}"
    added = ",".join(
        f"{json.dumps(key)}:{json.dumps(value, separators=(',', ':'))}"
        for key, value in extra.items()
    ).encode()
    return inner + (b"" if inner.endswith(b"{") else b",") + added + b"}"


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
