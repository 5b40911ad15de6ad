"""The foreground server behind ``agentrt engine serve`` (handles SIGINT / SIGTERM)."""

from __future__ import annotations

import sys

import uvicorn

from emulator.server.app import build_state
from emulator.server.config import EmulatorConfig
from emulator.server.embed import bind_socket, uvicorn_config

__all__ = ["run_forever"]


async def run_forever(config: EmulatorConfig, host: str, port: int, log_level: str) -> None:
    """Serve until interrupted. Raises ConfigError / EngineError before listening."""
    state = build_state(config)
    sock = bind_socket(host, port)
    try:
        url_host = f"[{host}]" if ":" in host else host
        stats = state.core.stats()
        print(
            f"agentrt engine emulator: http://{url_host}:{sock.getsockname()[1]} "
            f"model={config.model_name} profile={config.profile} "
            f"time_scale={config.time_scale} kv_blocks={stats.num_blocks} "
            f"policy={config.engine.scheduling_policy}",
            file=sys.stderr,
            flush=True,
        )
        await uvicorn.Server(uvicorn_config(state, log_level)).serve(sockets=[sock])
    finally:
        sock.close()
