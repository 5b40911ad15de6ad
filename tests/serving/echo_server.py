"""A hardened server answering every request with its path and body, on a real socket in the
test's event loop, for the tests of the HTTP protocols and their timeouts
(``test_http_protocols.py``, ``test_lazy_deadlines.py``)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from agentrt_serving.asgi import Receive, Scope, Send
from agentrt_serving.direct import DirectExchange
from agentrt_serving.hardening import HardenedApp, HttpLimits
from agentrt_serving.uvicorn_server import (
    EmbeddedServer,
    HttpProtocol,
    WithDirectRoutes,
    listening_socket,
    running,
    uvicorn_config,
)
from tests.backends.servers import request_body

#: The path answered on the direct (fast) path when :func:`serve` is asked for it.
DIRECT_PATH = "/direct"


class NotStarted(Exception):
    pass


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI app: lifespan, and ``<path> <body>`` for every request."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    answer = scope["path"].encode() + b" " + await request_body(receive)
    headers = [(b"content-length", b"%d" % len(answer))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


async def _direct_echo(exchange: DirectExchange) -> None:
    body = await exchange.read_body(1 << 20, 5.0)
    if body is not None:
        await exchange.respond(200, [], exchange.path.encode() + b" " + body)


@contextlib.asynccontextmanager
async def serve(
    protocol: HttpProtocol, limits: HttpLimits, *, direct: bool = False
) -> AsyncIterator[int]:
    """The server on a free loopback port (yielded) while the block runs; ``direct``:
    ``POST`` :data:`DIRECT_PATH` is answered on the direct path, everything else by
    :func:`echo`."""
    guarded = HardenedApp(
        echo,
        limits=limits,
        ascii_only=lambda name: False,
        numeric=frozenset(),
        error_body=lambda status, message, param: b'{"status": %d}' % status,
        on_internal_error=lambda route: None,
        route_of=lambda scope: "unmatched",
        logger=logging.getLogger("tests.serving.echo"),
    )
    app = (
        WithDirectRoutes(guarded, {(b"POST", DIRECT_PATH.encode()): _direct_echo})
        if direct
        else guarded
    )
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = uvicorn_config(
        app, host="127.0.0.1", port=port, log_level="critical", graceful_shutdown_s=0.5,
        protocol=protocol,
    )  # fmt: skip
    async with running(EmbeddedServer(config), sock, not_started=NotStarted):
        yield port


def request(path: str, body: bytes = b"") -> bytes:
    """A ``POST`` of ``body`` to ``path``."""
    return b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (
        path.encode(),
        len(body),
        body,
    )
