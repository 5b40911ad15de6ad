"""Loopback servers for backend tests: in-process ASGI apps, and processes that can be killed
(SIGKILL: the kernel resets their connections, as when a model server crashes)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn
from anyio.abc import Process

FAKE_VLLM = Path(__file__).with_name("fake_vllm.py")
REPO = Path(__file__).resolve().parents[2]


async def request_body(receive: Any) -> bytes:
    """The whole body of an ASGI HTTP request, read from ``receive`` until its last part."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


@contextlib.asynccontextmanager
async def serve_app(app: Any, port: int = 0) -> AsyncIterator[str]:
    """Run an ASGI app with uvicorn on a loopback port (0: a free one); yields its base URL."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="error", lifespan="off", access_log=False)
    )
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve, [sock])
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event for this
            await anyio.sleep(0.005)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            server.force_exit = True
    sock.close()


@dataclass
class Spawned:
    """A server process of ours."""

    process: Process
    url: str

    def kill(self) -> None:
        """SIGKILL, by our own child's pid (no cleanup runs in it: connections reset)."""
        if self.process.returncode is None:
            os.kill(self.process.pid, signal.SIGKILL)


async def _wait_healthy(url: str, timeout_s: float = 30.0) -> None:
    async with httpx.AsyncClient(timeout=2.0) as http:
        with anyio.fail_after(timeout_s):
            while True:
                try:
                    if (await http.get(url + "/health")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await anyio.sleep(0.05)


@contextlib.asynccontextmanager
async def _spawn(command: Sequence[str], port_of: Any) -> AsyncIterator[Spawned]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = await anyio.open_process(list(command), env=env, cwd=str(REPO))
    try:
        url = await port_of(process)
        await _wait_healthy(url)
        yield Spawned(process, url)
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                os.kill(process.pid, signal.SIGKILL)
            await process.wait()
            await process.aclose()


async def _first_line(stream: Any, prefix: str) -> str:
    buffer = b""
    with anyio.fail_after(30):
        while True:
            buffer += await stream.receive()
            for line in buffer.decode(errors="replace").splitlines():
                if prefix in line:
                    return line


@contextlib.asynccontextmanager
async def spawn_fake(*args: str) -> AsyncIterator[Spawned]:
    """``fake_vllm.py`` as a process (arguments: its flags)."""

    async def port_of(process: Process) -> str:
        line = await _first_line(process.stdout, "PORT ")
        return f"http://127.0.0.1:{int(line.split()[1])}"

    async with _spawn([sys.executable, str(FAKE_VLLM), *args], port_of) as spawned:
        yield spawned


@contextlib.asynccontextmanager
async def spawn_emulator(*args: str) -> AsyncIterator[Spawned]:
    """``agentrt engine serve --port 0`` as a process (extra flags: ``args``)."""

    async def port_of(process: Process) -> str:
        line = await _first_line(process.stderr, "agentrt engine emulator: http://")
        # "<ISO time> agentrt engine emulator: http://HOST:PORT model=..."
        return next(word for word in line.split() if word.startswith("http://"))

    command = [sys.executable, "-m", "agentrt.cli", "engine", "serve", "--port", "0", *args]
    async with _spawn(command, port_of) as spawned:
        yield spawned
