"""``agentrt bench replay``: JSON output against an emulator, and its errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrt.cli import main
from agentrt_emulator.server import EmulatorConfig, serve_engine_in_thread
from tests.ops.processes import free_port

from .helpers import TRACE

pytestmark = pytest.mark.timeout(60)

#: Keys of ``agentrt bench sim --json`` (tests/simulator/test_sim_cli.py checks the same).
SIM_KEYS = {
    "workload",
    "rate",
    "policy",
    "router",
    "retention",
    "engines",
    "warmup_s",
    "programs_completed",
    "throughput_programs_per_s",
    "arrival_rate_per_s",
    "token_latency_s",
    "e2e_latency_s",
    "ttft_s",
    "wait_s_mean",
    "exec_s_mean",
    "tool_s_mean",
    "think_s_mean",
    "prefix_hit_rate",
    "recomputed_prompt_tokens",
    "sim_end_s",
}


def test_replay_json_against_the_emulator(capsys: pytest.CaptureFixture[str]) -> None:
    with serve_engine_in_thread(EmulatorConfig(time_scale=20)) as engine:
        argv = ["bench", "replay", "--trace", str(TRACE), "--base-url", engine.openai_base_url]
        code = main([*argv, "--time-scale", "20", "--max-programs", "2", "--json"])
    assert code == 0
    [summary] = json.loads(capsys.readouterr().out)
    assert set(summary) >= SIM_KEYS
    assert summary["programs_completed"] + summary["programs_warmup"] == 2
    assert summary["programs_failed"] == 0
    assert summary["model"] == "agentrt/emulated-llama-3.1-8b"
    assert summary["template_costs_measured"] is True
    assert summary["prompt_tokens"] == summary["prompt_tokens_trace"]
    assert summary["e2e_latency_s"]["p50"] > 0


def test_a_bad_trace_is_exit_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"program_id": "p", "arrival_s": 0, "nodes": [], "typo": 1}\n')
    code = main(["bench", "replay", "--trace", str(trace), "--base-url", "http://h:1/v1"])
    assert code == 2
    assert f"{trace}:1" in capsys.readouterr().err


def test_a_missing_trace_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.jsonl"
    assert main(["bench", "replay", "--trace", str(missing), "--base-url", "http://h:1/v1"]) == 2
    assert "cannot read trace" in capsys.readouterr().err


def test_an_unreachable_server_is_exit_2_naming_the_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    assert main(["bench", "replay", "--trace", str(TRACE), "--base-url", url]) == 2
    err = capsys.readouterr().err
    assert "cannot reach" in err and url in err


def test_a_base_url_without_v1_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "replay", "--trace", str(TRACE), "--base-url", "http://h:1"]) == 2
    assert "ending in /v1" in capsys.readouterr().err


def test_a_negative_max_retries_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "replay", "--trace", str(TRACE), "--base-url", "http://h:1/v1"]
    assert main([*argv, "--max-retries", "-1"]) == 2
    assert "--max-retries must be >= 0" in capsys.readouterr().err


def test_help_documents_max_retries(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--max-retries N" in text and "cut before [DONE]" in text
