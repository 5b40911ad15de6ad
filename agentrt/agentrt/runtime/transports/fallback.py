"""``FallbackTransport``: requests for the primary endpoint go to the fallback one while the
primary is unreachable (``RuntimeConfig.fallback_base_url``).

A connection failure (refused, or timed out while connecting) sends that request to the
fallback and keeps later ones there for ``hold_s`` seconds; then the primary is tried again.
Requests for other URLs pass through untouched.
"""

from __future__ import annotations

import math

import anyio
import httpx

__all__ = ["FallbackTransport"]


class FallbackTransport(httpx.AsyncBaseTransport):
    """Routes to ``fallback_base_url`` (with its own key) while ``base_url`` is down."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        *,
        base_url: str,
        fallback_base_url: str,
        fallback_api_key: str,
        hold_s: float,
    ) -> None:
        """``hold_s``: seconds calls stay on the fallback after a connection failure."""
        self.inner = inner
        self._primary = base_url.rstrip("/")
        self._fallback = fallback_base_url.rstrip("/")
        self._fallback_auth = f"Bearer {fallback_api_key}"
        self._hold_s = hold_s
        #: Calls go to the fallback until this time (anyio clock, seconds).
        self.primary_down_until_s = -math.inf

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        inner = self.inner
        if not str(request.url).startswith(self._primary):
            return await inner.handle_async_request(request)
        if anyio.current_time() < self.primary_down_until_s:
            return await inner.handle_async_request(self._to_fallback(request))
        try:
            return await inner.handle_async_request(request)
        except (httpx.ConnectError, httpx.ConnectTimeout):
            self.use_fallback_now()
            return await inner.handle_async_request(self._to_fallback(request))

    def use_fallback_now(self) -> None:
        """Send calls to the fallback endpoint for the next ``hold_s`` seconds."""
        self.primary_down_until_s = anyio.current_time() + self._hold_s

    def _to_fallback(self, request: httpx.Request) -> httpx.Request:
        url = httpx.URL(self._fallback + str(request.url)[len(self._primary) :])
        headers = httpx.Headers(request.headers)
        del headers["host"]
        headers["authorization"] = self._fallback_auth
        return httpx.Request(
            request.method,
            url,
            headers=headers,
            content=request.content,
            extensions=request.extensions,
        )

    async def aclose(self) -> None:
        """No-op: the runtime owns and closes the connection pools."""
