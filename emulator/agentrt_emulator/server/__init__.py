"""The engine emulator's HTTP server: vLLM's OpenAI-compatible API over the pure engine model.

Public entry points: :func:`serve_engine` (async context manager),
:func:`serve_engine_in_thread` (synchronous), :class:`EmulatorConfig`, :func:`build_app`.
See docs/engine-emulator.md.
"""

from agentrt_emulator.server.app import build_app
from agentrt_emulator.server.config import DEFAULT_MODEL_NAME, DEFAULT_PROFILE, EmulatorConfig
from agentrt_emulator.server.embed import RunningEmulator, serve_engine, serve_engine_in_thread
from agentrt_emulator.server.state import EmulatorState, build_state

__all__ = [
    "DEFAULT_MODEL_NAME",
    "DEFAULT_PROFILE",
    "EmulatorConfig",
    "EmulatorState",
    "RunningEmulator",
    "build_app",
    "build_state",
    "serve_engine",
    "serve_engine_in_thread",
]
