"""benchmarks/prompt_cpu_ab.py: its report and its reading of on-CPU time (no timing here)."""

from __future__ import annotations

import os

import pytest

from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(30)

ab = load_benchmark("prompt_cpu_ab")


def test_the_report_gives_medians_ranges_ratios_and_the_growth_per_build() -> None:
    per_call = {
        ("base", 1000): [400.0, 500.0, 450.0],
        ("new", 1000): [400.0, 500.0, 450.0],
        ("base", 128000): [2000.0, 1800.0, 2200.0],
        ("new", 128000): [1000.0, 900.0, 1100.0],
    }
    text = ab.report(per_call, [1000, 128000])
    lines = text.splitlines()
    assert "  1,000 words: base    450 [400–500]  new    450 [400–500]  new ÷ base 1.00" in lines[1]
    assert "new ÷ base 0.50 [0.50–0.50]" in lines[2]
    assert lines[3] == "base: 128,000 words ÷ 1,000 words = 4.44"
    assert lines[4] == "new: 128,000 words ÷ 1,000 words = 2.22"


def test_on_cpu_time_of_this_process_grows_as_it_works() -> None:
    before = ab.on_cpu_s(os.getpid())
    sum(i * i for i in range(200_000))
    assert ab.on_cpu_s(os.getpid()) > before > 0
