"""Hardware profiles: the published constants of a model on an accelerator, declared once.

Two members read them: the engine emulator's roofline step-time model and KV sizing
(``agentrt_emulator.core.profiles``, docs/engine-model.md) and the controller's cost model
(``CostModel.from_profile``, docs/controller.md, "What a call is charged"). They live here
because this distribution is what the two servers share and what neither of the two may
import from the other (the controller and the emulator do not depend on each other); the SDK
(``agentrt``) is the other common dependency, but it is the slim client library and has no
business knowing accelerators. Pure data: no clock, no I/O, no other agentrt member imported.

A lookup by name is each reader's own (it raises that reader's :class:`~agentrt.errors.ConfigError`
with its own wording): this module only holds :class:`HardwareProfile` and :data:`PROFILES`.

The GPU constants are the devices' published specifications (A100-80GB: 312 TFLOP/s bf16
dense, ~2.0 TB/s HBM2e; H100 SXM: ~989 TFLOP/s, 3.35 TB/s HBM3; H200: the H100's compute die,
4.8 TB/s HBM3e); the model is Llama-3.1-8B in bf16, Autellix's single-engine setup
(arXiv 2502.13965).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["PROFILES", "HardwareProfile"]

_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """A model on a device: what a roofline step-time model, KV sizing and a cost model need."""

    #: Profile name, ``<device>-<model>``, e.g. ``"a100-llama3-8b"``; the key in :data:`PROFILES`.
    name: str
    #: Model parameters (count); compute cost is ``2 · params`` FLOPs per token.
    params: float
    #: Bytes of model weights, read once per step (bf16: 2 bytes per parameter).
    weight_bytes: float
    #: KV cache bytes per token (all layers, K and V).
    kv_bytes_per_token: float
    #: Peak dense throughput of the device (FLOP/s; bf16 on the GPUs).
    peak_flops: float
    #: Memory bandwidth of the device (bytes/s; HBM on the GPUs).
    mem_bytes_per_s: float
    #: Device memory (bytes).
    mem_bytes: float
    #: Fraction of ``peak_flops`` the emulator's prefill matmuls reach (model FLOP
    #: utilisation), in (0, 1]. The controller's cost model takes its own
    #: ``prefill_efficiency`` argument instead.
    efficiency: float
    #: Fixed cost the emulator adds to every step (seconds).
    step_overhead_s: float = 0.0
    #: Memory kept back for activations, CUDA graphs, etc. when sizing the KV cache (bytes).
    reserved_bytes: float = 0.0
    #: Fixed KV block count; ``None`` = derived from memory (docs/engine-model.md).
    num_gpu_blocks: int | None = None
    #: Host (CPU) memory per device that a KV CPU tier may use (bytes); the upper bound of
    #: ``--kv-offloading-size``. 0 = no CPU tier possible.
    host_mem_bytes: float = 0.0
    #: Effective host <-> device copy bandwidth (bytes/s; PCIe on the GPUs): the cost of
    #: reloading KV blocks from the CPU tier (docs/engine-model.md, "The KV CPU tier").
    pcie_bytes_per_s: float = math.inf
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
# Host DRAM per GPU: DGX A100 has 1 TiB for 8 GPUs, DGX H100 / H200 2 TiB for 8 (NVIDIA's
# published system specifications), i.e. 128 / 256 GiB per GPU.
_DGX_A100_HOST_PER_GPU = 1024 * _GIB / 8
_DGX_H100_HOST_PER_GPU = 2048 * _GIB / 8
# Effective host <-> device bandwidth of one x16 link with pinned memory: PCIe 4.0 (A100)
# ≈ 25 GB/s of its 32 GB/s raw per direction; PCIe 5.0 (H100, H200) ≈ 50 GB/s of 64 GB/s.
_PCIE4_X16_EFFECTIVE = 25e9
_PCIE5_X16_EFFECTIVE = 50e9

_ALL = (
    HardwareProfile(
        name="a100-llama3-8b",
        params=_LLAMA3_8B_PARAMS,
        weight_bytes=_LLAMA3_8B_WEIGHTS,
        kv_bytes_per_token=_LLAMA3_8B_KV_PER_TOKEN,
        peak_flops=312e12,  # A100 bf16 dense
        mem_bytes_per_s=2.0e12,  # A100-80GB HBM2e
        mem_bytes=80 * _GIB,
        efficiency=_PREFILL_MFU,
        step_overhead_s=_GPU_STEP_OVERHEAD_S,
        reserved_bytes=_GPU_RESERVED,
        host_mem_bytes=_DGX_A100_HOST_PER_GPU,
        pcie_bytes_per_s=_PCIE4_X16_EFFECTIVE,
        description="Llama-3.1-8B bf16 on one A100-80GB (Autellix's single-engine setup)",
    ),
    HardwareProfile(
        name="h100-llama3-8b",
        params=_LLAMA3_8B_PARAMS,
        weight_bytes=_LLAMA3_8B_WEIGHTS,
        kv_bytes_per_token=_LLAMA3_8B_KV_PER_TOKEN,
        peak_flops=989e12,  # H100 SXM bf16 dense
        mem_bytes_per_s=3.35e12,  # H100 SXM HBM3
        mem_bytes=80 * _GIB,
        efficiency=_PREFILL_MFU,
        step_overhead_s=_GPU_STEP_OVERHEAD_S,
        reserved_bytes=_GPU_RESERVED,
        host_mem_bytes=_DGX_H100_HOST_PER_GPU,
        pcie_bytes_per_s=_PCIE5_X16_EFFECTIVE,
        description="Llama-3.1-8B bf16 on one H100-80GB SXM",
    ),
    HardwareProfile(
        name="h200-llama3-8b",
        params=_LLAMA3_8B_PARAMS,
        weight_bytes=_LLAMA3_8B_WEIGHTS,
        kv_bytes_per_token=_LLAMA3_8B_KV_PER_TOKEN,
        peak_flops=989e12,  # same compute die as H100
        mem_bytes_per_s=4.8e12,  # HBM3e
        mem_bytes=141e9,
        efficiency=_PREFILL_MFU,
        step_overhead_s=_GPU_STEP_OVERHEAD_S,
        reserved_bytes=_GPU_RESERVED,
        host_mem_bytes=_DGX_H100_HOST_PER_GPU,
        pcie_bytes_per_s=_PCIE5_X16_EFFECTIVE,
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
        mem_bytes_per_s=5.0e10,
        mem_bytes=4 * _GIB,
        efficiency=0.5,
        step_overhead_s=1.0e-3,
        reserved_bytes=0.2e9,
        host_mem_bytes=8 * _GIB,
        pcie_bytes_per_s=1.0e10,  # a host memcpy
        description="a ~100M-parameter model on a CPU (fast steps for demos and tests)",
    ),
    HardwareProfile(
        # Every step costs exactly 1.0 s whatever the batch: "duration in decode steps"
        # (Autellix, arXiv 2502.13965, Fig. 2) maps to output tokens when prompts are one
        # token long. Infinite compute and bandwidth: a cost model derived from it charges 0.
        name="unit-step",
        params=0.0,
        weight_bytes=0.0,
        kv_bytes_per_token=0.0,
        peak_flops=math.inf,
        mem_bytes_per_s=math.inf,
        mem_bytes=0.0,
        efficiency=1.0,
        step_overhead_s=1.0,
        num_gpu_blocks=65536,
        description="every step takes exactly 1.0 s (worked examples, unit tests)",
    ),
)

#: Known profiles by name (read-only).
PROFILES: Mapping[str, HardwareProfile] = MappingProxyType({p.name: p for p in _ALL})
