"""``benchmarks/feature_cost.py``'s parts that need no controller: its configurations and
options, the interleaving order, and the report (the run itself starts a controller per
configuration and takes minutes: not in CI)."""

from __future__ import annotations

import argparse

import pytest

from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(30)

cost = load_benchmark("feature_cost")


def test_each_configuration_is_the_defaults_plus_its_flags() -> None:
    assert cost.split_flags(()) == ("plas", "adaptive", ())
    assert cost.split_flags(("--retention", "off")) == ("plas", "adaptive", ("--retention", "off"))
    assert cost.split_flags(cost.CONFIGS["all-off"]) == (
        "fcfs",
        "unlimited",
        ("--access-log", "off", "--retention", "off", "--router", "round_robin"),
    )
    # "all off" is every single cheap change at once (the slow path and the floor aside)
    singles = {
        flag
        for name, flags in cost.CONFIGS.items()
        if name not in ("defaults", "all-off", "asgi", cost.FLOOR)
        for flag in flags
    }
    assert singles == set(cost.CONFIGS["all-off"])


def test_configurations_are_chosen_by_name_and_unknown_ones_named() -> None:
    assert cost.config_names("") == list(cost.CONFIGS)
    assert cost.config_names("defaults, python-floor") == ["defaults", "python-floor"]
    with pytest.raises(argparse.ArgumentTypeError, match="nope"):
        cost.config_names("defaults,nope")


def test_each_repetition_runs_every_configuration_once_in_rotated_order() -> None:
    names = ["a", "b", "c"]
    orders = [cost.rotation(names, rep) for rep in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def _reps() -> list[dict[str, dict[str, float | None]]]:
    return [
        {
            "defaults": {"cpu_us_per_call": 200.0, "cpu_us_per_chunk": 10.0},
            "access-log-off": {"cpu_us_per_call": 180.0, "cpu_us_per_chunk": 9.0},
            "python-floor": {"cpu_us_per_call": 30.0, "cpu_us_per_chunk": None},
        },
        {
            "defaults": {"cpu_us_per_call": 240.0, "cpu_us_per_chunk": 12.0},
            "access-log-off": {"cpu_us_per_call": 230.0, "cpu_us_per_chunk": 11.0},
            "python-floor": {"cpu_us_per_call": 40.0, "cpu_us_per_chunk": None},
        },
        {
            "defaults": {"cpu_us_per_call": 220.0, "cpu_us_per_chunk": 11.0},
            "access-log-off": {"cpu_us_per_call": 190.0, "cpu_us_per_chunk": 10.0},
            "python-floor": {"cpu_us_per_call": 35.0, "cpu_us_per_chunk": None},
        },
    ]


def test_the_summary_gives_medians_ranges_and_differences_paired_by_repetition() -> None:
    summary = cost.summarise(_reps())
    assert summary["defaults"]["cpu_us_per_call"] == {"median": 220.0, "min": 200.0, "max": 240.0}
    assert "cpu_us_per_call_minus_defaults" not in summary["defaults"]
    # paired: -20, -10, -30 (not the difference of the medians, -30)
    assert summary["access-log-off"]["cpu_us_per_call_minus_defaults"] == {
        "median": -20.0,
        "min": -30.0,
        "max": -10.0,
    }
    assert summary["python-floor"]["cpu_us_per_call_minus_defaults"]["median"] == -185.0
    # the floor relays no streamed answers: no figure per chunk, and no difference
    assert set(summary["python-floor"]) == {"cpu_us_per_call", "cpu_us_per_call_minus_defaults"}


def test_without_defaults_there_are_no_differences() -> None:
    reps = [{"python-floor": rep["python-floor"]} for rep in _reps()]
    assert set(cost.summarise(reps)["python-floor"]) == {"cpu_us_per_call"}


def test_the_table_names_flags_and_marks_missing_figures() -> None:
    result = {
        "machine": "x86_64, 2 cores, Python 3.11.7",
        "reps": 3,
        "concurrency": 16,
        "seconds_per_call_run": 3.0,
        "seconds_per_stream_run": 3.0,
        "stream_chunks": 64,
        "load_average": [5.0, 6.0],
        "configs": cost.summarise(_reps()),
    }
    lines = cost.markdown(result).splitlines()
    assert "3 interleaved repetitions" in lines[0]
    assert "1-minute load 5.0 before, 6.0 after" in lines[0]
    assert lines[2].startswith("| configuration | CPU µs per call |")
    assert lines[4] == "| defaults | **220 [200 … 240]** | — | 11.0 [10.0 … 12.0] | — |"
    assert lines[5] == (
        "| `--access-log off` | **190 [180 … 230]** | -20 [-30 … -10] | 10.0 [9.0 … 11.0] "
        "| -1.0 [-1.0 … -1.0] |"
    )
    assert lines[6] == "| python-floor | **35 [30 … 40]** | -185 [-200 … -170] | — | — |"


def test_help_lists_every_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cost.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in cost.CONFIGS:
        assert name in text
    assert "--reps" in text and "--json" in text


def test_fewer_than_one_repetition_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cost.main(["--reps", "0"])
    assert "--reps must be at least 1" in capsys.readouterr().err


def test_a_difference_that_rounds_to_zero_prints_without_a_sign() -> None:
    figures = {"d": {"median": -0.3, "min": -33.2, "max": -0.4}}
    assert cost._cell(figures, "d", 0, signed=True) == "+0 [-33 … +0]"
    assert cost._cell(figures, "d", 1, signed=True) == "-0.3 [-33.2 … -0.4]"
