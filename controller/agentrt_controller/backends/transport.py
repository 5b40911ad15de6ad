"""An httpx transport that spreads requests over several connection pools.

httpcore's connection pool does work proportional to its number of connections for every
request it handles — it checks each idle connection for expiry (a ``poll`` system call per
connection) and counts idle connections in a nested loop — so one pool holding the 32+
keep-alive connections of a busy controller costs more per request than the request itself.
Several smaller pools, used round-robin, keep that cost flat (measured: ~1.3 ms → ~0.5 ms of CPU
per request at 32 concurrent requests; docs/benchmarks.md, "Controller overhead").
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import httpx

from agentrt.errors import ConfigError
from agentrt.fasthttp import FastHTTPTransport
from agentrt_controller.backends.wire import broken

__all__ = ["HttpPool", "RoundRobinPoolTransport"]


class RoundRobinPoolTransport(httpx.AsyncBaseTransport):
    """``shards`` independent :class:`httpx.AsyncHTTPTransport` pools, used in turn (round
    robin, whatever the request: unlike the SDK's ``ShardedTransport``, which keeps a
    program's calls on one pool behind an admission gate).

    ``max_connections`` is the total over all shards (each gets an equal share, at least 1).
    Requests are not retried by the transport: the controller decides about retries.
    """

    def __init__(self, shards: int = 8, max_connections: int = 1024) -> None:
        if shards < 1 or max_connections < 1:
            raise ConfigError("the HTTP transport needs shards >= 1 and max_connections >= 1")
        per_shard = max(1, max_connections // shards)
        limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard)
        self._pools = [httpx.AsyncHTTPTransport(limits=limits, retries=0) for _ in range(shards)]
        self._turn = itertools.cycle(self._pools)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await next(self._turn).handle_async_request(request)

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


@dataclass(frozen=True, slots=True)
class HttpPool:
    """The controller's HTTP resources towards all backends (owned by the app, shared).

    Generation requests go straight to :attr:`transport`, not through the client: a proxy must
    not carry cookies from one user's answer into the next user's request, never follows
    redirects and has no auth of its own — and skipping those layers saves ~20 % of httpx's
    per-request CPU. Probes (health, metrics, models) use :attr:`client`.
    """

    client: httpx.AsyncClient
    transport: httpx.AsyncBaseTransport
    #: Timeout applied to generation requests (read = the backend's longest silence).
    timeout: httpx.Timeout
    #: Timeout applied to streamed generation requests: read = the longest silence of a
    #: stream before it counts as stalled (``stall_s``, when shorter than the read timeout).
    stream_timeout: httpx.Timeout

    @classmethod
    def create(
        cls,
        *,
        read_timeout_s: float | None = 600.0,
        stall_s: float | None = None,
        connect_timeout_s: float = 5.0,
        kind: str = "fast",
        shards: int = 8,
        max_connections: int = 1024,
    ) -> HttpPool:
        """``kind``: ``fast`` (:class:`~agentrt.fasthttp.FastHTTPTransport`; its answers' body
        errors are the seam's, :func:`~agentrt_controller.backends.wire.broken`) or ``httpx``
        (httpx's own transport, in ``shards`` pools: :class:`RoundRobinPoolTransport`).
        ``stall_s``: a stream's longest silence (seconds; ``None`` = ``read_timeout_s``)."""
        timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        stream_read_s = read_timeout_s
        if stall_s is not None:
            stream_read_s = stall_s if read_timeout_s is None else min(stall_s, read_timeout_s)
        stream_timeout = httpx.Timeout(stream_read_s, connect=connect_timeout_s)
        transport: httpx.AsyncBaseTransport
        if kind == "fast":
            transport = FastHTTPTransport(max_connections, body_error=broken)
        elif kind == "httpx":
            transport = RoundRobinPoolTransport(shards, max_connections)
        else:
            raise ConfigError(f"unknown HTTP transport {kind!r}; valid: fast, httpx")
        # trust_env=False: never route backend traffic through an environment proxy.
        client = httpx.AsyncClient(timeout=timeout, transport=transport, trust_env=False)
        return cls(client, transport, timeout, stream_timeout)

    async def aclose(self) -> None:
        await self.client.aclose()  # closes the transport too
