"""``agentrt demo`` refuses bad options before it starts anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.cli import main

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--router", "nope"], "controller.router: must be 'prefix', 'round_robin'"),
        (["--programs", "0"], "programs must be >= 1"),
        (["--time-scale", "-1"], "time_scale must be a positive number"),
        (["--window", "wide"], "--window must be N, adaptive or unlimited, got 'wide'"),
        (["--window", "0"], "admission_window must be >= 1"),
        (["--max-num-seqs", "0"], "max_num_seqs must be >= 1"),
        (["--num-gpu-blocks", "10"], "num_gpu_blocks must be >= 64"),
        (["--models", "a,a"], "models must differ, got ['a', 'a']"),
        (["--models", " , "], "models must be non-empty names"),
        (["--models", "a,b,c"], "engines must be >= the number of models (3)"),
    ],
)
def test_bad_options_exit_2_with_a_message_and_start_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    out = tmp_path / "out"
    assert main(["demo", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentrt demo: ") and message in err
    assert not out.exists()


def test_an_unknown_policy_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["demo", "--policy", "srpt"])
    assert caught.value.code == 2
    assert "invalid choice: 'srpt'" in capsys.readouterr().err
