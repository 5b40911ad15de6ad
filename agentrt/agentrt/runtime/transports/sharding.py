"""``ShardedTransport``: the runtime's connection pools, each behind an admission gate.

The pools are the lean transport (:mod:`agentrt.fasthttp`); its ``https`` requests go to
httpcore's pool, which scans its queued requests against its connections on every change
(quadratic) and stalls for minutes with thousands of queued calls on one big pool. So the
runtime keeps several small pools ("shards"), sends all calls of a program through the same one
(by a hash of its id), and admits at most ``shard_limit`` requests into a pool at once; the
rest wait here, keeping each pool's queue and connection list small.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import anyio
import httpx

from agentrt.runtime.transports.target import target_of

__all__ = ["ShardedTransport"]


class ShardedTransport(httpx.AsyncBaseTransport):
    """Sends each request through one of ``shards``, holding an admission slot until the
    response body is closed."""

    def __init__(self, shards: Sequence[httpx.AsyncBaseTransport], shard_limit: int) -> None:
        """``shards``: connection pools (not owned: the runtime closes them);
        ``shard_limit``: requests admitted into one pool at once."""
        self.shards = list(shards)
        self._slots = [anyio.Semaphore(shard_limit) for _ in self.shards]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = target_of(request)
        shard = 0 if target is None else hash(target.graph.id) % len(self.shards)
        slots = self._slots[shard]
        try:
            # The fast path skips anyio's scheduling round trip (a whole event loop iteration,
            # ~10 µs a call) when a slot is free; the send below is the cancellation point.
            slots.acquire_nowait()
        except anyio.WouldBlock:
            await slots.acquire()
        try:
            response = await self.shards[shard].handle_async_request(request)
        except BaseException:
            slots.release()
            raise
        if response.is_closed:  # already read (e.g. a MockTransport reply): nothing to hold
            slots.release()
        else:
            response.stream = _AdmittedStream(response.stream, slots)
        return response

    async def aclose(self) -> None:
        """No-op: the runtime owns and closes the connection pools."""


class _AdmittedStream(httpx.AsyncByteStream):
    """A response body that frees its admission slot when closed."""

    def __init__(
        self, inner: httpx.SyncByteStream | httpx.AsyncByteStream, slots: anyio.Semaphore
    ) -> None:
        assert isinstance(inner, httpx.AsyncByteStream)
        self._inner = inner
        #: The admission slot held until the body is closed; None once closed.
        self._slots: anyio.Semaphore | None = slots

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except BaseException:
            await self.aclose()  # close now, whatever the stream under us does on errors
            raise

    async def aclose(self) -> None:
        """Close the body and free the slot. Shielded: the usual reason to close early is a
        cancellation (the program's deadline), and a close interrupted by it would leave the
        connection open until the garbage collector finds its socket (the server would keep
        decoding for nobody). Idempotent."""
        slots, self._slots = self._slots, None
        if slots is None:
            return  # closed already
        try:
            with anyio.CancelScope(shield=True):
                await self._inner.aclose()
        finally:
            slots.release()
