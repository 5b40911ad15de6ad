"""One emulated engine in a child process of the demo: ``python -m agentrt_demo.engine_proc
JSON``.

Each engine gets a process of its own so that the demo's engines, controller and agents use
both cores of a small machine. The child serves on a free loopback port, prints
``READY <base_url>`` on stdout, and exits when its stdin closes (the demo ended or died: no
orphan outlives it), on SIGINT / SIGTERM, or on an error (exit status 2, message on stderr).

JSON keys: ``time_scale``, ``seed``, ``max_num_seqs``, ``num_gpu_blocks`` (or null),
``scheduling_policy`` (``fcfs`` / ``priority``), ``profile``, ``model_name`` (the served
model's name; absent = the emulator's default).
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from agentrt_demo.child_stop import child_main, stop_group_on_signal_or_eof
from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine

__all__ = ["emulator_config", "main"]


def emulator_config(options: dict[str, Any]) -> EmulatorConfig:
    """The engine's configuration from the JSON options (ConfigError when invalid)."""
    engine = EngineConfig(
        max_num_seqs=int(options["max_num_seqs"]),
        num_gpu_blocks=options.get("num_gpu_blocks"),
        scheduling_policy=options["scheduling_policy"],
    )
    return EmulatorConfig(
        engine=engine,
        profile=str(options.get("profile", "a100-llama3-8b")),
        time_scale=float(options["time_scale"]),
        seed=int(options["seed"]),
        model_name=str(options.get("model_name") or DEFAULT_MODEL_NAME),
    )


async def _serve(config: EmulatorConfig) -> None:
    async with serve_engine(config) as engine, anyio.create_task_group() as group:
        print(f"READY {engine.base_url}", flush=True)
        stop_group_on_signal_or_eof(group)


def main(argv: list[str] | None = None) -> int:
    async def serve(options: dict[str, Any]) -> None:
        await _serve(emulator_config(options))

    return child_main("engine", serve, argv)


if __name__ == "__main__":
    sys.exit(main())
