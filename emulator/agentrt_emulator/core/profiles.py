"""Named hardware profiles and the roofline step-time model of the engine emulator.

One engine iteration runs one batch through the model. Its time is the larger of two bounds
(a roofline), plus a fixed per-step overhead::

    compute_s = 2 · params · (prefill_tokens + decode_seqs) / (peak_flops · efficiency)
    memory_s  = (weight_bytes + kv_bytes_per_token · kv_tokens_read) / mem_bandwidth
    step_s    = step_overhead_s + max(compute_s, memory_s)

* ``2 · params`` FLOPs per token is the dense matmul cost of a forward pass (one multiply and
  one add per weight). Attention FLOPs (∝ context length) are left out: for an 8B model they
  add < 25 % at 8k context and nothing at the prompt lengths Autellix reports (arXiv 2502.13965).
* A decode step reads every weight once plus the KV of every context token of every sequence
  in the batch, hence the memory bound dominates small batches: A100, batch 1, short context:
  16 GB / 2.0 TB/s = 8 ms.
* A prefill chunk of thousands of tokens is compute bound: A100, 8,192 tokens ≈ 0.70 s.
* A mixed step (chunked prefill + decodes) costs the larger of the two bounds.
* ``step_overhead_s`` stands for the CPU side of an iteration (scheduling, sampling, kernel
  launches) that does not overlap the GPU work.

KV capacity (blocks) comes from memory: ``(mem_bytes · gpu_memory_utilization − weight_bytes −
reserved_bytes) / (kv_bytes_per_token · block_size)``, as vLLM sizes its cache after loading
the weights and profiling activations (``reserved_bytes``). A profile may fix the block count
instead (``num_gpu_blocks``). Everything here is pure arithmetic: no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentrt.errors import ConfigError

__all__ = ["PROFILES", "HardwareProfile", "get_profile", "num_gpu_blocks_for", "step_time_s"]

_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """A model on a device, as far as the step-time model and KV sizing need it."""

    #: Profile name, e.g. ``"a100-llama3-8b"``.
    name: str
    #: Model parameters (count); compute cost is ``2 · params`` FLOPs per token.
    params: float
    #: Bytes of model weights read once per step (bytes).
    weight_bytes: float
    #: KV cache bytes per token (all layers, K and V) (bytes).
    kv_bytes_per_token: float
    #: Peak dense throughput of the device (FLOP/s).
    peak_flops: float
    #: Memory bandwidth of the device (bytes/s).
    mem_bandwidth: float
    #: Device memory (bytes).
    mem_bytes: float
    #: Fraction of ``peak_flops`` reached by prefill matmuls (model FLOP utilisation), in (0, 1].
    efficiency: float
    #: Fixed cost added to every step (seconds).
    step_overhead_s: float = 0.0
    #: Memory kept back for activations, CUDA graphs, etc. when sizing the KV cache (bytes).
    reserved_bytes: float = 0.0
    #: Fixed KV block count; ``None`` = derived from memory (see the module docstring).
    num_gpu_blocks: int | None = None
    #: One line for ``--help`` and docs.
    description: str = ""


# Llama-3.1-8B (its published configuration): 8.0e9 parameters, 16 GB of bf16 weights,
# 32 layers × 8 KV heads × 128 dims × (K and V) × 2 bytes = 131,072 bytes (128 KiB) of KV per token.
_LLAMA3_8B_PARAMS = 8.0e9
_LLAMA3_8B_WEIGHTS = 16.0e9
_LLAMA3_8B_KV_PER_TOKEN = 32 * 8 * 128 * 2 * 2
# Measured vLLM prefill on 8B models reaches roughly 50-65 % of peak bf16 FLOP/s.
_PREFILL_MFU = 0.6
# vLLM v1 with CUDA graphs spends a few hundred µs of CPU per iteration that does not overlap.
_GPU_STEP_OVERHEAD_S = 0.5e-3
# Activation peak + CUDA graph pool that vLLM keeps outside the KV cache for an 8B model.
_GPU_RESERVED = 3.0e9

PROFILES: dict[str, HardwareProfile] = {
    p.name: p
    for p in (
        HardwareProfile(
            name="a100-llama3-8b",
            params=_LLAMA3_8B_PARAMS,
            weight_bytes=_LLAMA3_8B_WEIGHTS,
            kv_bytes_per_token=_LLAMA3_8B_KV_PER_TOKEN,
            peak_flops=312e12,  # A100 bf16 dense
            mem_bandwidth=2.0e12,  # A100-80GB HBM2e
            mem_bytes=80 * _GIB,
            efficiency=_PREFILL_MFU,
            step_overhead_s=_GPU_STEP_OVERHEAD_S,
            reserved_bytes=_GPU_RESERVED,
            description="Llama-3.1-8B bf16 on one A100-80GB (Autellix's single-engine setup)",
        ),
        HardwareProfile(
            name="h100-llama3-8b",
            params=_LLAMA3_8B_PARAMS,
            weight_bytes=_LLAMA3_8B_WEIGHTS,
            kv_bytes_per_token=_LLAMA3_8B_KV_PER_TOKEN,
            peak_flops=989e12,  # H100 SXM bf16 dense
            mem_bandwidth=3.35e12,  # H100 SXM HBM3
            mem_bytes=80 * _GIB,
            efficiency=_PREFILL_MFU,
            step_overhead_s=_GPU_STEP_OVERHEAD_S,
            reserved_bytes=_GPU_RESERVED,
            description="Llama-3.1-8B bf16 on one H100-80GB SXM",
        ),
        HardwareProfile(
            name="h200-llama3-8b",
            params=_LLAMA3_8B_PARAMS,
            weight_bytes=_LLAMA3_8B_WEIGHTS,
            kv_bytes_per_token=_LLAMA3_8B_KV_PER_TOKEN,
            peak_flops=989e12,  # same compute die as H100
            mem_bandwidth=4.8e12,  # HBM3e
            mem_bytes=141e9,
            efficiency=_PREFILL_MFU,
            step_overhead_s=_GPU_STEP_OVERHEAD_S,
            reserved_bytes=_GPU_RESERVED,
            description="Llama-3.1-8B bf16 on one H200-141GB",
        ),
        HardwareProfile(
            # A ~100M-parameter model (12 layers, 4 KV heads x 64 dims) on a laptop-class CPU:
            # cheap steps (about 5 ms per decode) for demos and HTTP tests.
            name="cpu-tiny",
            params=1.0e8,
            weight_bytes=2.0e8,
            kv_bytes_per_token=12 * 4 * 64 * 2 * 2,
            peak_flops=1.0e12,
            mem_bandwidth=5.0e10,
            mem_bytes=4 * _GIB,
            efficiency=0.5,
            step_overhead_s=1.0e-3,
            reserved_bytes=0.2e9,
            description="a ~100M-parameter model on a CPU (fast steps for demos and tests)",
        ),
        HardwareProfile(
            # Every step costs exactly 1.0 s whatever the batch: "duration in decode steps"
            # (Autellix, arXiv 2502.13965, Fig. 2) maps to output tokens when prompts are one
            # token long.
            name="unit-step",
            params=0.0,
            weight_bytes=0.0,
            kv_bytes_per_token=0.0,
            peak_flops=math.inf,
            mem_bandwidth=math.inf,
            mem_bytes=0.0,
            efficiency=1.0,
            step_overhead_s=1.0,
            num_gpu_blocks=65536,
            description="every step takes exactly 1.0 s (worked examples, unit tests)",
        ),
    )
}


def get_profile(name: str) -> HardwareProfile:
    """The profile called ``name``.

    Raises:
        ConfigError: unknown name (the message lists the valid ones).
    """
    try:
        return PROFILES[name]
    except KeyError:
        valid = ", ".join(sorted(PROFILES))
        raise ConfigError(f"unknown hardware profile {name!r}; valid profiles: {valid}") from None


def step_time_s(
    profile: HardwareProfile, prefill_tokens: int, decode_seqs: int, kv_tokens_read: int
) -> float:
    """Modelled duration of one engine step (seconds); see the module docstring.

    Args:
        prefill_tokens: prompt tokens computed in the step (all prefill chunks together).
        decode_seqs: sequences that decode one token in the step.
        kv_tokens_read: context tokens whose KV the step reads (for each scheduled sequence,
            its tokens computed so far including this step's).
    """
    compute_s = (
        2.0
        * profile.params
        * (prefill_tokens + decode_seqs)
        / (profile.peak_flops * profile.efficiency)
    )
    memory_s = (
        profile.weight_bytes + profile.kv_bytes_per_token * kv_tokens_read
    ) / profile.mem_bandwidth
    return profile.step_overhead_s + (compute_s if compute_s > memory_s else memory_s)


def num_gpu_blocks_for(
    profile: HardwareProfile, block_size: int, gpu_memory_utilization: float
) -> int:
    """KV blocks that fit on the device (see the module docstring); at least 0."""
    if profile.num_gpu_blocks is not None:
        return profile.num_gpu_blocks
    free_bytes = profile.mem_bytes * gpu_memory_utilization - profile.weight_bytes
    free_bytes -= profile.reserved_bytes
    per_block = profile.kv_bytes_per_token * block_size
    if per_block <= 0 or free_bytes <= 0:
        return 0
    return int(free_bytes // per_block)
