"""A backend's KV memory as it publishes it: GPU capacity and CPU tier (docs/backends.md,
"What the controller reads from a backend's metrics").

The retention rule weighs a context of ``C`` tokens against the engine's KV capacity ``M``
and prices an eviction by the reload from a KV CPU tier when there is one (docs/routing.md,
"KV retention", "Where M and the tier come from"). These figures are read from the
backend's ``/metrics`` at every scrape:

* **vLLM** (and our emulator, which publishes the same names): the info gauge
  ``vllm:cache_config_info``, whose labels are vLLM's ``CacheConfig`` fields —
  ``M = kv_cache_size_tokens`` when the server publishes it (newer vLLM: the group-aware
  capacity of one data-parallel engine), else ``num_gpu_blocks × block_size``; the CPU tier
  is ``num_cpu_blocks × block_size`` when set, else ``kv_offloading_size`` (GiB of host
  memory, vLLM's ``--kv-offloading-size``) in bytes. One series per engine: the smallest
  engine's figure is taken (a call's KV lives in one engine).
* **SGLang**: ``sglang:max_total_num_tokens`` (the KV pool's tokens; smallest rank). Its
  hierarchical cache publishes no size: no tier.
* our emulator adds ``agentrt_engine_kv_reload_s_per_token``: the exact reload cost of its
  hardware profile (``kv_bytes_per_token / pcie_bytes_per_s``). vLLM publishes neither the
  KV bytes per token nor the PCIe bandwidth: the controller assumes the reference profile's
  (:data:`REFERENCE_PROFILE`), or ``retention_options.reload_s_per_token`` when configured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentrt_controller.backends.prometheus_text import labelled_samples, min_samples
from agentrt_serving.hardware import PROFILES

__all__ = [
    "DEFAULT_KV_BYTES_PER_TOKEN",
    "DEFAULT_RELOAD_S_PER_TOKEN",
    "REFERENCE_PROFILE",
    "KvCapacity",
    "sglang_capacity",
    "vllm_capacity",
]

#: The hardware profile whose figures stand in for what a vLLM server does not publish.
REFERENCE_PROFILE = "a100-llama3-8b"
_REFERENCE = PROFILES[REFERENCE_PROFILE]
#: KV bytes per token assumed for a tier published in bytes only (Llama-3-8B: 128 KiB).
DEFAULT_KV_BYTES_PER_TOKEN: float = _REFERENCE.kv_bytes_per_token
#: Seconds to reload one token from a CPU tier whose backend does not say (the reference
#: profile's 128 KiB per token over PCIe 4.0 x16).
DEFAULT_RELOAD_S_PER_TOKEN: float = _REFERENCE.kv_bytes_per_token / _REFERENCE.pcie_bytes_per_s

_INFO = "vllm:cache_config_info"
_RELOAD = "agentrt_engine_kv_reload_s_per_token"
_SGLANG_TOKENS = "sglang:max_total_num_tokens"
_GIB = float(1 << 30)


@dataclass(frozen=True, slots=True)
class KvCapacity:
    """A backend's KV memory as published; ``None`` / 0 = not published."""

    #: Tokens of KV the GPU holds (one engine: the smallest when it publishes several).
    gpu_tokens: int | None = None
    #: Tokens of KV its CPU tier holds (published in blocks); 0 = none or unknown.
    cpu_tokens: int = 0
    #: Bytes of its CPU tier when published in bytes only (vLLM's ``kv_offloading_size``).
    cpu_bytes: int = 0
    #: Seconds to reload one token from its tier, when it publishes it (our emulator).
    reload_s_per_token: float | None = None

    @property
    def has_tier(self) -> bool:
        """It publishes a KV CPU tier."""
        return self.cpu_tokens > 0 or self.cpu_bytes > 0

    def tier_tokens(self, kv_bytes_per_token: float = DEFAULT_KV_BYTES_PER_TOKEN) -> int:
        """Its tier in tokens: as published, else its bytes over ``kv_bytes_per_token``."""
        if self.cpu_tokens > 0:
            return self.cpu_tokens
        if self.cpu_bytes > 0 and kv_bytes_per_token > 0:
            return int(self.cpu_bytes // kv_bytes_per_token)
        return 0


def _int(value: str | None) -> int | None:
    """A label's positive integer (``"None"``, garbage, zero or negative → ``None``)."""
    try:
        number = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return int(number) if math.isfinite(number) and number >= 1 else None


def _float(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return number if math.isfinite(number) and number > 0 else None


def vllm_capacity(text: str) -> KvCapacity | None:
    """The KV memory a vLLM-style ``/metrics`` text publishes (module docstring); ``None``
    when it has no usable ``vllm:cache_config_info``."""
    gpu: list[int] = []
    cpu: list[int] = []
    cpu_bytes: list[int] = []
    for labels in labelled_samples(text, _INFO):
        block = _int(labels.get("block_size"))
        tokens = _int(labels.get("kv_cache_size_tokens"))
        blocks = _int(labels.get("num_gpu_blocks"))
        if tokens is None and blocks is not None and block is not None:
            tokens = blocks * block
        if tokens is not None:
            gpu.append(tokens)
        cpu_blocks = _int(labels.get("num_cpu_blocks"))
        size_gib = _float(labels.get("kv_offloading_size"))
        if cpu_blocks is not None and block is not None:
            cpu.append(cpu_blocks * block)
        elif size_gib is not None:
            cpu_bytes.append(int(size_gib * _GIB))
    if not gpu:
        return None
    reload = min_samples(text, (_RELOAD,)).get(_RELOAD)
    return KvCapacity(
        gpu_tokens=min(gpu),
        cpu_tokens=min(cpu) if cpu else 0,
        cpu_bytes=min(cpu_bytes) if cpu_bytes and not cpu else 0,
        reload_s_per_token=reload if reload is not None and 0 < reload <= 1 else None,
    )


def sglang_capacity(text: str) -> KvCapacity | None:
    """The KV pool SGLang publishes (``sglang:max_total_num_tokens``); ``None`` = none."""
    tokens = min_samples(text, (_SGLANG_TOKENS,)).get(_SGLANG_TOKENS)
    if tokens is None or not tokens >= 1:
        return None
    return KvCapacity(gpu_tokens=int(tokens))
