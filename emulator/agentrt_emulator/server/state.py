"""``EmulatorState``: everything one emulator server instance owns, and how it is built.

The endpoint modules (``app``, ``extras``, ``pins``, ``responses_api``) all take it; it lives
apart from them so that none of them imports another for its type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import anyio

from agentrt_emulator.core.engine import EngineCore
from agentrt_emulator.core.profiles import get_profile
from agentrt_emulator.core.types import EngineConfig, EngineStats
from agentrt_emulator.scripted_model import ScriptedModel
from agentrt_emulator.server.config import EmulatorConfig
from agentrt_emulator.server.driver import EngineDriver
from agentrt_emulator.server.metrics import ServerMetrics
from agentrt_emulator.server.prepare import RequestRules
from agentrt_emulator.tokenizer import Tokenizer
from agentrt_serving.hardware import HardwareProfile

__all__ = ["EmulatorState", "PinInfo", "build_state"]


@dataclass(frozen=True, slots=True)
class PinInfo:
    """What the server remembers of a pin, for ``GET``."""

    pin_id: str
    #: Full KV blocks held.
    blocks: int
    #: Length of the pinned token prefix (tokens).
    tokens: int
    #: Model time at which the pin lapses (seconds); ``None`` = until deleted.
    expires_at_s: float | None
    salted: bool


@dataclass(slots=True)
class EmulatorState:
    """Everything one server instance owns; no module-level state."""

    config: EmulatorConfig
    core: EngineCore
    driver: EngineDriver
    tokenizer: Tokenizer
    model: ScriptedModel
    rules: RequestRules
    #: Pins created over HTTP (see :mod:`agentrt_emulator.server.pins`).
    pins: dict[str, PinInfo] = field(default_factory=dict)
    #: The worker thread that prepares large requests
    #: (:func:`agentrt_emulator.server.prepare.prepare_in_thread`): one, so
    #: that a burst of them waits here; starting a thread per request would block the event
    #: loop until each new thread gets the GIL from the busy ones.
    prepare_limiter: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(1))


def build_state(config: EmulatorConfig) -> EmulatorState:
    """Build the engine core, driver, tokenizer and scripted model for ``config``."""
    profile = get_profile(config.profile)
    core = EngineCore(config.engine, profile)
    metrics = ServerMetrics(
        config.model_name,
        max_num_seqs=config.engine.max_num_seqs,
        time_scale=config.time_scale,
        cache_config=_cache_config_info(config.engine, core.stats()),
        kv_reload_s_per_token=_reload_s_per_token(profile, core.stats()),
    )
    driver = EngineDriver(
        core,
        metrics,
        time_scale=config.time_scale,
        fuse_window_wall_s=config.fuse_window_wall_s,
        max_lag_wall_s=config.max_lag_wall_s,
    )
    tokenizer = Tokenizer()
    rules = RequestRules(
        config.model_name,
        config.engine.max_model_len,
        config.engine.scheduling_policy,
        tokenizer.vocab_size,
    )
    return EmulatorState(
        config, core, driver, tokenizer, ScriptedModel(tokenizer, config.seed), rules
    )


def _cache_config_info(engine: EngineConfig, stats: EngineStats) -> dict[str, str]:
    """vLLM's ``vllm:cache_config_info`` labels with this engine's real figures (vLLM writes
    ``None`` for a field it has no value for, as here for a missing CPU tier)."""
    tier = engine.kv_offloading_size
    return {
        "block_size": str(engine.block_size),
        "enable_prefix_caching": str(engine.enable_prefix_caching),
        "gpu_memory_utilization": str(engine.gpu_memory_utilization),
        "num_gpu_blocks": str(stats.num_blocks),
        "num_cpu_blocks": str(stats.num_cpu_blocks) if stats.num_cpu_blocks else "None",
        "kv_cache_size_tokens": str(stats.num_blocks * engine.block_size),
        "kv_offloading_size": str(float(tier)) if tier else "None",
        "kv_offloading_backend": "native",
        "engine": "0",
    }


def _reload_s_per_token(profile: HardwareProfile, stats: EngineStats) -> float | None:
    """The engine model's reload cost per token from its CPU tier; ``None`` = no tier."""
    if not stats.num_cpu_blocks or not math.isfinite(profile.pcie_bytes_per_s):
        return None
    return profile.kv_bytes_per_token / profile.pcie_bytes_per_s
