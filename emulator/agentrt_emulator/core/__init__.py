"""The pure engine model: continuous batching, paged KV cache with prefix caching, vLLM-style
scheduling, retention pins and a roofline step-time model.

Nothing here does I/O or reads a clock: the HTTP server (``agentrt_emulator.server``) and the
simulator (``simulator``) both pass ``now_s`` in and drive the same objects.
"""

from agentrt_emulator.core.engine import EngineCore
from agentrt_emulator.core.profiles import get_profile, step_time_s
from agentrt_emulator.core.types import (
    EngineConfig,
    EngineRequest,
    EngineStats,
    RequestProgress,
    SchedulingPolicy,
    StepResult,
)

__all__ = [
    "EngineConfig",
    "EngineCore",
    "EngineRequest",
    "EngineStats",
    "RequestProgress",
    "SchedulingPolicy",
    "StepResult",
    "get_profile",
    "step_time_s",
]
