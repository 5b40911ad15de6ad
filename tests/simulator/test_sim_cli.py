"""``agentrt bench``: JSON keys, errors, plots, sweep, fig2 — in process, small runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrt.cli import main
from agentrt_controller import defaults

pytestmark = pytest.mark.timeout(120)

REQUIRED_KEYS = {
    "workload",
    "rate",
    "policy",
    "router",
    "retention",
    "engines",
    "programs_completed",
    "throughput_programs_per_s",
    "arrival_rate_per_s",
    "token_latency_s",
    "e2e_latency_s",
    "wait_s_mean",
    "exec_s_mean",
    "tool_s_mean",
    "prefix_hit_rate",
    "recomputed_prompt_tokens",
}


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> object:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_sim_json_has_the_required_keys_per_configuration(
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = _json(
        capsys,
        [
            "bench",
            "sim",
            "--workload",
            "react",
            "--rate",
            "2",
            "--duration",
            "20",
            "--seed",
            "3",
            "--policy",
            "fcfs,plas",
            "--admission-window",
            "8",
            "--json",
        ],
    )
    assert isinstance(results, list) and [r["policy"] for r in results] == ["fcfs", "plas"]
    for result in results:
        assert set(result) >= REQUIRED_KEYS
        assert set(result["token_latency_s"]) == {"mean", "p50", "p95", "p99"}
        assert result["programs_completed"] > 0 and result["admission_window"] == 8


def test_sim_table_plots_and_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "programs.jsonl"
    argv = [
        "bench",
        "sim",
        "--workload",
        "chatbot",
        "--rate",
        "1",
        "--duration",
        "15",
        "--workload-param",
        "chatbot.think_mean_s=0",
        "--trace-out",
        str(trace),
        "--plot",
        str(tmp_path / "plots"),
        "--no-progress",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert defaults.POLICY in out and "tok lat" in out and "warm-up" in out
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "breakdown.png",
        "e2e_cdf.png",
        "token_latency.png",
    ]
    replay = _json(capsys, ["bench", "sim", "--trace-in", str(trace), "--json"])
    assert isinstance(replay, list) and replay[0]["workload"].startswith("trace:")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policy", "fcfs,nope"], "unknown scheduling policy 'nope'; valid: fcfs, mlfq"),
        (["--router", "nope"], "unknown router 'nope'; valid: round_robin"),
        (["--retention", "sometimes"], "unknown retention 'sometimes'; valid: on, off, ttl"),
        (["--workload", "nope"], "unknown workload 'nope'; valid: chatbot, react"),
        (["--profile", "nope"], "unknown hardware profile 'nope'; valid profiles: "),
        (["--admission-window", "0"], "admission window must be an integer >= 1"),
        (["--cost", "colour=1"], "cost.colour: unknown key"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["bench", "sim", "--duration", "5", "--json", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err


def test_sweep_reports_saturation_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _json(
        capsys,
        [
            "bench",
            "sweep",
            "--workload",
            "react",
            "--rates",
            "0.5,1",
            "--duration",
            "20",
            "--policy",
            "fcfs",
            "--json",
            "--plot",
            str(tmp_path),
        ],
    )
    assert isinstance(results, list) and [r["rate"] for r in results] == [0.5, 1.0]
    assert all("saturation_rate" in r for r in results)
    assert (tmp_path / "sweep_mean.png").stat().st_size > 0


def test_fig2_json_prints_fcfs_18(capsys: pytest.CaptureFixture[str]) -> None:
    results = _json(capsys, ["bench", "fig2", "--json"])
    assert isinstance(results, dict)
    assert results["fcfs"]["total_wait"] == 18
    assert "plas" in results
