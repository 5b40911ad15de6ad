"""Configuration of one emulated engine server."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrt.errors import ConfigError
from agentrt_emulator.core.types import EngineConfig

__all__ = ["DEFAULT_MODEL_NAME", "DEFAULT_PROFILE", "EmulatorConfig"]

#: Model name served when none is given (``--model``).
DEFAULT_MODEL_NAME = "agentrt/emulated-llama-3.1-8b"
#: Hardware profile used when none is given (``--profile``).
DEFAULT_PROFILE = "a100-llama3-8b"


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    """Everything one emulated engine server needs; passed explicitly, never read from the env."""

    #: The engine model's limits (vLLM option names).
    engine: EngineConfig = field(default_factory=EngineConfig)
    #: Roofline hardware profile name (:func:`agentrt_emulator.core.profiles.get_profile`).
    profile: str = DEFAULT_PROFILE
    #: Name answered by ``/v1/models`` and required in ``model`` fields.
    model_name: str = DEFAULT_MODEL_NAME
    #: The emulator runs this many times faster than the modelled GPU (> 0). Model time, in
    #: which every latency metric and pin TTL is expressed, advances ``time_scale`` model
    #: seconds per wall second.
    time_scale: float = 1.0
    #: Seed of the scripted model (``--seed``).
    seed: int = 0
    #: Largest accepted request body, bytes (larger bodies get HTTP 413).
    max_body_bytes: int = 16 * 1024 * 1024
    #: Longest wall time one fused batch of engine steps may cover before the server looks at
    #: new arrivals again, seconds. Small values keep arrivals prompt; large ones cut overhead.
    fuse_window_wall_s: float = 0.002
    #: How far the engine loop may fall behind its model-time schedule, wall seconds, and
    #: still catch up (steps start where the previous one ended); beyond it the loop restarts
    #: the schedule at "now" and counts the model time given up (docs/engine-emulator.md).
    max_lag_wall_s: float = 0.05
    #: Hold a stream's intermediate tokens until this long after its previous write, wall
    #: seconds (0 = write every engine step, as vLLM). The first and the last write are never
    #: held, so TTFT and E2E stay exact; a larger value cuts the sends, and the parsing by a
    #: proxy or client, of long streams at high time scales (docs/engine-emulator.md).
    stream_interval_wall_s: float = 0.0
    #: Largest request head (request line + headers), bytes; larger ones are refused
    #: (docs/security.md).
    max_header_bytes: int = 64 * 1024
    #: Seconds a connection has to deliver a complete request head; idle keep-alive
    #: connections are closed after the same time (wall seconds).
    header_timeout_s: float = 10.0
    #: Connections + requests served at once; more get HTTP 503.
    max_concurrency: int = 4096

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ConfigError(f"time_scale must be > 0, got {self.time_scale}")
        if not self.model_name:
            raise ConfigError("model_name must not be empty")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"max_body_bytes must be >= 1024, got {self.max_body_bytes}")
        if self.fuse_window_wall_s < 0:
            raise ConfigError(f"fuse_window_wall_s must be >= 0, got {self.fuse_window_wall_s}")
        if self.stream_interval_wall_s < 0:
            raise ConfigError(
                f"stream_interval_wall_s must be >= 0, got {self.stream_interval_wall_s}"
            )
        if self.max_header_bytes < 1024:
            raise ConfigError(f"max_header_bytes must be >= 1024, got {self.max_header_bytes}")
        if not self.header_timeout_s > 0:
            raise ConfigError(f"header_timeout_s must be > 0, got {self.header_timeout_s}")
        if self.max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        if self.max_lag_wall_s < 0:
            raise ConfigError(f"max_lag_wall_s must be >= 0, got {self.max_lag_wall_s}")
