"""OpenAI-compatible HTTP backends over one shared ``httpx.AsyncClient``.

Two kinds now: ``vllm`` (scrapes ``/metrics``, health on ``/health``, writes the scheduler's
priority as vLLM's ``priority`` body field — lower runs first) and ``openai`` (any compatible
server: no metrics, health on ``/v1/models``). Other kinds subclass :class:`HttpBackend` and
override :meth:`HttpBackend.encode_priority`, :meth:`HttpBackend.load_from_metrics` or
:attr:`HttpBackend.health_path`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

import httpx

from controller.backends.api import (
    BackendCapabilities,
    BackendError,
    BackendLoad,
    BackendRequest,
    BackendUnavailable,
)
from controller.backends.prometheus_text import sum_samples
from controller.backends.transport import HttpPool

__all__ = ["HttpBackend", "OpenAIBackend", "VllmBackend", "encode_body"]

# Failures that happen before any byte of a response arrived: a retry elsewhere is safe.
_NOTHING_RECEIVED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_BROKEN_BEFORE_STATUS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def encode_body(request: BackendRequest, extra: Mapping[str, Any]) -> bytes:
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
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    raw = request.raw_body.rstrip()
    inner = raw[:-1].rstrip()  # a parsed JSON object's bytes end with "}"
    added = ",".join(
        f"{json.dumps(key)}:{json.dumps(value, separators=(',', ':'))}"
        for key, value in extra.items()
    ).encode()
    return inner + (b"" if inner.endswith(b"{") else b",") + added + b"}"


class _HttpxResponse:
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
            raise BackendError(f"backend broke off its answer: {exc!r}") from exc
        finally:
            await self._response.aclose()

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_bytes():
                yield chunk
        except httpx.HTTPError as exc:
            raise BackendError(f"backend broke off its stream: {exc!r}") from exc

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpBackend:
    """An OpenAI-compatible server reached over HTTP. Does not own ``http``."""

    KIND: ClassVar[str] = "openai"
    #: GET path whose 200 means healthy.
    health_path: ClassVar[str] = "/v1/models"

    def __init__(
        self,
        backend_id: str,
        url: str,
        http: HttpPool,
        *,
        send_priority: bool = False,
        probe_timeout_s: float = 2.0,
    ) -> None:
        self.backend_id = backend_id
        self.kind: str = self.KIND
        self.url = url.rstrip("/")
        self._client = http.client
        self._transport = http.transport
        self._extensions = {"timeout": http.timeout.as_dict()}
        self._probe_timeout = httpx.Timeout(probe_timeout_s)
        self._urls: dict[str, httpx.URL] = {}  # parsed once per path: URL parsing is not free
        self.capabilities = self._capabilities(send_priority)

    def _capabilities(self, send_priority: bool) -> BackendCapabilities:
        # A generic server may not know stream_options: leave stream bodies as the client sent.
        return BackendCapabilities(
            supports_priority=send_priority, scrapes_metrics=False, stream_usage=False
        )

    def encode_priority(self, priority: int) -> dict[str, Any]:
        """Body fields carrying the scheduler's ``priority`` (lower = sooner)."""
        return {"priority": priority}

    def load_from_metrics(self, text: str) -> BackendLoad:
        """Load figures from the server's Prometheus text; unknown ones stay ``None``."""
        return BackendLoad()

    async def send(self, request: BackendRequest) -> _HttpxResponse:
        extra: dict[str, Any] = {}
        if request.priority is not None and self.capabilities.supports_priority:
            extra = self.encode_priority(request.priority)
        body = encode_body(request, extra)
        headers = {**request.headers, "content-type": "application/json"}
        url = self._urls.get(request.path)
        if url is None:
            url = self._urls[request.path] = httpx.URL(self.url + request.path)
        http_request = httpx.Request(
            "POST", url, content=body, headers=headers, extensions=self._extensions
        )
        try:
            response = await self._transport.handle_async_request(http_request)
        except _NOTHING_RECEIVED as exc:
            raise BackendUnavailable(
                f"backend {self.backend_id} unreachable: {exc!r}", connect_failed=True
            ) from exc
        except _BROKEN_BEFORE_STATUS as exc:
            raise BackendUnavailable(
                f"backend {self.backend_id} closed before answering: {exc!r}",
                connect_failed=False,
            ) from exc
        except httpx.HTTPError as exc:
            raise BackendError(f"backend {self.backend_id} failed: {exc!r}") from exc
        return _HttpxResponse(response)

    async def _get(self, path: str) -> httpx.Response:
        try:
            return await self._client.get(self.url + path, timeout=self._probe_timeout)
        except (*_NOTHING_RECEIVED, *_BROKEN_BEFORE_STATUS) as exc:
            raise BackendUnavailable(
                f"backend {self.backend_id} unreachable: {exc!r}", connect_failed=True
            ) from exc
        except httpx.HTTPError as exc:
            raise BackendError(f"backend {self.backend_id} failed: {exc!r}") from exc

    async def scrape(self) -> BackendLoad:
        if not self.capabilities.scrapes_metrics:
            return BackendLoad()
        response = await self._get("/metrics")
        if response.status_code != 200:
            return BackendLoad()
        try:
            text = response.text
        except (UnicodeDecodeError, LookupError):
            return BackendLoad()
        return self.load_from_metrics(text)

    async def health(self) -> bool:
        try:
            response = await self._get(self.health_path)
        except BackendError:
            return False
        return response.status_code == 200

    async def models(self) -> list[dict[str, Any]]:
        response = await self._get("/v1/models")
        try:
            data = response.json()["data"]
        except (ValueError, KeyError, TypeError) as exc:
            raise BackendError(f"backend {self.backend_id} sent a malformed model list") from exc
        if response.status_code != 200 or not isinstance(data, list):
            raise BackendError(f"backend {self.backend_id} model list: HTTP {response.status_code}")
        return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

    async def aclose(self) -> None:
        return None


class OpenAIBackend(HttpBackend):
    """Any OpenAI-compatible server: no metrics; priority only when explicitly enabled."""

    KIND: ClassVar[str] = "openai"


_VLLM_METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",  # name before vLLM 0.10
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
)


def _count(value: float | None) -> int | None:
    return None if value is None or value < 0 else round(value)


class VllmBackend(HttpBackend):
    """vLLM's OpenAI server (and servers exposing vLLM's metric names, like our emulator)."""

    KIND: ClassVar[str] = "vllm"
    health_path: ClassVar[str] = "/health"

    def _capabilities(self, send_priority: bool) -> BackendCapabilities:
        return BackendCapabilities(supports_priority=send_priority, scrapes_metrics=True)

    def load_from_metrics(self, text: str) -> BackendLoad:
        found = sum_samples(text, _VLLM_METRICS)
        usage = found.get("vllm:kv_cache_usage_perc", found.get("vllm:gpu_cache_usage_perc"))
        if usage is not None and not 0.0 <= usage <= 1.0:
            usage = None
        return BackendLoad(
            num_running=_count(found.get("vllm:num_requests_running")),
            num_waiting=_count(found.get("vllm:num_requests_waiting")),
            kv_cache_usage=usage,
            prefix_cache_queries=found.get("vllm:prefix_cache_queries_total"),
            prefix_cache_hits=found.get("vllm:prefix_cache_hits_total"),
        )
