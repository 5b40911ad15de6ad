"""A vLLM logits processor that gives every engine step a minimum duration ("step floor").

Why: the tiny test model decodes a step in ~1.3 ms on this CPU. vLLM's HTTP process then
needs about as much CPU per step as the engine produces, and on a busy 2-core machine it
falls seconds behind: streamed chunks, /metrics and client disconnects are all handled late
(measured; docs/real-vllm.md). A floor of a few milliseconds per step makes the tiny model
pace itself like a real model on real hardware (where a decode step takes 10-30 ms) and
leaves CPU to the HTTP side. It does not touch the logits.

Loaded by vLLM itself (`--logits-processors agentrt_vllm_step_floor:StepTimeFloor`, with this
folder on PYTHONPATH; scripts/vllm/server.py does both). The floor comes from the environment
variable AGENTRT_VLLM_STEP_FLOOR_MS (milliseconds, default 4; 0 disables).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

ENV = "AGENTRT_VLLM_STEP_FLOOR_MS"


class StepTimeFloor(LogitsProcessor):
    """Sleeps in `apply` until at least `floor_s` seconds passed since the previous step."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.floor_s = max(0.0, float(os.environ.get(ENV, "4"))) / 1000.0
        self.last_step = 0.0  # time.monotonic() at the end of the previous step's apply

    def is_argmax_invariant(self) -> bool:
        # False so that vLLM calls `apply` on every step, greedy batches included.
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        return None

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.floor_s > 0.0:
            wait_s = self.last_step + self.floor_s - time.monotonic()
            if wait_s > 0.0:
                time.sleep(wait_s)
            self.last_step = time.monotonic()
        return logits
