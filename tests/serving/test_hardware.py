"""Hardware profiles are declared once (agentrt_serving.hardware) and read by both the engine
emulator's step-time model and the controller's cost model: the same objects, the published
figures."""

from __future__ import annotations

import pytest

from agentrt_controller.cost_model import CostModel
from agentrt_emulator.core import get_profile
from agentrt_serving.hardware import PROFILES

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("name", "peak_flops", "mem_bytes_per_s"),
    [
        # A100-80GB: 312 TFLOP/s bf16, ~2.0 TB/s; H100 SXM / H200: ~989 TFLOP/s, 3.35 / 4.8 TB/s.
        ("a100-llama3-8b", 312e12, 2.0e12),
        ("h100-llama3-8b", 989e12, 3.35e12),
        ("h200-llama3-8b", 989e12, 4.8e12),
    ],
)
def test_gpu_profiles_hold_the_published_figures(
    name: str, peak_flops: float, mem_bytes_per_s: float
) -> None:
    profile = PROFILES[name]
    assert (profile.peak_flops, profile.mem_bytes_per_s) == (peak_flops, mem_bytes_per_s)
    # Llama-3.1-8B: 8.0e9 parameters, 16 GB of bf16 weights, 128 KiB of KV per token.
    assert (profile.params, profile.weight_bytes, profile.kv_bytes_per_token) == (
        8.0e9,
        16.0e9,
        128 * 1024,
    )


def test_the_emulator_and_the_cost_model_read_the_same_profiles() -> None:
    for name, profile in PROFILES.items():
        assert profile.name == name
        assert get_profile(name) is profile
        model = CostModel.from_profile(name, prefill_efficiency=0.5, nominal_batch=2)
        kv_bytes = 2 * 1024 * profile.kv_bytes_per_token
        assert model.decode_s_per_token == (profile.weight_bytes + kv_bytes) / (
            profile.mem_bytes_per_s
        )
        assert model.prefill_s_per_token == 2 * profile.params / (profile.peak_flops * 0.5)


def test_the_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        PROFILES["mine"] = PROFILES["a100-llama3-8b"]  # type: ignore[index]
