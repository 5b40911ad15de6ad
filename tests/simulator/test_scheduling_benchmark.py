"""benchmarks/scheduling.py: the saturation probe's search and the report (no simulation: the
runs are replaced by a model whose saturation is known, so the search itself is checked)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(300)  # a shared 2-core machine runs these several times slower


class FakeRuns:
    """Stands in for ``run_comparison``: an FCFS engine that serves at most ``capacity``
    programs/s, whose programs take ``e2e_p95`` s at light load; records every run."""

    def __init__(self, capacity: float, e2e_p95: float) -> None:
        self.capacity = capacity
        self.e2e_p95 = e2e_p95
        self.runs: list[Any] = []

    def __call__(self, bench: Any, specs: Sequence[Any], **options: Any) -> list[Any]:
        self.runs.append((bench, specs, options))
        rate = bench.rate_per_s
        summary = {
            "policy": specs[0].policy,
            "rate": rate,
            "arrival_rate_per_s": rate,
            "throughput_programs_per_s": min(rate, self.capacity),
            "programs_completed": 500,
            "programs_unfinished": 0 if rate <= self.capacity else 50,
            "e2e_latency_s": {"p95": self.e2e_p95},
        }
        return [SimpleNamespace(summary=summary)]


def test_probe_finds_the_capacity_by_ladder_then_bisection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = load_benchmark("scheduling")
    fake = FakeRuns(capacity=0.33, e2e_p95=300.0)
    monkeypatch.setattr(bench, "run_comparison", fake)
    found = bench.find_saturation("mcts", 600.0, 1, bench.Setup())
    # 0.3 keeps up, 0.4 does not; bisection: 0.35 no, 0.325 yes, 0.3375 no → 0.325
    assert found.rate == pytest.approx(0.325)
    # warm-up twice the light-load p95 E2E; window ≥ 6× warm-up and ≥ 400 measured programs
    assert found.warmup_s == pytest.approx(600.0)
    assert found.duration_s == pytest.approx(max(3600.0, 600.0 + 400 / 0.325))
    probes = [b for b, _, _ in fake.runs[1:]]  # the first run measures the light-load E2E
    assert all(b.warmup_s == pytest.approx(600.0) for b in probes)
    assert all((b.duration_s - b.warmup_s) * b.rate_per_s >= 400 - 1e-9 for b in probes)


def test_probe_with_short_programs_keeps_the_requested_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = load_benchmark("scheduling")
    monkeypatch.setattr(bench, "run_comparison", FakeRuns(capacity=2.2, e2e_p95=5.0))
    found = bench.find_saturation("react", 600.0, 1, bench.Setup())
    assert 2.0 <= found.rate <= 2.2
    assert found.warmup_s == pytest.approx(60.0)  # 10 % of the requested 600 s
    assert found.duration_s == pytest.approx(600.0)


def test_runs_charge_the_product_defaults_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = load_benchmark("scheduling")
    fake = FakeRuns(capacity=2.2, e2e_p95=5.0)
    monkeypatch.setattr(bench, "run_comparison", fake)
    bench.find_saturation("react", 600.0, 1, bench.Setup(max_num_seqs=8))
    for run, specs, options in fake.runs:
        (spec,) = specs
        assert (spec.policy, spec.admission_window, spec.router, spec.retention) == (
            "fcfs",
            "adaptive",
            "prefix",
            "on",
        )
        assert run.engine.max_num_seqs == 8
        # the controller's default cost model: 1e-4 s per prompt token, 1e-2 s per output token
        assert options["cost_model"](1000, 10) == pytest.approx(0.2)
    old = bench.Setup(window=32, router="round_robin", retention="off", cost="roofline")
    fake.runs.clear()
    bench.find_saturation("react", 600.0, 1, old)
    _, specs, options = fake.runs[0]
    assert (specs[0].admission_window, specs[0].router, specs[0].retention) == (
        32,
        "round_robin",
        "off",
    )
    assert options["cost_model"] is None


def test_saturation_items_and_the_rates_table() -> None:
    bench = load_benchmark("scheduling")
    known = bench._known(["mixed@8=0.4", "react=2"], table=True)
    assert known["mixed", 8] == pytest.approx(0.4)
    assert known["react", None] == pytest.approx(2.0)
    assert known["mixed", None] == pytest.approx(1.35)  # agentrt_sim.rates
    with pytest.raises(SystemExit):
        bench._known(["mixed"], table=False)


def _rows() -> list[dict[str, Any]]:
    rows = []
    for slots in (256, 8):
        for load in bench_loads():
            for i, policy in enumerate(("fcfs", "mlfq", "plas", "atlas", "srpt")):
                latency = 0.1 * load * (1.0 if policy in ("fcfs", "mlfq") else 0.5 - 0.05 * i)
                rows.append(
                    {
                        "workload": "mixed",
                        "slots": slots,
                        "load": load,
                        "rate": round(0.28 * load, 4),
                        "saturation": 0.28,
                        "saturation_source": "given",
                        "duration_s": 1586.0,
                        "warmup_s": 163.0,
                        "policy": policy,
                        "token_latency_mean_s": latency,
                        "token_latency_p95_s": 2 * latency,
                        "e2e_mean_s": 100 * latency,
                        "e2e_p95_s": 300 * latency,
                        "throughput": 0.2 if policy == "fcfs" else 0.25,
                        "arrival_rate": 0.28 * load,
                        "unfinished": 7 if policy == "fcfs" and load > 1 else 0,
                    }
                )
    return rows


def bench_loads() -> tuple[float, ...]:
    return (0.5, 0.8, 1.0, 1.5)


def test_report_from_json_writes_table_ratios_and_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_benchmark("scheduling")
    saved = tmp_path / "rows.json"
    saved.write_text(json.dumps(_rows()))
    docs = tmp_path / "docs"
    (docs / "img").mkdir(parents=True)
    stale = "# Benchmarks\n\n## Scheduling\nstale-figures\n\n## Other\nkept\n"
    (docs / "benchmarks.md").write_text(stale)
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    monkeypatch.setattr(
        sys,
        "argv",
        ["scheduling.py", "--from-json", str(saved), "--command", "CMD", "--write-docs"],
    )
    assert bench.main() == 0
    text = (docs / "benchmarks.md").read_text()
    assert "stale-figures" not in text and "## Other\nkept" in text
    assert "Command: `CMD`" in text
    assert "policy=<varies> window=adaptive router=prefix retention=on" in text
    assert "| mixed | 256 | 0.28 (given) | 1586 | 163 |" in text
    assert "| mixed | 8 | 0.28 (given) | 1586 | 163 |" in text
    # at 1.0×: FCFS 0.1, best of ours = ATLAS 0.1 × (0.5 − 0.15) = 0.035, SRPT 0.03;
    # PLAS 0.04: E2E mean 4.0 and p95 12.0 against FCFS 10 and 30; throughput 0.25 / 0.2
    assert "| mixed | 8 | 1.0× | 2.86× | 2.86× | 1.17× | 2.50× / 2.50× | 1.25× |" in text
    assert (
        "| mixed | 256 | 1.5× | 0.42 | fcfs | 0.1500 / 0.3000 | 1.00× | 15.0 / 45.0 "
        "| 1.00× / 1.00× | 0.200 (0.420) | 7 |"
    ) in text
    assert "| mixed | 256 | 1.5× | 0.42 | plas | 0.0600 / 0.1200 | 0.40× | 6.0 / 18.0 " in text
    assert (docs / "img" / "scheduling.png").stat().st_size > 10_000
    assert "## Scheduling" in capsys.readouterr().out
