"""Summary statistics and samplers."""

from __future__ import annotations

import math
import random

import pytest

from agentrt.errors import ConfigError
from agentrt_sim.metrics import ProgramRecord, RunRecord, percentiles, summarize
from agentrt_sim.runner import keeps_up
from agentrt_sim.workloads.distributions import ClippedLogNormal, DiscreteLogNormal

pytestmark = pytest.mark.timeout(30)


def test_percentiles_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentiles(values) == {"mean": 50.5, "p50": 50.0, "p95": 95.0, "p99": 99.0}
    assert percentiles([3.0]) == {"mean": 3.0, "p50": 3.0, "p95": 3.0, "p99": 3.0}
    assert all(math.isnan(v) for v in percentiles([]).values())


def _record(
    pid: str, arrival: float, finish: float, measured: bool, tokens: int = 10
) -> ProgramRecord:
    e2e = finish - arrival
    return ProgramRecord(
        program_id=pid,
        kind="react",
        arrival_s=arrival,
        finish_s=finish,
        output_tokens=tokens,
        calls=2,
        wait_s=e2e / 2,
        exec_s=e2e / 4,
        tool_s=e2e / 4,
        think_s=0.0,
        measured=measured,
        ttft_s=[0.1, 0.3],
        prompt_tokens=100,
        cached_tokens=25,
    )


def test_summary_excludes_warmup_and_counts_throughput_in_the_window() -> None:
    record = RunRecord(
        programs=[
            _record("warm", 1.0, 12.0, measured=False),
            _record("a", 20.0, 30.0, measured=True),
            _record("b", 40.0, 120.0, measured=True, tokens=40),
        ],
        end_s=120.0,
    )
    summary = summarize(record, warmup_s=10.0, window_end_s=100.0)
    assert summary["programs_completed"] == 2 and summary["programs_warmup"] == 1
    # finished in [10, 100): "warm" at 12 and "a" at 30, over 90 s
    assert summary["throughput_programs_per_s"] == pytest.approx(2 / 90)
    # arrived in [10, 100): "a" and "b" (finished) plus nothing unfinished
    assert summary["arrival_rate_per_s"] == pytest.approx(2 / 90)
    assert summary["e2e_latency_s"]["mean"] == pytest.approx(45.0)
    assert summary["token_latency_s"]["mean"] == pytest.approx((10 / 10 + 80 / 40) / 2)
    assert summary["wait_s_mean"] == pytest.approx(22.5)
    assert summary["prefix_hit_rate"] == pytest.approx(0.25)
    assert summary["ttft_s"]["p50"] == pytest.approx(0.1)


def _keeps_up_summary(
    rate: float, arrivals: float, throughput: float, unfinished: int
) -> dict[str, float]:
    return {
        "rate": rate,
        "arrival_rate_per_s": arrivals,
        "throughput_programs_per_s": throughput,
        "programs_completed": 100,
        "programs_unfinished": unfinished,
    }


def test_keeps_up_compares_throughput_with_the_realised_arrival_rate() -> None:
    # Poisson drew fewer arrivals than nominal: 0.8/s served of 0.85/s arriving keeps up,
    # although it is below 90 % of the nominal 1.0/s
    assert keeps_up(_keeps_up_summary(1.0, 0.85, 0.8, 0))
    # more arrivals than nominal: 0.95/s served of 1.1/s arriving fell behind
    assert not keeps_up(_keeps_up_summary(1.0, 1.1, 0.95, 0))
    # unfinished programs above 1 % of arrivals: fell behind whatever the throughput
    assert not keeps_up(_keeps_up_summary(1.0, 1.0, 1.0, 5))
    # a summary without the realised rate falls back to the nominal one
    old = _keeps_up_summary(1.0, 0.0, 0.85, 0)
    del old["arrival_rate_per_s"]
    assert not keeps_up(old)


def test_clipped_lognormal_mean_is_exact_after_clipping() -> None:
    rng = random.Random(1)
    dist = ClippedLogNormal(277.0, 1.2, low=1, high=1000)
    samples = [dist.sample_int(rng) for _ in range(100_000)]
    assert sum(samples) / len(samples) == pytest.approx(277.0, rel=0.01)
    assert min(samples) >= 1 and max(samples) <= 1000


def test_discrete_lognormal_mean_is_exact_after_rounding_and_clipping() -> None:
    rng = random.Random(2)
    dist = DiscreteLogNormal(6.66, 1.0, low=1, high=80)
    samples = [dist.sample(rng) for _ in range(100_000)]
    assert sum(samples) / len(samples) == pytest.approx(6.66, rel=0.02)
    assert min(samples) == 1 and max(samples) <= 80


def test_constant_and_invalid_distributions() -> None:
    assert ClippedLogNormal(0.0, 1.0, 0.0, 0.0).sample(random.Random(0)) == 0.0
    with pytest.raises(ConfigError):
        ClippedLogNormal(5.0, 1.0, low=10.0, high=20.0)
    with pytest.raises(ConfigError):
        DiscreteLogNormal(5.0, 0.0)
