"""`bench sim` says so when it compares policies where nothing queues."""

from __future__ import annotations

from typing import Any

import pytest

from agentrt_sim.report import QUIET_WAIT_SHARE, queueing_note, unfinished_note

pytestmark = pytest.mark.timeout(30)


def _row(policy: str, wait_s: float, e2e_s: float = 100.0, completed: int = 10) -> dict[str, Any]:
    return {
        "policy": policy,
        "wait_s_mean": wait_s,
        "e2e_latency_s": {"mean": e2e_s},
        "programs_completed": completed,
    }


def test_policies_compared_where_nothing_waits_get_a_note() -> None:
    note = queueing_note([_row("fcfs", 0.45), _row("plas", 0.42)])
    assert note is not None
    assert "0.5 %" in note and "--max-num-seqs" in note and "--rate" in note


@pytest.mark.parametrize(
    "rows",
    [
        [_row("fcfs", 0.45), _row("plas", 100 * QUIET_WAIT_SHARE)],  # one run queues
        [_row("fcfs", 0.1), _row("fcfs", 0.1)],  # one policy: nothing to compare
        [_row("fcfs", 0.1), _row("plas", 0.1, completed=0)],  # a run finished nothing
    ],
)
def test_no_note_where_calls_queue_or_nothing_is_compared(rows: list[dict[str, Any]]) -> None:
    assert queueing_note(rows) is None


def test_programs_left_running_when_the_run_stopped_get_a_note() -> None:
    rows = [
        {**_row("plas", 5.0), "programs_unfinished": 12, "sim_end_s": 179.996},
        {**_row("fcfs", 5.0), "programs_unfinished": 0, "sim_end_s": 179.997},
    ]
    note = unfinished_note(rows)
    assert note is not None
    assert "still running when the run stopped at 180 s (per row: 12, 0)" in note
    assert "--drain" in note
    finished = [{**row, "programs_unfinished": 0} for row in rows]
    assert unfinished_note(finished) is None
    assert unfinished_note([_row("plas", 5.0)]) is None  # a summary without the count


def test_the_simulator_table_prints_the_note_with_a_short_drain(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from agentrt.cli import main

    argv = ["bench", "sim", "--workload", "mixed", "--rate", "0.6", "--duration", "30",
            "--seed", "1", "--engines", "1", "--max-num-seqs", "2", "--no-progress"]  # fmt: skip
    assert main([*argv, "--drain", "5"]) == 0
    assert "still running when the run stopped at 35 s" in capsys.readouterr().out
    assert main([*argv, "--drain", "3000"]) == 0
    assert "still running" not in capsys.readouterr().out
