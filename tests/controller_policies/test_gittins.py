"""The program-level Gittins index (``scheduling/gittins.py``; docs/scheduling.md, "Gittins:
learning the size of programs"): the rank on a sample, what is learned and when, the order."""

from __future__ import annotations

import itertools
import math

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.scheduling.gittins import (
    MAX_KINDS,
    GittinsScheduler,
    SizeSample,
    gittins_rank,
)
from tests.controller_policies.helpers import make_call

pytestmark = pytest.mark.timeout(30)


def _rank(sizes: list[float], attained_s: float) -> float:
    ordered = sorted(sizes)
    return gittins_rank(ordered, [0.0, *itertools.accumulate(ordered)], attained_s)


def _brute_rank(sizes: list[float], attained_s: float) -> float:
    """The definition, over a fine grid of Δ and every remaining size:
    min E[min(S − a, Δ) | S > a] / P(S − a ≤ Δ | S > a)."""
    above = [s - attained_s for s in sizes if s > attained_s]
    best = math.inf
    grid = [step * max(above) / 4000 for step in range(1, 4001)]
    for delta in sorted([*grid, *above]):
        done = sum(1 for r in above if r <= delta)
        if done:
            best = min(best, sum(min(r, delta) for r in above) / done)
    return best


def test_known_size_ranks_by_remaining_service_as_srpt() -> None:
    """Every program takes 10 s: the rank is the remaining service."""
    assert _rank([10.0] * 5, 0.0) == 10.0
    assert _rank([10.0] * 5, 4.0) == 6.0
    assert _rank([10.0] * 5, 10.0) == math.inf


def test_two_sizes_a_fresh_program_first_then_an_old_one_last() -> None:
    """Half the programs take 1 s, half 100 s. A fresh program finishes in 1 s with
    probability ½: rank (1 + 1) / 1 = 2. Past 1 s it is a 100-s program: rank 98 at 2 s."""
    assert _rank([1.0, 100.0], 0.0) == 2.0
    assert _rank([1.0, 100.0], 2.0) == 98.0


def test_worked_sample_matches_the_definition() -> None:
    """Sizes 1, 2, 3, 100, 200 at attained 0: Δ = 3 finishes 3 of 5 with 1 + 2 + 3 + 3 + 3 = 12
    s of service: rank 4 (Δ = 1: 5, Δ = 2: 4.5, Δ = 100: 51.5)."""
    sizes = [1.0, 2.0, 3.0, 100.0, 200.0]
    assert _rank(sizes, 0.0) == 4.0
    for attained in (0.0, 0.5, 2.5, 50.0, 150.0):
        assert _rank(sizes, attained) == pytest.approx(_brute_rank(sizes, attained), rel=1e-3)


def test_nothing_changes_before_programs_finish() -> None:
    """No sample yet: a call enters with its program's attained service, as PLAS."""
    scheduler = GittinsScheduler()
    plas = build_scheduler("plas")
    for policy in (scheduler, plas):
        call = make_call("p")
        policy.submit(call, 0.0)
        policy.pop(0.0)
        policy.on_finish(call, 3.0, 1.0)
        nxt = make_call("p", 2.0)
        policy.submit(nxt, 2.0)
        assert nxt.priority_s == 3.0


def _finish_program(scheduler: GittinsScheduler, program: str, service_s: float, kind: str) -> None:
    key = make_call(program).facts.program
    scheduler.table.start(key, 0.0, name=kind)
    call = make_call(program)
    scheduler.submit(call, 0.0)
    assert scheduler.pop(0.0) is call
    scheduler.on_finish(call, service_s, 0.0)
    scheduler.on_program_end(key, 0.0)


def test_learns_program_sizes_at_their_end_and_serves_the_nearly_done_first() -> None:
    """Coding programs all take 100 s. Learned from 8 that ended, a program that attained 90 s
    (10 s left) ranks 10 and goes before a new one (rank 100); PLAS would serve the new one."""
    scheduler = GittinsScheduler()
    for index in range(8):
        _finish_program(scheduler, f"done{index}", 100.0, "coding")
    assert scheduler.sizes.snapshot() == {"*": 8, "coding": 8}
    old_key = make_call("old").facts.program
    scheduler.table.start(old_key, 0.0, name="coding")
    first = make_call("old")
    scheduler.submit(first, 0.0)
    scheduler.pop(0.0)
    scheduler.on_finish(first, 90.0, 1.0)
    new_key = make_call("new").facts.program
    scheduler.table.start(new_key, 2.0, name="coding")
    fresh = make_call("new", 2.0)
    scheduler.submit(fresh, 2.0)
    old = make_call("old", 3.0)
    scheduler.submit(old, 3.0)
    assert old.priority_s == pytest.approx(10.0)
    assert fresh.priority_s == pytest.approx(100.0)
    assert scheduler.pop(4.0) is old
    assert scheduler.pop(4.0) is fresh


def test_a_kind_ranks_on_its_own_sample_then_on_all_kinds_and_outliers_go_first() -> None:
    sample = SizeSample(min_samples=2)
    for size in (1.0, 1.0, 1.0):
        sample.record("react", size)
    for size in (50.0, 60.0, 70.0):
        sample.record("coding", size)
    # A react program ranks on react's sample; an unknown kind on all six.
    assert sample.rank_s("react", 0.0) == pytest.approx(1.0)
    assert sample.rank_s("other", 0.0) == pytest.approx(_rank([1, 1, 1, 50, 60, 70], 0.0))
    # A "react" program past every react size ranks on all kinds' sample (it is no react
    # program): a name claimed falsely buys nothing once outgrown.
    assert sample.rank_s("react", 20.0) == pytest.approx(_rank([50, 60, 70], 20.0))
    # Past nearly every program seen: first (it holds the most KV; finishing it frees it).
    assert sample.rank_s("coding", 65.0) == 0.0
    # Too few programs finished: no rank (the scheduler then uses attained service, as PLAS).
    assert SizeSample(min_samples=7).rank_s("coding", 0.0) is None


def test_bad_sizes_are_ignored_and_bad_parameters_refused() -> None:
    sample = SizeSample()
    sample.record("k", math.nan)
    sample.record("k", -1.0)
    assert len(sample) == 0
    with pytest.raises(ConfigError, match="min_samples"):
        SizeSample(min_samples=0)


def test_kinds_are_bounded_further_kinds_teach_all_kinds_only() -> None:
    sample = SizeSample(min_samples=1)
    for index in range(MAX_KINDS + 10):
        sample.record(f"kind{index}", 1.0)
    snapshot = sample.snapshot()
    assert len(snapshot) == MAX_KINDS + 1  # the kinds and "*"
    assert snapshot["*"] == MAX_KINDS + 10


def test_the_sample_keeps_the_last_programs_only() -> None:
    sample = SizeSample(capacity=4, min_samples=1)
    for size in (1.0, 2.0, 3.0, 4.0, 100.0, 100.0, 100.0, 100.0):
        sample.record("k", size)
    assert sample.rank_s("k", 0.0) == pytest.approx(100.0)


def test_snapshot_names_the_policy_and_what_it_learned() -> None:
    scheduler = build_scheduler("gittins")
    assert isinstance(scheduler, GittinsScheduler)
    _finish_program(scheduler, "a", 5.0, "react")
    snap = scheduler.snapshot(0.0)
    assert snap["policy"] == "gittins"
    assert snap["learned_programs"] == {"*": 1, "react": 1}
