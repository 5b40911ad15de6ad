"""The Python floor of ``benchmarks/peers.py``: the least a chat proxy written in Python on
asyncio does per call, as a reference row beside the routers (not a product, not a peer).

Per request it finds the head's end and its ``content-length``, parses the JSON body (a router
must: the model picks the backends, the messages the prefix), picks a backend round robin and
relays the request's bytes over a keep-alive connection to it, then relays the answer's bytes
back as they arrive, framed by the backend's ``content-length``. Nothing else: no header
validation, no limits or timeouts, no scheduling, metrics, logging or error answers — everything
our controller does on top of this is what separates the two rows. It speaks to the fixed-reply
backend of ``benchmarks/_peers_load.py`` (``content-length`` answers, keep-alive) and to
nothing else.

Run: ``python benchmarks/_floor_proxy.py --port P --backend http://127.0.0.1:Q [...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
from collections.abc import Sequence
from urllib.parse import urlsplit

import orjson

#: The body's parser: orjson, as our controller's (agentrt_serving.hardening.check_json_body).
_loads = orjson.loads


#: The answer when a backend cannot be reached or drops the connection.
_BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n"


def _content_length(head: bytes) -> int:
    lowered = head.lower()
    at = lowered.find(b"\r\ncontent-length:")
    if at < 0:
        return 0
    start = at + len(b"\r\ncontent-length:")
    end = lowered.find(b"\r\n", start)
    return int(lowered[start : end if end >= 0 else None])


class _Upstream(asyncio.Protocol):
    """One keep-alive connection to a backend, relaying each answer to ``client``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.client: asyncio.Transport | None = None
        self.buffer = b""
        self.remaining = -1  # bytes of the current answer's body still due; -1 = in the head
        self.done: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self.client is not None
        if self.remaining < 0:
            self.buffer += data
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            self.remaining = _content_length(self.buffer[:end]) - (len(self.buffer) - end - 4)
            data, self.buffer = self.buffer, b""
        else:
            self.remaining -= len(data)
        self.client.write(data)
        if self.remaining <= 0:
            self.remaining = -1
            if self.done is not None and not self.done.done():
                self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("backend closed"))


class _Client(asyncio.Protocol):
    """One client connection: requests in order, each relayed to a backend."""

    def __init__(self, backends: Sequence[tuple[str, int]], turn: itertools.count[int]) -> None:
        self.backends = backends
        self.turn = turn
        self.upstreams: dict[tuple[str, int], _Upstream] = {}
        self.buffer = b""
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.task = asyncio.get_running_loop().create_task(self._relay())

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            total = end + 4 + _content_length(self.buffer[:end])
            if len(self.buffer) < total:
                return
            self.queue.put_nowait(self.buffer[:total])
            self.buffer = self.buffer[total:]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.task is not None:
            self.task.cancel()
        for upstream in self.upstreams.values():
            if upstream.transport is not None:
                upstream.transport.close()

    async def _upstream(self, backend: tuple[str, int]) -> _Upstream:
        upstream = self.upstreams.get(backend)
        if upstream is None or upstream.transport is None:
            loop = asyncio.get_running_loop()
            _, upstream = await loop.create_connection(_Upstream, *backend)
            upstream.client = self.transport
            self.upstreams[backend] = upstream
        return upstream

    async def _relay(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            request = await self.queue.get()
            head_end = request.find(b"\r\n\r\n")
            body = request[head_end + 4 :]
            if body:
                _loads(body)  # what any router reads: the model, the messages
            backend = self.backends[next(self.turn) % len(self.backends)]
            try:
                upstream = await self._upstream(backend)
                upstream.done = loop.create_future()
                assert upstream.transport is not None
                upstream.transport.write(request)
                await upstream.done
            except OSError:  # a backend down: the client hears it rather than waits
                self.transport.write(_BAD_GATEWAY)


def serve(port: int, backends: Sequence[str]) -> None:
    """Relay loopback ``port`` to ``backends`` (``http://host:port`` roots) until interrupted."""
    targets = []
    for url in backends:
        parts = urlsplit(url)
        targets.append((parts.hostname or "127.0.0.1", parts.port or 80))
    turn = itertools.count()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _Client(targets, turn), "127.0.0.1", port, backlog=1024
        )
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="The Python floor: a minimal asyncio chat relay (benchmarks/peers.py)."
    )
    parser.add_argument("--port", type=int, required=True, help="loopback port to listen on")
    parser.add_argument(
        "--backend", action="append", required=True, help="backend root URL (repeat)"
    )
    args = parser.parse_args(argv)
    serve(args.port, args.backend)


if __name__ == "__main__":
    main()
