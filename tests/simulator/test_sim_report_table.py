"""``bench sim`` / ``bench sweep`` tables: they fit 100 columns without ``--wide``; ``--seeds``
reports medians with ranges; the warm-up exclusion is said under the table."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from agentrt.cli import main
from agentrt_sim.report import TEXT_WIDTH, print_sim_table, print_sweep_table
from agentrt_sim.seeds import over_seeds, parse_seeds

pytestmark = pytest.mark.timeout(120)


def _summary(policy: str, scale: float = 1.0, **extra: Any) -> dict[str, Any]:
    """A run's summary with long numbers in every column (the widest cells)."""
    latency = {"mean": 0.0373 * scale, "p50": 0.0301, "p95": 0.0724 * scale, "p99": 0.1}
    e2e = {"mean": 128.7 * scale, "p50": 100.0, "p95": 399.9 * scale, "p99": 512.0}
    return {
        "policy": policy, "router": "prefix", "retention": "on", "admission_window": "adaptive",
        "rate": 16.0, "programs_completed": int(8670 * scale), "programs_unfinished": 12,
        "throughput_programs_per_s": 13.94 * scale, "token_latency_s": latency,
        "e2e_latency_s": e2e, "wait_s_mean": 0.0825 * scale, "exec_s_mean": 4.42,
        "tool_s_mean": 8.28, "think_s_mean": 0.0, "prefix_hit_rate": 0.958,
        "recomputed_prompt_tokens": 123456, "preemptions": 17, **extra,
    }  # fmt: skip


def _configurations() -> list[dict[str, Any]]:
    return [
        _summary("fcfs"),
        _summary("atlas", tenancy=True, tenancy_mode="on", replicas=4, shard="program"),
        _summary("plas", router="least_loaded", admission_window=None),
    ]


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def test_sim_table_fits_100_columns_and_wide_shows_every_column(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_sim_table(_configurations(), "mixed @ 16 programs/s, 9,999 programs arrived (seed 1)")
    narrow = _lines(capsys.readouterr().out)
    assert max(len(line) for line in narrow) <= TEXT_WIDTH, "\n".join(narrow)
    assert not any("…" in line for line in narrow)
    # What varies is in the configuration column; what every row shares is said once.
    assert any("policy router window" in line for line in narrow)
    assert any("atlas+tenancy x4 by program" in line for line in narrow)
    assert any("every row: retention on" in line for line in narrow)
    assert not any("recomputed" in line for line in narrow)
    print_sim_table(_configurations(), "title", wide=True)
    wide = capsys.readouterr().out
    for header in ("recomputed", "preempt", "exec", "tool", "think", "tok lat p95"):
        assert header in wide


def test_seeds_give_medians_and_ranges_and_the_table_still_fits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    runs = [[_summary("fcfs", s), _summary("plas", s)] for s in (1.0, 1.2, 0.9)]
    runs[1][0]["prefix_hit_rate"] = math.nan  # a seed that could not measure it
    merged = over_seeds(runs, [1, 2, 3])
    fcfs = merged[0]
    assert fcfs["policy"] == "fcfs" and fcfs["seeds"] == [1, 2, 3]
    assert fcfs["e2e_latency_s"]["mean"] == pytest.approx(128.7)
    assert fcfs["seed_range"]["e2e_latency_s"]["mean"] == pytest.approx([128.7 * 0.9, 128.7 * 1.2])
    assert fcfs["programs_completed"] == 8670
    assert fcfs["prefix_hit_rate"] == pytest.approx(0.958)  # median of the two measured
    assert "policy" not in fcfs["seed_range"]
    print_sim_table(merged, "seeds")
    out = _lines(capsys.readouterr().out)
    assert max(len(line) for line in out) <= TEXT_WIDTH, "\n".join(out)
    assert not any("…" in line for line in out)
    ranges = ["range", "7,803-10,404", "13-17", "0.034-0.045", "116-154", "360-480",
              "0.074-0.099", "96-96"]  # fmt: skip
    assert any(line.split() == ranges for line in out), out
    assert any("median over seeds 1,2,3" in line for line in out)


def test_sweep_table_fits_100_columns(capsys: pytest.CaptureFixture[str]) -> None:
    results = [_summary(p, rate=r) for r in (0.5, 1.0, 2.0) for p in ("fcfs", "atlas")]
    print_sweep_table(results, {"fcfs": 1.0, "atlas": 2.0}, notes=["seed 1"])
    out = _lines(capsys.readouterr().out)
    assert max(len(line) for line in out) <= TEXT_WIDTH, "\n".join(out)
    assert any("atlas: keeps up to 2 programs/s" in line for line in out)


@pytest.mark.parametrize(
    ("text", "message"),
    [("1,x", "integers, got 'x'"), ("1,1", "seed 1 twice"), ("", "integers, got ''")],
)
def test_bad_seed_lists_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_seeds(text)
    assert parse_seeds(" 3, 1 ") == [3, 1]


_SMALL = ["bench", "sim", "--workload", "react", "--rate", "2", "--duration", "20",
          "--policy", "fcfs", "--admission-window", "8", "--no-progress"]  # fmt: skip


def test_bench_sim_seeds_runs_each_seed_and_reports_the_median(
    capsys: pytest.CaptureFixture[str],
) -> None:
    per_seed = []
    for seed in ("1", "2", "3"):
        assert main([*_SMALL, "--seed", seed, "--json"]) == 0
        per_seed.append(json.loads(capsys.readouterr().out)[0])
    assert main([*_SMALL, "--seeds", "1,2,3", "--json"]) == 0
    (merged,) = json.loads(capsys.readouterr().out)
    completed = sorted(r["programs_completed"] for r in per_seed)
    assert merged["seeds"] == [1, 2, 3]
    assert merged["programs_completed"] == completed[1]
    assert merged["seed_range"]["programs_completed"] == [completed[0], completed[2]]
    e2e = sorted(r["e2e_latency_s"]["p95"] for r in per_seed)
    assert merged["e2e_latency_s"]["p95"] == pytest.approx(e2e[1])
    assert main([*_SMALL, "--seeds", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "seeds 1,2" in out and "warm-up (the first 2 s" in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= TEXT_WIDTH


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--seed", "1", "--seeds", "2,3"], "give --seed or --seeds, not both"),
        (["--seeds", "1,2", "--plot", "out"], "--plot takes one seed"),
        (["--seeds", "1,b"], "got 'b'"),
    ],
)
def test_bad_seed_options_are_errors(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main([*_SMALL, *extra]) == 2
    assert message in capsys.readouterr().err
