"""``--prompt-calibration``: ``agentrt bench sim`` draws (and saves as a trace) the programs of
the chosen calibration; ``engine`` is the default (docs/simulator.md, "Calibration")."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.cli import main
from agentrt_sim.workloads.trace import load_trace

pytestmark = pytest.mark.timeout(120)


def _trace(tmp_path: Path, *extra: str) -> list[int]:
    trace = tmp_path / f"programs{len(extra)}.jsonl"
    argv = ["bench", "sim", "--workload", "react", "--rate", "1", "--duration", "8"]
    argv += ["--workload-param", "react.tool_time_scale=0", "--no-progress", "--json"]
    assert main([*argv, "--trace-out", str(trace), *extra]) == 0
    return [program.system_prompt_tokens for program in load_trace(trace)]


def test_prompt_calibration_flag_selects_the_programs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    default = _trace(tmp_path)
    fresh = _trace(tmp_path, "--prompt-calibration", "fresh")
    capsys.readouterr()
    assert default and set(default) == {200}  # engine: a 200-token system prompt
    assert len(fresh) == len(default) and set(fresh) == {1500}  # fresh: the earlier 1,500


def test_unknown_prompt_calibration_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "sim", "--prompt-calibration", "visible"])
    assert exc.value.code == 2
    assert "engine" in capsys.readouterr().err
