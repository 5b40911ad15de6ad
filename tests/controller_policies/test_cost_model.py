"""The cost model: what a call is charged, profiles, and calibration."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.cost_model import CostModel, CostSample
from agentrt_serving.hardware import PROFILES

pytestmark = pytest.mark.timeout(30)


def test_charges_uncached_prompt_and_generated_tokens() -> None:
    model = CostModel(prefill_s_per_token=1e-4, decode_s_per_token=1e-2, per_call_s=5e-3)
    assert model.service_s(1000, 50, cached_prompt_tokens=800) == pytest.approx(
        200 * 1e-4 + 50 * 1e-2 + 5e-3
    )
    assert model.service_s(1000, 50) == pytest.approx(1000 * 1e-4 + 50 * 1e-2 + 5e-3)
    # Inconsistent counts clamp instead of charging negative service.
    assert model.service_s(10, -3, cached_prompt_tokens=20) == pytest.approx(5e-3)


def test_a100_llama3_8b_profile_matches_the_roofline() -> None:
    model = CostModel.from_profile("a100-llama3-8b")
    assert model.prefill_s_per_token == pytest.approx(2 * 8.0e9 / (312e12 * 0.5))
    kv = 16 * 1024 * 128 * 1024
    assert model.decode_s_per_token == pytest.approx((16.0e9 + kv) / 2.0e12)
    assert 8e-3 < model.decode_s_per_token < 1e-2
    faster = CostModel.from_profile("h200-llama3-8b")
    assert faster.decode_s_per_token < model.decode_s_per_token
    assert set(PROFILES) >= {"a100-llama3-8b", "h100-llama3-8b", "h200-llama3-8b"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"profile": "tpu-llama"}, "unknown cost profile"),
        ({"prefill_efficiency": 0}, "prefill_efficiency"),
        ({"nominal_batch": 0}, "nominal_batch"),
    ],
)
def test_bad_profiles(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CostModel.from_profile(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"prefill_s_per_token": -1.0},
        {"decode_s_per_token": math.nan},
        {"per_call_s": math.inf},
        {"per_call_s": "1"},
    ],
)
def test_bad_parameters(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        CostModel(**kwargs)


def test_from_mapping() -> None:
    assert CostModel.from_mapping({"decode_s_per_token": 0.02}).decode_s_per_token == 0.02
    profiled = CostModel.from_mapping({"profile": "a100-llama3-8b", "per_call_s": 0.001})
    assert profiled.per_call_s == 0.001
    with pytest.raises(ConfigError, match=r"cost\.a: unknown key"):
        CostModel.from_mapping({"a": 1})
    with pytest.raises(ConfigError, match=r"cost\.decode_s_per_token: unknown key"):
        CostModel.from_mapping({"profile": "a100-llama3-8b", "decode_s_per_token": 1})


def test_calibrate_recovers_known_coefficients_from_noisy_samples() -> None:
    rng = random.Random(7)
    truth = CostModel(prefill_s_per_token=1.2e-4, decode_s_per_token=9e-3, per_call_s=4e-3)
    samples = []
    for _ in range(200):
        uncached, generated = rng.randint(0, 4000), rng.randint(1, 500)
        noise = rng.gauss(0.0, 1e-3)
        samples.append(
            CostSample(uncached, generated, truth.service_s(uncached, generated) + noise)
        )
    fitted = CostModel.calibrate(samples)
    assert fitted.prefill_s_per_token == pytest.approx(1.2e-4, rel=0.05)
    assert fitted.decode_s_per_token == pytest.approx(9e-3, rel=0.02)
    assert fitted.per_call_s == pytest.approx(4e-3, abs=1e-3)


def test_calibrate_keeps_coefficients_non_negative() -> None:
    # Decode time shrinks with more prompt tokens here: unconstrained least squares would give
    # a negative prefill cost; the fit clamps it to 0 and refits the rest.
    samples = [CostSample(1000 * i, 10, 0.5 - 0.01 * i) for i in range(10)]
    fitted = CostModel.calibrate(samples)
    assert fitted.prefill_s_per_token == 0.0
    assert fitted.decode_s_per_token >= 0 and fitted.per_call_s >= 0


@pytest.mark.parametrize(
    "samples",
    [
        [CostSample(1, 1, 1.0), CostSample(2, 2, 2.0)],
        [CostSample(0, 0, -1.0), CostSample(0, 0, -1.0), CostSample(0, 0, -2.0)],
    ],
)
def test_calibrate_rejects_unusable_samples(samples: list[CostSample]) -> None:
    with pytest.raises(ConfigError):
        CostModel.calibrate(samples)
