"""The engines' KV in the simulator: its size (``--num-gpu-blocks``), its CPU tier
(``--kv-offloading-size``) and their effect."""

from __future__ import annotations

import json

import pytest

from agentrt.cli import main
from agentrt_emulator.core.types import EngineConfig
from agentrt_sim.registry import PolicySpec
from agentrt_sim.runner import BenchConfig, run_comparison

pytestmark = pytest.mark.timeout(60)


def _summary(num_cpu_blocks: int | None) -> dict[str, object]:
    # 120 GPU blocks (1,920 tokens) for ReAct programs: their contexts evict each other
    engine = EngineConfig(max_model_len=131072, num_gpu_blocks=120, num_cpu_blocks=num_cpu_blocks)
    bench = BenchConfig(workload="react", rate_per_s=1.0, duration_s=60, seed=3, engine=engine)
    return run_comparison(bench, [PolicySpec()])[0].summary


def test_cpu_tier_turns_evicted_prefixes_into_reloads() -> None:
    off, on = _summary(None), _summary(8192)
    assert "reloaded_tokens" not in off  # the tier's keys appear only when it is on
    assert isinstance(off["evicted_prefix_tokens"], int) and off["evicted_prefix_tokens"] > 0
    assert on["evicted_prefix_tokens"] == 0
    assert isinstance(on["reloaded_tokens"], int) and on["reloaded_tokens"] > 0
    assert isinstance(on["offloaded_tokens"], int) and on["offloaded_tokens"] > 0
    assert on["programs_completed"] == off["programs_completed"]


def test_sim_flag(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "sim", "--workload", "react", "--rate", "2", "--duration", "10", "--json"]
    assert main([*argv, "--kv-offloading-size", "4"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["reloaded_tokens"] >= 0 and result["offloaded_tokens"] >= 0
    assert main([*argv, "--kv-offloading-size", "1000"]) == 2
    assert "exceeds the host memory" in capsys.readouterr().err


def test_the_kv_size_flag_sets_every_engines_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "sim", "--workload", "react", "--rate", "1", "--duration", "30", "--json"]
    assert main([*argv, "--seed", "3"]) == 0
    (profile,) = json.loads(capsys.readouterr().out)
    # 120 blocks (1,920 tokens) for ReAct programs: their contexts evict each other
    assert main([*argv, "--seed", "3", "--num-gpu-blocks", "120"]) == 0
    (small,) = json.loads(capsys.readouterr().out)
    assert profile["evicted_prefix_tokens"] == 0 < small["evicted_prefix_tokens"]
    assert main([*argv, "--num-gpu-blocks", "0"]) == 2
    assert "num_gpu_blocks must be >= 1" in capsys.readouterr().err
