"""benchmarks/agents.py: option parsing, the calibration search, aggregation over seeds, the
ratios, the goals and the docs section (no simulation: a fake runner stands in)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(60)

agents = load_benchmark("agents")
from benchmarks import _agents_report as report  # noqa: E402  (importable once loaded)

#: Mean JCT (s) per configuration at load 1.0 in the fake runs; load 0.5 halves it.
FAKE_MEAN = {
    "direct": 400.0,
    "direct+cpu": 380.0,
    "continuum": 300.0,
    "llm-d": 320.0,
    "thunderagent": 350.0,
    "defaults": 180.0,
    "defaults+cpu": 170.0,
    "continuum-gpu": 390.0,
    "oracle": 175.0,
    "oracle+cpu": 165.0,
}


class FakeRunner:
    """Stands in for ``run_jobs``: figures from :data:`FAKE_MEAN`, seed-dependent by ±seed s;
    a direct engine that keeps up up to ``capacity`` programs/s."""

    def __init__(
        self, capacity: float = 1.0, slow_from: float = float("inf"), light: float = 0.5
    ) -> None:
        self.capacity = capacity
        #: JCTs at load 0.5 are this fraction of those at 1.0 (the grid's fake).
        self.light = light
        #: From this rate on (programs/s) every program takes twice as long.
        self.slow_from = slow_from
        self.calls: list[list[Any]] = []

    def __call__(self, jobs: Sequence[Any], workers: int) -> list[dict[str, Any]]:
        self.calls.append(list(jobs))
        out = []
        for job in jobs:
            mean = FAKE_MEAN[job.config] * (self.light if job.load == 0.5 else 1.0) + job.seed
            mean *= 2.0 if job.rate >= self.slow_from else 1.0
            out.append(
                {
                    **vars(job),
                    "mean_s": mean,
                    "p95_s": 2 * mean,
                    "token_mean_s": mean / 1e4,
                    "throughput": min(job.rate, self.capacity),
                    "completed": 30,
                    "unfinished": 0 if job.rate <= self.capacity else 5,
                    "recomputed": 1e6 * job.seed,
                    "reloaded": 0,
                    "preemptions": job.seed,
                    "queue_delay_s": 2.0 * job.seed,
                    "arrival_rate": job.rate,
                    "wall_s": 1.0,
                }
            )
        return out


def test_defaults_are_the_issues_grid_and_quick_is_small() -> None:
    args = agents.parse_args([])
    assert args.workloads == ["coding", "research", "agents"]
    assert args.loads == [0.5, 0.8, 1.0, 1.5]
    assert args.profiles == ["a100", "h100"] and args.engines == [1, 4]
    assert args.seeds == [1, 2, 3] and args.jobs == 1 and args.piece == (1, 1)
    assert args.configs[0] == "direct" and set(args.configs) == set(report.CONFIGS)
    quick = agents.parse_args(["--quick"])
    assert quick.workloads == ["coding"] and quick.seeds == [1]
    assert quick.profiles == ["a100"] and quick.engines == [1]


def test_subset_ran_and_options_over_it() -> None:
    ran = agents.parse_args(["--subset", "ran"])
    assert ran.workloads == ["coding", "research", "agents"] and ran.profiles == ["a100"]
    assert ran.engines == [1] and ran.loads == [0.5, 0.8, 1.0, 1.5]
    mine = agents.parse_args(["--subset", "ran", "--profiles", "h100", "--workloads", "coding"])
    assert mine.profiles == ["h100"] and mine.workloads == ["coding"] and mine.engines == [1]


def test_saturation_covers_every_setup_of_the_default_grid() -> None:
    # the default grid runs on calibrated rates only: no setup calibrated on the fly
    for name in agents.SUBSETS:
        args = agents.parse_args(["--subset", name])
        missing = [s for s in agents.setups_of(args) if s not in agents.SATURATION]
        assert missing == [], f"--subset {name}: no SATURATION entry for {missing}"
    assert all(rate > 0 for rate in agents.SATURATION.values())


def test_pieces_split_the_setups_whole() -> None:
    full = agents.setups_of(agents.parse_args([]))
    pieces = [agents.setups_of(agents.parse_args(["--piece", f"{k}/3"])) for k in (1, 2, 3)]
    assert sorted(s for piece in pieces for s in piece) == sorted(full)
    assert all(pieces) and not set(pieces[0]) & set(pieces[1])
    args = agents.parse_args(["--subset", "ran", "--workloads", "coding,agents", "--piece", "2/2"])
    jobs = agents.grid_jobs(args, {s: 0.01 for s in agents.setups_of(args)})
    assert {j.workload for j in jobs} == {"agents"}
    assert {j.config for j in jobs} == set(report.CONFIGS)  # a point is never split


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workloads", "coding,chat"], "--workloads: unknown 'chat'"),
        (["--loads", "0.5,x"], "--loads: 'x' is not a float"),
        (["--loads", "0"], "--loads: '0' must be > 0"),
        (["--profiles", "a10"], "--profiles: unknown 'a10'; valid: a100, h100"),
        (["--engines", "1,0"], "--engines: '0' must be > 0"),
        (["--configs", "vllm"], "--configs: unknown 'vllm'"),
        (["--seeds", ""], "--seeds: give at least one value"),
        (["--duration", "-5"], "--duration must be > 0"),
        (["--jobs", "0"], "--jobs must be >= 1"),
        (["--piece", "2"], "--piece: '2' is not K/N"),
        (["--piece", "4/3"], "--piece: '4/3' needs 1 <= K <= N"),
    ],
)
def test_bad_options_name_the_option(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message.replace("(", r"\(")):
        agents.parse_args(argv)


def test_direct_always_runs_first() -> None:
    args = agents.parse_args(["--configs", "defaults,continuum"])
    assert args.configs == ["direct", "defaults", "continuum"]


def test_extra_configurations_on_request_only(capsys: pytest.CaptureFixture[str]) -> None:
    # the bounds and Continuum without its tier are not in the default grid ...
    assert not {"oracle", "oracle+cpu", "continuum-gpu"} & set(agents.parse_args([]).configs)
    # ... but run when named: continuum-gpu gets Continuum's T from direct like continuum
    grid = ["--workloads", "coding", "--loads", "1", "--profiles", "a100", "--engines", "1"]
    args = agents.parse_args([*grid, "--configs", "defaults+cpu,oracle+cpu,continuum-gpu"])
    runner = FakeRunner()
    points = agents.measure(agents.grid_jobs(args, {("coding", "a100", 1): 0.01}), 1, runner)
    gpu = [j for j in runner.calls[1] if j.config == "continuum-gpu"]
    assert {j.seed: j.queueing_delay_s for j in gpu} == {1: 2.0, 2: 4.0, 3: 6.0}
    rows = report.compare(report.aggregate(points, args.configs))
    meta = {**_saved_meta(), "saturation": [[("coding", "a100", 1), 0.01]]}
    text = report.markdown(rows, meta)
    # the configuration table names each extra one that ran, and only those
    assert "| `oracle+cpu` | a bound:" in text and "| `continuum-gpu` |" in text
    assert "| `oracle` |" not in text


def test_duration_covers_the_programs() -> None:
    assert agents.duration_for(0.01, 30, None) == pytest.approx(30 / 0.009)
    assert agents.duration_for(10.0, 30, None) == 300.0  # the floor
    assert agents.duration_for(0.01, 30, 1200.0) == 1200.0


def test_calibration_stops_at_the_first_rate_direct_misses() -> None:
    base = agents.DEFAULT_RATES["coding"]
    runner = FakeRunner(capacity=base * 1.3, light=1.0)
    rate, points = agents.calibrate(
        "coding", "a100", 1, seeds=[1, 2, 3], programs=30, workers=1, runner=runner
    )
    assert rate == pytest.approx(base * 1.25)
    # 0.5, 0.75, 1.0, 1.25 kept up, 1.5 did not: five steps of three seeds, then stop
    assert len(runner.calls) == 5 and len(points) == 15
    assert {j.config for jobs in runner.calls for j in jobs} == {"direct"}


def test_calibration_stops_where_jct_blows_up() -> None:
    base = agents.DEFAULT_RATES["agents"]
    runner = FakeRunner(slow_from=base * 2.0, light=1.0)  # JCT doubles at 2 × (> 1.5 × light load)
    rate, _ = agents.calibrate(
        "agents", "a100", 1, seeds=[1, 2, 3], programs=30, workers=1, runner=runner
    )
    assert rate == pytest.approx(base * 1.5)


def test_calibration_refuses_when_nothing_keeps_up() -> None:
    with pytest.raises(SystemExit, match="keeps up with no rate"):
        agents.calibrate(
            "coding", "a100", 1, seeds=[1], programs=30, workers=1, runner=FakeRunner(1e-9)
        )


def _rows() -> list[dict[str, Any]]:
    args = agents.parse_args(
        ["--workloads", "coding", "--loads", "0.5,1.0", "--profiles", "a100", "--engines", "1"]
    )
    runner = FakeRunner()
    jobs = agents.grid_jobs(args, {("coding", "a100", 1): 0.01})
    points = agents.measure(jobs, 1, runner)
    # direct first (Continuum's T comes from it), then the rest
    assert {j.config for j in runner.calls[0]} == {"direct"}
    continuum = [j for j in runner.calls[1] if j.config == "continuum"]
    assert {j.seed: j.queueing_delay_s for j in continuum} == {1: 2.0, 2: 4.0, 3: 6.0}
    return report.compare(report.aggregate(points, args.configs))


def test_aggregate_medians_ranges_and_ratios() -> None:
    rows = _rows()
    first = len(report.CONFIGS) + 1
    assert [(r["load"], r["config"]) for r in rows[:first]] == [
        (0.5, c) for c in report.CONFIGS
    ] + [(1.0, "direct")]
    defaults = next(r for r in rows if r["load"] == 1.0 and r["config"] == "defaults")
    assert defaults["seeds"] == [1, 2, 3]
    assert defaults["mean_s"] == 182.0  # median of 181, 182, 183
    assert (defaults["mean_s_min"], defaults["mean_s_max"]) == (181.0, 183.0)
    assert defaults["vs_direct_mean"] == pytest.approx(182 / 402)
    assert defaults["best_peer"] == "continuum"
    assert defaults["vs_best_peer_mean"] == pytest.approx(182 / 302)
    assert defaults["vs_direct_throughput"] == pytest.approx(1.0)


def test_goals_marked_met_and_not_met() -> None:
    rows = _rows()
    marks = {g.text.split(" ≥")[0].split(" no")[0]: g for g in report.goals(rows)}
    assert marks["mean JCT vs direct"].ratio == pytest.approx(182 / 402)
    assert marks["mean JCT vs direct"].met is True
    assert marks["p95 JCT vs direct"].met is True
    assert marks["completed/s vs direct"].met is True
    assert marks["mean JCT vs the best peer-like"].met is True  # 182 / 302 = 0.60 <= 0.77
    assert marks["mean JCT vs direct at 0.5 load"].met is True
    for row in rows:
        if row["config"] == "defaults":
            row["vs_best_peer_mean"] = 0.9  # only 1.11x lower than the best peer-like
            row["vs_direct_throughput"] = 0.97
    marks = {g.text.split(" ≥")[0].split(" no")[0]: g for g in report.goals(rows)}
    assert marks["mean JCT vs the best peer-like"].met is False
    assert marks["completed/s vs direct"].met is False
    assert marks["mean JCT vs direct"].met is True


def test_goal_not_measured_without_the_load() -> None:
    rows = [r for r in _rows() if r["load"] == 1.0]
    at_half = [g for g in report.goals(rows) if "0.5 load" in g.text]
    assert at_half and all(g.met is None and g.ratio is None for g in at_half)


def test_section_and_write_docs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## Agents\n\nstale figures\n\n## Other\n\nkept\n")
    argv = ["--workloads", "coding", "--loads", "0.5,1.0", "--profiles", "a100", "--engines", "1"]
    argv += ["--docs", str(docs), "--note", "before the new defaults"]
    agents.SATURATION[("coding", "a100", 1)] = 0.01
    try:
        assert agents.main([*argv, "--write-docs", "--json"], runner=FakeRunner()) == 0
    finally:
        del agents.SATURATION[("coding", "a100", 1)]
    saved = json.loads(capsys.readouterr().out)
    text = docs.read_text()
    assert "stale figures" not in text and "## Other\n\nkept" in text
    assert "**before the new defaults**" in text
    assert "Spread of the median mean JCT over the configurations: load 0.5:" in text
    assert "| 1 (0.01/s) | `defaults` | 182 [181–183] |" in text
    assert "coding, a100 x1, load 1: mean JCT vs direct ≥ 2× lower (≤ 0.50): 0.45 — met" in text
    assert "--kv-offloading-size 100`" in text  # the flags of each configuration
    # the saved JSON renders the same section
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(saved))
    assert agents.main(["--from-json", str(path)]) == 0
    assert (
        capsys.readouterr().out.strip()
        == text.split("\n\n## Other")[0].split("# Benchmarks\n\n")[1].strip()
    )
    # another heading is a section of its own, next to the first
    heading = "## Agents: two-hour windows"
    argv = ["--from-json", str(path), "--docs", str(docs), "--heading", heading, "--write-docs"]
    assert agents.main(argv) == 0
    text = docs.read_text()
    assert text.count("| 1 (0.01/s) | `defaults` | 182 [181–183] |") == 2
    assert f"\n{heading}\n" in text and "## Other\n\nkept" in text
    assert f"--heading '{heading}' --write-docs" in text  # its own way to reproduce it


def _saved_meta(**values: Any) -> dict[str, Any]:
    """The ``meta`` of a saved ``--json`` run of the coding point at 0.01/s (``values`` over)."""
    return {
        "command": "run",
        "machine": "load 1",
        "wall_s": 10.0,
        "saturation": [[["coding", "a100", 1], 0.01]],
        "date": "2026-12-05",
        "seeds": [1, 2, 3],
        "note": "",
        "programs": 30,
        "duration": None,
        **values,
    }


def test_saved_runs_of_different_loads_render_as_one() -> None:
    rows = _rows()
    meta = _saved_meta(command="first", wall_s=60.0)
    half = {"rows": [r for r in rows if r["load"] == 0.5], "meta": meta}
    full = {
        "rows": [r for r in rows if r["load"] == 1.0],
        "meta": {**meta, "command": "second", "machine": "load 2", "wall_s": 30.0},
    }
    merged, merged_meta = agents.merge_saved([full, half], list(report.CONFIGS))
    assert merged == rows  # ordered by load, then configuration, whatever the file order
    assert merged_meta["command"] == "second`; `first"
    assert merged_meta["wall_s"] == 90.0
    assert merged_meta["machine"] == "load 2; load 1"


def test_saved_pieces_of_one_point_are_compared_whole() -> None:
    rows = _rows()
    meta = _saved_meta(command="direct", wall_s=10.0)
    # direct in one file, the others in another: each file alone has no ratios
    direct = [{**r, "vs_direct_mean": None} for r in rows if r["config"] == "direct"]
    others = [{**r, "vs_direct_mean": None} for r in rows if r["config"] != "direct"]
    merged, merged_meta = agents.merge_saved(
        [{"rows": others, "meta": meta}, {"rows": direct, "meta": {**meta, "seeds": [4]}}],
        list(report.CONFIGS),
    )
    assert merged == rows
    assert merged_meta["seeds"] == [1, 2, 3, 4]
