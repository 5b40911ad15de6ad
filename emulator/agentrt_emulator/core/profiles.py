"""The roofline step-time model of the engine emulator over a named hardware profile.

One engine iteration runs one batch through the model. Its time is the larger of two bounds
(a roofline), plus a fixed per-step overhead::

    compute_s = 2 · params · (prefill_tokens + decode_seqs) / (peak_flops · efficiency)
    memory_s  = (weight_bytes + kv_bytes_per_token · kv_tokens_read) / mem_bytes_per_s
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

The profiles themselves (:class:`HardwareProfile`, :data:`PROFILES`) are declared in
:mod:`agentrt_serving.hardware`, shared with the controller's cost model; this module looks
them up by name and computes with them.
"""

from __future__ import annotations

from agentrt.errors import ConfigError
from agentrt_serving.hardware import PROFILES, HardwareProfile

__all__ = ["get_profile", "num_gpu_blocks_for", "step_time_s"]


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
    ) / profile.mem_bytes_per_s
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
