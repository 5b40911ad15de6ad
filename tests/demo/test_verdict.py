"""The summary's verdict: which kinds got faster or slower through the controller, and why."""

from __future__ import annotations

import math

import pytest

from agentrt_demo.analysis import KindStats, Ratios
from agentrt_demo.cluster import CpuTimes, cpu_times, since
from agentrt_demo.verdict import verdict

pytestmark = pytest.mark.timeout(30)


def _stats(kind: str, calls: float, tokens: float, wait_s: float) -> KindStats:
    return KindStats(kind, 10, 10, 1.0, 2.0, 1.5, wait_s, 1.0, 0.5, calls, 0.01, tokens)


def _ratios(**e2e: float) -> dict[str, Ratios]:
    return {kind: Ratios(kind, 10, value, value * 0.9, value * 1.1) for kind, value in e2e.items()}


ROWS = {
    "react": _stats("react", 4, 80, 0.05),
    "mcts": _stats("mcts", 30, 1300, 1.3),
    "all": _stats("all", 8, 310, 0.4),
}


def test_a_long_kind_that_got_slower_yields_to_short_programs_by_design() -> None:
    lines = verdict("plas", _ratios(react=1.25, mcts=0.85, all=1.1), ROWS, ["react", "mcts"])
    text = "\n".join(lines)
    assert lines[0].startswith("Overall the controller made programs faster (mean E2E 1.10x")
    assert "Faster: react 1.25x mean E2E (p95 1.12x, token latency 1.38x, 10 programs)." in text
    (slower,) = [line for line in lines if line.startswith("Slower:")]
    assert slower.startswith("Slower: mcts 0.85x mean E2E")
    assert "PLAS runs first the calls of the programs that have received the least" in slower
    assert "makes 30 LLM calls and generates 1300 tokens (the mix's mean: 8 calls, 310" in slower
    assert "yield to shorter programs' calls" in slower and "held 1.30 s per program" in slower


def test_a_short_kind_that_got_slower_pays_the_controllers_own_cost() -> None:
    (_, slower) = verdict("atlas", _ratios(react=0.9, all=0.95), ROWS, ["react"])
    assert slower.startswith("Slower: react 0.90x") and "ATLAS" in slower
    assert "not the priority order" in slower and "one more hop per call" in slower


def test_fcfs_orders_by_arrival_only() -> None:
    (_, slower) = verdict("fcfs", _ratios(mcts=0.8, all=0.9), ROWS, ["mcts"])
    assert "FCFS orders calls by arrival only" in slower


def test_small_changes_are_unchanged_and_missing_figures_are_not_judged() -> None:
    ratios = _ratios(react=1.02, mcts=0.98, all=1.0)
    ratios["langgraph"] = Ratios("langgraph", 0, math.nan, math.nan, math.nan)
    lines = verdict("plas", ratios, ROWS, ["react", "mcts", "langgraph"])
    assert lines[0].startswith("Overall the controller made programs about as fast")
    assert lines[1].startswith("Unchanged (within ±3%): react 1.02x mean E2E")
    assert "mcts 0.98x" in lines[1]
    assert len(lines) == 2 and "langgraph" not in "".join(lines)


def test_a_starved_controller_is_said_and_a_well_served_one_is_not() -> None:
    ratios = _ratios(react=0.8, all=0.9)
    starved = verdict("plas", ratios, ROWS, ["react"], CpuTimes(running_s=2.0, waiting_s=8.0))
    assert starved[-1].startswith("The machine was busy: the controller process waited 8.0 s")
    served = verdict("plas", ratios, ROWS, ["react"], CpuTimes(running_s=2.0, waiting_s=0.3))
    assert not any("busy" in line for line in served)
    assert served == verdict("plas", ratios, ROWS, ["react"])


def test_cpu_times_of_a_live_and_of_a_missing_process() -> None:
    import os

    mine = cpu_times(os.getpid())
    if mine is None:
        pytest.skip("no /proc/PID/schedstat on this system")
    assert mine.running_s > 0 and mine.waiting_s >= 0
    assert cpu_times(2**22 + 12345) is None  # above Linux's largest pid
    later = CpuTimes(mine.running_s + 1.5, mine.waiting_s + 0.25)
    assert since(mine, later) == CpuTimes(pytest.approx(1.5), pytest.approx(0.25))  # type: ignore[arg-type]
    assert since(None, later) is None and since(mine, None) is None
