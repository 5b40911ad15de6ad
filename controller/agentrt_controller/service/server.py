"""Running the controller: embedded on a free loopback port, or as the CLI's server."""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import anyio
import uvicorn
from opentelemetry.trace import TracerProvider

from agentrt.errors import ConfigError
from agentrt_controller.backends.api import Backend
from agentrt_controller.service.app import ControllerApp
from agentrt_controller.service.charging import CostFunction
from agentrt_controller.service.config import ControllerConfig

__all__ = ["run_controller", "serve_controller"]

_STARTUP_TIMEOUT_S = 30.0


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its signal handlers: the host program keeps its own."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _uvicorn_config(app: ControllerApp, sock_port: int) -> uvicorn.Config:
    config = app.config
    return uvicorn.Config(
        app,
        host=config.host,
        port=sock_port,
        log_level=config.log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=1,
    )


@contextlib.asynccontextmanager
async def serve_controller(
    config: ControllerConfig,
    *,
    backends: Sequence[Backend] | None = None,
    tracer_provider: TracerProvider | None = None,
    cost: CostFunction | None = None,
    on_app: Callable[[ControllerApp], None] | None = None,
) -> AsyncIterator[str]:
    """Run a controller in this event loop; yields its base URL (``http://host:port``).

    ``config.port = 0`` picks a free port. The server stops when the block exits. ``on_app``
    receives the :class:`ControllerApp` (tests inspect its state).
    """
    app = ControllerApp(config, backends=backends, tracer_provider=tracer_provider, cost=cost)
    if on_app is not None:
        on_app(app)
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio disables Nagle (TCP_NODELAY) only on sockets whose
    # proto says TCP; with proto 0 every response would wait for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((config.host, config.port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {config.host}:{config.port}: {exc}") from exc
    port = sock.getsockname()[1]
    server = _EmbeddedServer(_uvicorn_config(app, port))
    stopped = anyio.Event()

    async def run() -> None:
        try:
            await server.serve([sock])
        finally:
            stopped.set()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            with anyio.move_on_after(_STARTUP_TIMEOUT_S):
                # uvicorn offers a flag, not an event, for "listening".
                while not server.started and not stopped.is_set():  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            if not server.started:
                server.should_exit = True
                raise ConfigError("the controller did not start (see its log)")
            host = f"[{config.host}]" if ":" in config.host else config.host
            try:
                yield f"http://{host}:{port}"
            finally:
                server.should_exit = True
    finally:
        sock.close()


def run_controller(config: ControllerConfig, banner: str = "") -> None:
    """Serve until interrupted (the ``agentrt controller serve`` command); ``banner`` is
    printed to stderr once the configuration has been validated."""
    app = ControllerApp(config)
    if banner:
        print(banner, file=sys.stderr, flush=True)
    uvicorn.run(
        app,
        host=config.host,
        port=config.port,
        log_level=config.log_level,
        access_log=False,
        lifespan="on",
    )
