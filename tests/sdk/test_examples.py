"""Must-show: each example runs with one command against the embedded engine emulator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("react_agent.py", "program p-"),
        ("map_reduce_summarize.py", "lighthouse.txt: 7 chunks, 8 LLM calls in 8 threads"),
        ("mcts_puzzle.py", "expansions; tree of"),
        ("plan_and_verify.py", "2 on planner-8b, 4 on verifier-1b"),
    ],
)
def test_example_runs_against_the_embedded_emulator(
    script: str, expected: str, tmp_path: Path
) -> None:
    command = [sys.executable, str(EXAMPLES / script), "--time-scale", "200"]
    if script == "react_agent.py":
        command += ["--out-dir", str(tmp_path / "out")]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=80, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout, done.stdout
    assert "ok" in done.stdout


def test_the_puzzle_checker_is_exact() -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        from mcts_puzzle import solves  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(EXAMPLES))
    assert solves(["x", "Answer: (7 - 8 / 8) * 4"], [4, 7, 8, 8], 24)
    assert not solves(["Answer: 8 * 3"], [4, 7, 8, 8], 24)  # wrong numbers
    assert not solves(["Answer: (7 - 8 / 8) * 4 + 1"], [4, 7, 8, 8], 24)
    assert not solves(["Answer: import os"], [4, 7, 8, 8], 24)
    assert not solves([], [4, 7, 8, 8], 24)
