"""benchmarks/sim_vs_live.py: the table, errors, rankings and win ratios on saved rows, the
two sides' engine parameters, and one tiny live run (emulator + replay on loopback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks._engine_health import engine_health
from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(90)

svl = load_benchmark("sim_vs_live")

HEALTHY = {"lag_mean_s": 0.0005, "schedule_resets": 0.0, "dropped_model_s": 0.0,
           "busy_model_s": 100.0, "load_1m_before": 0.4, "load_1m_after": 0.6}  # fmt: skip


def _summary(e2e_mean: float, tok_mean: float, **health: Any) -> dict[str, Any]:
    return {
        "e2e_latency_s": {"mean": e2e_mean, "p50": e2e_mean * 0.9, "p95": e2e_mean * 2},
        "token_latency_s": {"mean": tok_mean, "p50": tok_mean, "p95": tok_mean * 2},
        "ttft_s": {"mean": 0.1},
        "throughput_programs_per_s": 0.2,
        "health": {**HEALTHY, **health},
    }


def _result() -> dict[str, Any]:
    def entry(sim: tuple[float, float], *live: tuple[float, float]) -> dict[str, Any]:
        return {"sim": _summary(*sim), "live": [_summary(*x) for x in live]}

    return {
        "setup": {**svl.dataclasses.asdict(svl.Setup()), "reps": 2},
        "programs": 30,
        "wall_s": 600.0,
        "runs": {
            "near": {
                "direct": entry((30.0, 0.030), (33.0, 0.033), (31.0, 0.031)),
                "fcfs": entry((30.0, 0.030), (32.0, 0.032), (34.0, 0.034)),
                "plas": entry((25.0, 0.015), (26.0, 0.016), (27.0, 0.016)),
            },
            "half": {
                "direct": entry((20.0, 0.020), (21.0, 0.021), (21.0, 0.021)),
                "plas": entry((19.0, 0.019), (20.0, 0.020), (20.5, 0.020)),
            },
        },
    }


def test_rows_take_live_medians_and_errors() -> None:
    rows = {(r["load"], r["config"]): r for r in svl.rows(_result())}
    live, sim, err = rows[("near", "direct")]["E2E mean"]
    assert (live, sim) == (32.0, 30.0)
    assert err == pytest.approx(100 * 2 / 30)
    assert rows[("near", "direct")]["E2E p95"][:2] == (64.0, 60.0)
    assert rows[("near", "plas")]["kept_up"]
    assert [r["load"] for r in svl.rows(_result())] == ["half", "half", "near", "near", "near"]


def test_merged_files_pool_the_live_runs_of_one_simulated_run() -> None:
    first, again = _result(), _result()  # the same setup and code, run twice
    again["runs"] = {"near": {"plas": again["runs"]["near"]["plas"]}}
    again["runs"]["near"]["plas"]["live"] = [_summary(40.0, 0.02)]
    again["runs"]["near"]["plas"]["sim"]["wall_s"] = 12.5  # the simulator's own time differs
    merged = svl.merge([first, again])
    rows = {(r["load"], r["config"]): r for r in svl.rows(merged)}
    assert rows[("near", "plas")]["reps"] == 3
    assert rows[("near", "plas")]["E2E mean"][0] == 27.0  # median of 26, 27 and 40
    assert rows[("near", "direct")]["reps"] == 2  # in one file only
    assert "Live = median of 2–3 runs (`near`) / 2 (`half`)" in svl.markdown(merged)
    changed = _result()  # another simulated run (the code changed): the later file wins
    changed["runs"]["near"]["plas"]["sim"] = _summary(24.0, 0.014)
    rows = {(r["load"], r["config"]): r for r in svl.rows(svl.merge([first, changed]))}
    assert rows[("near", "plas")]["reps"] == 2
    assert rows[("near", "plas")]["E2E mean"][1] == 24.0


def test_runs_with_and_without_the_simulators_jittered_copies_pool() -> None:
    spread = [_summary(e2e, 0.015) for e2e in (23.0, 25.0, 29.0)]
    with_spread, without = _result(), _result()  # --sim-jitter 3, then --sim-jitter 0
    with_spread["setup"]["sim_jitter_runs"] = 3
    with_spread["runs"]["near"]["plas"]["sim_jittered"] = spread
    without["setup"]["sim_jitter_runs"] = 0
    for files in ([with_spread, without], [without, with_spread]):
        merged = svl.merge(files)
        entry = merged["runs"]["near"]["plas"]
        assert len(entry["live"]) == 4 and entry["sim_jittered"] == spread
        rows = {(r["load"], r["config"]): r for r in svl.rows(merged)}
        assert rows[("near", "plas")]["sim_jittered_runs"] == 3
    # Copies moved by another jitter (a file saved when ±50 ms was the default) pool too;
    # the spread kept names its own jitter.
    older_spread = _result()
    older_spread["setup"].update(sim_jitter_runs=8, sim_jitter_s=0.05)
    older_spread["runs"]["near"]["plas"]["sim_jittered"] = [*spread, *spread[:1]]
    for files in ([with_spread, older_spread], [older_spread, with_spread]):
        merged = svl.merge(files)
        rows = {(r["load"], r["config"]): r for r in svl.rows(merged)}
        assert rows[("near", "plas")]["sim_jittered_runs"] == 4
        assert rows[("near", "plas")]["sim_jitter_s"] == 0.05
        assert "±50 ms (4 runs; median [range])" in svl.markdown(merged)
    # A file saved before the memory table was a setup field pools with one that has it.
    older = _result()
    del older["setup"]["memory_admission"]
    assert len(svl.merge([older, without])["runs"]["near"]["plas"]["live"]) == 4
    # Anything else the runs measure still keeps files apart.
    other = _result()
    other["setup"]["num_gpu_blocks"] = 6144
    with pytest.raises(SystemExit, match="different setups"):
        svl.merge([with_spread, other])


def test_ranking_and_win_ratios() -> None:
    result = _result()
    live, sim = svl.ranking(result, "near", "E2E mean")
    assert live[0] == sim[0] == "plas"
    wins = svl.win_ratios(result)
    assert wins is not None and wins["recommended"] == "plas"
    assert wins["tok mean"][0] == pytest.approx(0.032 / 0.016)
    assert wins["E2E mean"][1] == pytest.approx(30.0 / 25.0)


def test_a_run_whose_emulator_fell_behind_is_flagged() -> None:
    result = _result()
    result["runs"]["near"]["fcfs"]["live"][1]["health"]["dropped_model_s"] = 3.0
    result["runs"]["near"]["plas"]["live"][0]["health"]["lag_mean_s"] = 0.05
    rows = {(r["load"], r["config"]): r for r in svl.rows(result)}
    assert not rows[("near", "fcfs")]["kept_up"]
    assert not rows[("near", "plas")]["kept_up"]
    assert rows[("near", "direct")]["kept_up"]
    text = svl.markdown(result)
    assert text.startswith(svl.HEADING)
    assert "**no**" in text and "32 / 30 / +6.7 %" in text
    assert "direct FCFS ÷ plas" in text


def test_rankings_ignore_simulated_ties_and_name_reversals() -> None:
    result = _result()
    # direct and fcfs tie in the simulator (30.0 each): their live order does not count.
    assert svl.ranking_disagreements(result, "near", "E2E mean") == []
    result["runs"]["near"]["plas"]["live"] = [_summary(40.0, 0.04)] * 2
    assert svl.ranking_disagreements(result, "near", "E2E mean") == [
        "plas < direct",
        "plas < fcfs",
    ]
    assert "**live reverses** plas < direct" in svl.markdown(result)


def test_both_sides_get_the_same_engine_and_explicit_controller_flags() -> None:
    setup = svl.Setup()
    argv = svl.engine_argv(setup, 1234)
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert flags["--max-num-seqs"] == str(setup.max_num_seqs)
    assert flags["--num-gpu-blocks"] == str(setup.num_gpu_blocks)
    assert flags["--scheduling-policy"] == "fcfs"
    ctl = svl.controller_argv(setup, "plas", 1, "http://127.0.0.1:2")
    for flag in ("--policy", "--admission-window", "--router", "--retention", "--cost"):
        assert flag in ctl
    assert ctl[ctl.index("--admission-window") + 1] == str(setup.max_num_seqs + 2)
    defaults = svl.controller_argv(setup, "defaults", 1, "http://x")
    # Every configuration's policies run on the emulator's model seconds.
    for argv in (ctl, defaults):
        assert argv[argv.index("--time-scale") + 1] == f"{setup.time_scale:g}"
    assert defaults[-2:] == ["--backend", "http://x,kind=emulator"]
    # The defaults with one policy named: the same, plus that policy.
    named = svl.controller_argv(setup, "defaults-gittins", 1, "http://x")
    assert named[-4:] == ["--backend", "http://x,kind=emulator", "--policy", "gittins"]


def test_metrics_parser_reads_the_emulators_health() -> None:
    text = (
        "# HELP x\n"
        'agentrt_engine_delivery_lag_seconds_sum{model_name="m"} 0.5\n'
        'agentrt_engine_delivery_lag_seconds_count{model_name="m"} 1000\n'
        'agentrt_engine_schedule_resets_total{model_name="m"} 0.0\n'
    )
    health = engine_health(text)
    assert health["lag_mean_s"] == pytest.approx(0.0005)
    assert health["schedule_resets"] == 0.0
    assert health["engine_ttft_mean_s"] is None


def test_a_tiny_live_run_reports_its_health(tmp_path: Path) -> None:
    setup = svl.Setup(duration_s=12.0, rate_per_s=0.25, time_scale=20.0, reps=1)
    traces = svl.make_traces(setup, tmp_path)
    summary = svl.live_run(setup, traces["near"], "direct", tmp_path)
    assert summary["programs_failed"] == 0
    health = summary["health"]
    assert health["busy_model_s"] > 0 and health["lag_mean_s"] is not None
    assert health["cpu_engine_s"] > 0 and health["cpu_replay_s"] > 0
    sim = svl.simulate(setup, traces["near"], "direct")
    assert summary["prompt_tokens"] == pytest.approx(sim["prompt_tokens"], rel=1e-3)


def _coding_result() -> dict[str, Any]:
    result = _result()
    result["setup"] = svl.dataclasses.asdict(svl.coding_setup(quick=False))
    near = result["runs"]["near"]
    result["runs"] = {"near": {"direct": near["direct"], "defaults": near["plas"]}}
    return result


def test_the_coding_trace_compares_direct_with_the_defaults_in_its_own_section() -> None:
    setup = svl.coding_setup(quick=False)
    assert setup.workload == "coding" and setup.num_gpu_blocks == 4096
    assert svl.heading(setup) == svl.CODING_HEADING != svl.heading(svl.Setup())
    quick = svl.coding_setup(quick=True)
    assert (quick.duration_s, quick.time_scale, quick.reps) == (40.0, 10.0, 1)
    result = _coding_result()
    # The coding trace ranks its two configurations, the defaults included.
    assert svl.ranking(result, "near", "E2E mean") == (
        ["defaults", "direct"],
        ["defaults", "direct"],
    )
    assert svl.win_ratios(result)["recommended"] == "defaults"
    text = svl.markdown(result)
    assert text.startswith(svl.CODING_HEADING + "\n")
    assert "one coding trace (30 programs, seed 1; the `coding` workload scaled down" in text
    # its way to reproduce it names the loads it ran (only near here) and the window
    assert "--workload coding --loads near --write-docs" in text
    assert "(`half` not run)" in text and "arrivals × 2" not in text
    assert "for 600 s" in text and setup.duration_s == 600.0


def test_the_coding_trace_is_the_scaled_coding_workload(tmp_path: Path) -> None:
    setup = svl.dataclasses.replace(svl.coding_setup(quick=True), duration_s=15.0)
    traces = svl.make_traces(setup, tmp_path)
    from agentrt_sim.workloads.trace import load_trace

    programs = load_trace(traces["near"])
    assert programs and {p.kind for p in programs} == {"coding"}
    longest = max(max(p.call_prompt_tokens()) for p in programs)
    assert longest + 8192 <= setup.max_model_len  # every call fits the live engine


def test_jittered_traces_keep_the_programs_and_move_arrivals_within_the_bound(
    tmp_path: Path,
) -> None:
    from agentrt_sim.workloads.trace import load_trace

    setup = svl.Setup(duration_s=20.0, rate_per_s=0.5)
    trace = svl.make_traces(setup, tmp_path)["near"]
    original = {p.program_id: p for p in load_trace(str(trace))}
    moved = {p.program_id: p for p in load_trace(str(svl.jittered(trace, 3, 0.05, tmp_path)))}
    assert moved.keys() == original.keys()
    shifts = [moved[k].arrival_s - original[k].arrival_s for k in original]
    assert all(abs(d) <= 0.05 + 1e-9 for d in shifts) and any(d != 0 for d in shifts)
    assert all(moved[k].nodes == original[k].nodes for k in original)
    # the same seed gives the same copy; another seed another
    again = {p.program_id: p for p in load_trace(str(svl.jittered(trace, 3, 0.05, tmp_path)))}
    assert all(again[k].arrival_s == moved[k].arrival_s for k in moved)
    other = {p.program_id: p for p in load_trace(str(svl.jittered(trace, 4, 0.05, tmp_path)))}
    assert any(other[k].arrival_s != moved[k].arrival_s for k in moved)


def test_the_report_places_the_live_median_against_the_simulators_jittered_spread() -> None:
    result = _result()
    near = result["runs"]["near"]
    # plas: live medians 26.5 E2E mean; simulated under jitter 24, 25, 29 -> inside
    near["plas"]["sim_jittered"] = [_summary(24.0, 0.014), _summary(25.0, 0.015),
                                    _summary(29.0, 0.017)]  # fmt: skip
    # direct: live 32; jittered 29.5-30.5 -> above
    near["direct"]["sim_jittered"] = [_summary(29.5, 0.03), _summary(30.5, 0.03)]
    rows = {(r["load"], r["config"]): r for r in svl.rows(result)}
    assert rows[("near", "plas")]["sim_spread"]["E2E mean"] == (25.0, 24.0, 29.0)
    assert rows[("near", "fcfs")]["sim_spread"] == {}
    text = svl.markdown(result)
    plas = next(line for line in text.splitlines() if line.startswith("* near plas, "))
    assert "±2 s (3 runs; median [range])" in plas
    assert "E2E mean 25 [24–29]" in plas and "E2E mean 26.5 inside" in plas
    direct = next(line for line in text.splitlines() if line.startswith("* near direct, "))
    assert "E2E mean 32 above" in direct
    # a configuration without jittered runs (older saved results) gets no line
    assert not any(line.startswith("* near fcfs, ") for line in text.splitlines())


def test_the_report_sets_the_live_retention_counts_beside_the_simulators() -> None:
    result = _coding_result()
    entry = result["runs"]["near"]["defaults"]
    entry["sim"]["retention_counts"] = {"pin": 800, "retain": 400, "pins": 1600,
                                        "pinned_blocks": 100_000}  # fmt: skip
    counts = [{"pin": 700, "retain": 500, "short_context": 3, "pins": 1500, "unpins": 900,
               "pinned_blocks": 90_000},
              {"pin": 720, "retain": 480, "pins": 1540, "unpins": 950,
               "pinned_blocks": 94_000}]  # fmt: skip
    for run, c in zip(entry["live"], counts, strict=True):
        run["health"]["retention_counts"] = c
    entry["live"][0]["prefix_hit_rate"] = 0.7
    entry["sim"]["prefix_hit_rate"] = 0.6
    text = svl.markdown(result)
    (line,) = [x for x in text.splitlines() if x.startswith("* near defaults, retention counts")]
    assert "pin 710 / 800, retain 490 / 400, pins 1,520 / 1,600" in line
    # keys only one side has: live-only counters after the shared ones, zeros as 0
    assert "short_context 1.5 / 0, unpins 925 / 0, pinned_blocks 92,000 / 100,000" in line
    # direct has no retention: no line
    assert not any(x.startswith("* near direct, retention") for x in text.splitlines())
    rows = {(r["load"], r["config"]): r for r in svl.rows(result)}
    assert rows[("near", "defaults")]["prefix hits"][:2] == (0.7, 0.6)


def test_a_memory_admission_table_reaches_both_sides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentrt_sim.runner

    table = {"min_context_tokens": 8192}
    setup = svl.dataclasses.replace(svl.coding_setup(quick=True), memory_admission=table)
    # Live: the controller reads it from its --config file, for every configuration through it.
    for config in ("defaults", "plas"):
        argv = svl.controller_argv(setup, config, 1, "http://x", tmp_path / "c.json")
        assert argv[argv.index("--config") + 1] == str(tmp_path / "c.json")
        assert svl.json.loads((tmp_path / "c.json").read_text()) == {"memory_admission": table}
    with pytest.raises(ValueError, match="config file"):
        svl.controller_argv(setup, "defaults", 1, "http://x")
    # Without a table, no file and no --config: the controller's own defaults.
    assert "--config" not in svl.controller_argv(svl.coding_setup(quick=True), "defaults", 1, "x")
    # Simulated: the spec of each configuration through the controller carries it, direct's not.
    specs: dict[str, Any] = {}

    def capture(bench: Any, given: list[Any], **_: Any) -> list[Any]:
        specs[current] = given[0]
        raise _Captured

    class _Captured(Exception):
        pass

    monkeypatch.setattr(agentrt_sim.runner, "run_comparison", capture)
    trace = svl.make_traces(svl.dataclasses.replace(setup, duration_s=15.0), tmp_path)["near"]
    for current in ("defaults", "plas", "direct"):
        with pytest.raises(_Captured):
            svl.simulate(setup, trace, current)
    assert specs["defaults"].memory_admission == table == specs["plas"].memory_admission
    assert specs["direct"].memory_admission == {} and specs["direct"].admission_window is None
    # The report names the table and the engine it ran with, and how to run them again.
    result = _coding_result()
    result["setup"].update(memory_admission=table, num_gpu_blocks=6144)
    text = svl.markdown(result)
    assert 'memory_admission`: `{"min_context_tokens": 8192}`' in text
    assert "6144 KV blocks" in text and "holds about 6 last contexts" in text
    assert (
        "--loads near --num-gpu-blocks 6144 --memory-admission "
        """'{"min_context_tokens": 8192}' --write-docs`"""
    ) in text
    plain = svl.markdown(_coding_result())
    assert "memory_admission" not in plain and "--num-gpu-blocks" not in plain
    assert "holds about 4 last contexts" in plain


def test_the_memory_admission_flag_is_checked_before_a_run() -> None:
    assert svl._memory_table('{"min_context_tokens": 4096}') == {"min_context_tokens": 4096}
    for bad, says in (
        ("{", "not JSON"),
        ("[1]", "JSON object"),
        ('{"min_context": 1}', "unknown key"),
        ('{"min_context_tokens": -1}', ">= 0"),
    ):
        with pytest.raises(svl.argparse.ArgumentTypeError, match=says):
            svl._memory_table(bad)


def test_a_saved_runs_spread_runs_again_with_another_jitter(tmp_path: Path) -> None:
    setup = svl.Setup(duration_s=12.0, rate_per_s=0.5, sim_jitter_runs=0)
    trace = svl.make_traces(setup, tmp_path)["near"]
    result = {
        "setup": svl.dataclasses.asdict(setup),
        "programs": 6,
        "wall_s": 60.0,
        "runs": {"near": {"plas": {"sim": svl.simulate(setup, trace, "plas"),
                                   "sim_jittered": [], "live": [_summary(9.0, 0.01)]}}},
    }  # fmt: skip
    again = svl.respread(result, 2, 1.5)
    entry = again["runs"]["near"]["plas"]
    assert len(entry["sim_jittered"]) == 2 and entry["sim_jitter_s"] == 1.5
    assert entry["live"] == result["runs"]["near"]["plas"]["live"]
    assert (again["setup"]["sim_jitter_runs"], again["setup"]["sim_jitter_s"]) == (2, 1.5)
    assert "±1.5 s (2 runs; median [range])" in svl.markdown(again)
    # Saved runs the simulator no longer gives (the code changed) are refused.
    result["runs"]["near"]["plas"]["sim"]["e2e_latency_s"]["mean"] += 1.0
    with pytest.raises(SystemExit, match="no longer gives the saved near plas run"):
        svl.respread(result, 2, None)
    with pytest.raises(SystemExit):
        svl.main(["--from-json", "unused.json", "--sim-jitter-s", "0"])
