"""The engines' preemption order in the simulator: ``--preemption-order`` and its effect."""

from __future__ import annotations

import json

import pytest

from agentrt.cli import main
from agentrt_emulator.core.types import EngineConfig
from agentrt_sim.registry import PolicySpec
from agentrt_sim.runner import BenchConfig, run_comparison

pytestmark = pytest.mark.timeout(60)


def _summary(order: str) -> dict[str, object]:
    # 120 GPU blocks (1,920 tokens) for ReAct programs: running calls preempt each other
    engine = EngineConfig(max_model_len=131072, num_gpu_blocks=120, preemption_order=order)
    bench = BenchConfig(workload="react", rate_per_s=2.0, duration_s=40, seed=3, engine=engine)
    spec = PolicySpec("fcfs", "round_robin", "off", None)
    return run_comparison(bench, [spec])[0].summary


def test_shortest_first_changes_which_calls_are_preempted() -> None:
    newest, shortest = _summary("newest"), _summary("shortest")
    assert isinstance(newest["preemptions"], int) and newest["preemptions"] > 0
    assert isinstance(shortest["preemptions"], int) and shortest["preemptions"] > 0
    # the same programs finish; the victims (hence the recompute) differ
    assert shortest["programs_completed"] == newest["programs_completed"]
    assert shortest["preemption_recomputed_tokens"] != newest["preemption_recomputed_tokens"]


def test_sim_flag(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "sim", "--workload", "react", "--rate", "2", "--duration", "10", "--json"]
    assert main([*argv, "--preemption-order", "shortest"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["programs_completed"] > 0
    with pytest.raises(SystemExit):
        main([*argv, "--preemption-order", "oldest"])
    assert "--preemption-order" in capsys.readouterr().err
