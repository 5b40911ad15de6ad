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

import math
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import anyio
import uvicorn
from anyio.from_thread import start_blocking_portal

from agentrt.errors import EngineError
from agentrt_emulator.server.app import EmulatorState, build_app, build_state
from agentrt_emulator.server.config import EmulatorConfig
from agentrt_emulator.server.hardening import HeadTimeoutH11Protocol

__all__ = ["RunningEmulator", "serve_engine", "serve_engine_in_thread"]

_STARTUP_TIMEOUT_S = 30.0
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


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves the host program's signal handlers alone."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``(host, port)``; port 0 picks a free one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise EngineError(f"cannot listen on {host}:{port}: {exc}") from exc
    # Accepted sockets inherit this on Linux. Without it, Nagle's algorithm holds a response
    # body back until the client ACKs the headers, which a delayed ACK makes take ~40 ms.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def uvicorn_config(state: EmulatorState, log_level: str) -> uvicorn.Config:
    """uvicorn's settings: h11 (explicitly, so that its head size limit applies) with a
    request-head timeout, and the config's connection limit (docs/security.md)."""
    config = state.config
    return uvicorn.Config(
        build_app(state),
        lifespan="on",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=math.ceil(_GRACEFUL_SHUTDOWN_S),
        http=HeadTimeoutH11Protocol,
        h11_max_incomplete_event_size=config.max_header_bytes,
        # Annotated int by uvicorn, used as loop.call_later's delay: a float works.
        timeout_keep_alive=config.header_timeout_s,  # type: ignore[arg-type]
        limit_concurrency=config.max_concurrency,
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
    server = EmbeddedServer(uvicorn_config(state, log_level))
    stopped = anyio.Event()

    async def run() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            stopped.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.move_on_after(_STARTUP_TIMEOUT_S):
                # uvicorn offers a flag, not an event, for "listening".
                while not server.started and not stopped.is_set():  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            if not server.started:
                server.should_exit = True
                raise EngineError(f"the engine emulator did not start on {host}:{actual_port}")
            url_host = f"[{host}]" if ":" in host else host
            try:
                yield RunningEmulator(f"http://{url_host}:{actual_port}", host, actual_port, state)
            finally:
                server.should_exit = True
    finally:
        sock.close()


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
