"""agentrt_serving on its own: a bare ASGI app behind HardenedApp, served by the package's uvicorn
settings and embedded runner on loopback, answers in the error envelope it is given, counts and
logs a crash once under the logger it is given, and replays a checked body to the app; a server
that cannot start, and a port in use, are the caller's errors."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from agentrt_serving.asgi import Receive, Scope, Send
from agentrt_serving.hardening import INTERNAL_ERROR_MESSAGE, HardenedApp, HttpLimits
from agentrt_serving.uvicorn_server import (
    EmbeddedServer,
    listening_socket,
    running,
    uvicorn_config,
)
from tests.backends.servers import request_body

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class NotStarted(Exception):
    pass


class EchoApp:
    """Echoes a POST body; ``/crash`` raises; a failing lifespan when ``fail_startup``."""

    def __init__(self, *, fail_startup: bool = False) -> None:
        self.fail_startup = fail_startup

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    kind = "failed" if self.fail_startup else "complete"
                    await send({"type": f"lifespan.startup.{kind}"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/crash":
            raise RuntimeError("the app broke")
        body = await request_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def _envelope(status: int, message: str, param: str | None) -> bytes:
    return json.dumps({"fault": {"status": status, "says": message, "at": param}}).encode()


def _hardened(app: EchoApp, crashes: list[str]) -> HardenedApp:
    return HardenedApp(
        app,
        limits=HttpLimits(max_body_bytes=1024),
        ascii_only=lambda name: name.startswith("x-test-"),
        numeric=frozenset({"x-test-count"}),
        error_body=_envelope,
        on_internal_error=crashes.append,
        route_of=lambda scope: "/crash" if scope.get("path") == "/crash" else "unmatched",
        logger=logging.getLogger("tests.serving.guard"),
    )


@contextlib.asynccontextmanager
async def _serve(app: HardenedApp) -> AsyncIterator[str]:
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = uvicorn_config(
        app, host="127.0.0.1", port=port, log_level="critical", graceful_shutdown_s=1.0
    )
    async with running(EmbeddedServer(config), sock, not_started=NotStarted):
        yield f"http://127.0.0.1:{port}"


async def test_the_guard_answers_in_the_given_envelope(caplog: pytest.LogCaptureFixture) -> None:
    crashes: list[str] = []
    async with (
        _serve(_hardened(EchoApp(), crashes)) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):
        ok = await http.post("/echo", content=b'{"n": 1}')
        big_int = await http.post("/echo", content=b'{"n": [9223372036854775808]}')
        header = await http.post("/echo", headers={"x-test-count": "9" * 20}, content=b"")
        too_big = await http.post("/echo", content=b"x" * 2048)
        with caplog.at_level(logging.ERROR, logger="tests.serving.guard"):
            crash = await http.post("/crash", content=b"{}")
    assert (ok.status_code, ok.content) == (200, b'{"n": 1}')
    assert big_int.status_code == 400
    assert big_int.json()["fault"]["status"] == 400
    assert header.status_code == 400
    assert header.json()["fault"]["at"] == "x-test-count"
    assert too_big.status_code == 413
    assert too_big.headers["connection"] == "close"
    assert crash.status_code == 500
    assert crash.json() == {"fault": {"status": 500, "says": INTERNAL_ERROR_MESSAGE, "at": None}}
    assert crashes == ["/crash"]
    records = [r for r in caplog.records if r.name == "tests.serving.guard"]
    assert len(records) == 1 and "RuntimeError" in records[0].getMessage()


async def test_a_server_that_cannot_start_raises_the_callers_error() -> None:
    # uvicorn would exit the process (SystemExit) when the lifespan startup fails.
    with pytest.raises(NotStarted):
        async with _serve(_hardened(EchoApp(fail_startup=True), [])):
            pytest.fail("the server started")


def test_a_port_in_use_is_an_os_error() -> None:
    with listening_socket("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(OSError):
            listening_socket("127.0.0.1", port)
    fresh = listening_socket("127.0.0.1", 0)
    try:
        assert fresh.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert fresh.proto == socket.IPPROTO_TCP
    finally:
        fresh.close()
