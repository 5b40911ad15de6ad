"""The foreground server behind ``agentrt engine serve``.

SIGINT and SIGTERM stop it gracefully (in-flight requests get a short grace period) and the
command exits with status 0.
"""

from __future__ import annotations

import signal
import sys
import time

import anyio

from agentrt_emulator.server.config import EmulatorConfig
from agentrt_emulator.server.embed import bind_socket, uvicorn_config
from agentrt_emulator.server.state import build_state
from agentrt_serving.logs import iso_time, server_log_config
from agentrt_serving.uvicorn_server import EmbeddedServer

__all__ = ["run_forever"]


async def run_forever(config: EmulatorConfig, host: str, port: int, log_level: str) -> None:
    """Serve until SIGINT / SIGTERM. Raises ConfigError / EngineError before listening."""
    state = build_state(config)
    sock = bind_socket(host, port)
    # Every log line with its wall-clock time, as the controller's (agentrt_serving.logs).
    log_config = server_log_config(log_level)
    server = EmbeddedServer(
        uvicorn_config(state, log_level, host, sock.getsockname()[1], log_config=log_config)
    )

    async def stop_on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                server.should_exit = True
                return

    try:
        url_host = f"[{host}]" if ":" in host else host
        stats = state.core.stats()
        print(
            f"{iso_time(time.time())} agentrt engine emulator: "
            f"http://{url_host}:{sock.getsockname()[1]} "
            f"model={config.model_name} profile={config.profile} "
            f"time_scale={config.time_scale} kv_blocks={stats.num_blocks} "
            f"policy={config.engine.scheduling_policy}",
            file=sys.stderr,
            flush=True,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signal)
            await server.serve(sockets=[sock])
            tg.cancel_scope.cancel()
    finally:
        sock.close()
