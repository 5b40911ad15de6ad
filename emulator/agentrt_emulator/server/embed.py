"""Run the emulator inside another program: an async context manager, or a background thread.

::

    async with serve_engine(EmulatorConfig(time_scale=100)) as engine:
        client = AsyncOpenAI(base_url=engine.openai_base_url, api_key="unused")

    with serve_engine_in_thread(EmulatorConfig()) as engine:   # from synchronous code
        ...

Both bind a loopback port (0 = a free one, chosen by the OS) before the server starts, so
the URL is valid as soon as the context is entered.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from anyio.from_thread import start_blocking_portal

from agentrt.errors import EngineError
from agentrt_emulator.server.app import build_app
from agentrt_emulator.server.config import EmulatorConfig
from agentrt_emulator.server.state import EmulatorState, build_state
from agentrt_serving.uvicorn_server import EmbeddedServer, listening_socket, running
from agentrt_serving.uvicorn_server import uvicorn_config as hardened_uvicorn_config

__all__ = ["RunningEmulator", "serve_engine", "serve_engine_in_thread"]

# In-flight requests get this long to finish when the server stops (wall seconds).
_GRACEFUL_SHUTDOWN_S = 2.0


@dataclass(frozen=True, slots=True)
class RunningEmulator:
    """A started emulator server."""

    #: ``http://HOST:PORT`` (no trailing slash).
    base_url: str
    host: str
    port: int
    #: The server's live objects (engine core, driver, metrics) for tests and the demo.
    state: EmulatorState

    @property
    def openai_base_url(self) -> str:
        """``base_url + "/v1"``, what the ``openai`` client expects."""
        return self.base_url + "/v1"


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``(host, port)``; port 0 picks a free one. Raises
    :class:`EngineError` when it cannot be bound."""
    try:
        return listening_socket(host, port)
    except OSError as exc:
        raise EngineError(f"cannot listen on {host}:{port}: {exc}") from exc


def uvicorn_config(
    state: EmulatorState,
    log_level: str,
    host: str,
    port: int,
    *,
    log_config: dict[str, Any] | None = None,
) -> uvicorn.Config:
    """uvicorn's settings: the hardened httptools protocol (request-head timeout, head size
    limit) and the config's connection limit (docs/security.md); ``log_config``
    for a server process (:func:`agentrt_serving.logs.server_log_config`), ``None`` when
    embedded."""
    return hardened_uvicorn_config(
        build_app(state),
        host=host,
        port=port,
        log_level=log_level,
        graceful_shutdown_s=_GRACEFUL_SHUTDOWN_S,
        log_config=log_config,
    )


@asynccontextmanager
async def serve_engine(
    config: EmulatorConfig | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    log_level: str = "warning",
) -> AsyncIterator[RunningEmulator]:
    """Serve an emulated engine on ``host:port`` for the duration of the ``async with``.

    Raises :class:`agentrt.errors.ConfigError` for a bad config and
    :class:`agentrt.errors.EngineError` when the port cannot be bound or the server does
    not start.
    """
    state = build_state(config or EmulatorConfig())
    sock = bind_socket(host, port)
    actual_port = sock.getsockname()[1]
    server = EmbeddedServer(uvicorn_config(state, log_level, host, actual_port))

    def not_started() -> EngineError:
        return EngineError(f"the engine emulator did not start on {host}:{actual_port}")

    async with running(server, sock, not_started=not_started):
        url_host = f"[{host}]" if ":" in host else host
        yield RunningEmulator(f"http://{url_host}:{actual_port}", host, actual_port, state)


@contextmanager
def serve_engine_in_thread(
    config: EmulatorConfig | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    log_level: str = "warning",
) -> Iterator[RunningEmulator]:
    """:func:`serve_engine` on an event loop of its own in a background thread.

    The returned :attr:`RunningEmulator.state` belongs to that thread's loop: read it only.
    """
    with start_blocking_portal() as portal:
        manager = serve_engine(config, host=host, port=port, log_level=log_level)
        with portal.wrap_async_context_manager(manager) as running:
            yield running
