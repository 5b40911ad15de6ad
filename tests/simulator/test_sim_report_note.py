"""`bench sim` says so when it compares policies where nothing queues."""

from __future__ import annotations

from typing import Any

import pytest

from agentrt_sim.report import QUIET_WAIT_SHARE, queueing_note

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
