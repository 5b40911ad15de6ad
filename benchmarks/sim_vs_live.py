"""Agreement benchmark: the simulator and the live stack on the same programs.

One mixed trace (``agentrt bench sim``'s workload; ``--workload coding``: a coding trace,
below) runs (a) in the discrete-event simulator,
in process, and (b) live: ``agentrt bench replay`` sends its programs as real SDK programs
through ``agentrt controller serve`` to an emulated engine (``agentrt engine serve``, the same
profile, batch, KV blocks and token budget as the simulated engine, at ``--time-scale X``),
or straight to a fresh FCFS emulator ("direct"). The same trace runs at two loads: near the
engine's saturation and at half of it (the same programs, arrival times doubled).

Configurations (explicit flags on both sides, no defaults relied on):

* ``direct``  — no controller; the engine's own FCFS queue (sim: ``fcfs``, window unlimited);
* ``fcfs``, ``plas``, ``atlas`` — the controller with that policy, a fixed admission window of
  the engine's batch + 2, round-robin routing (one engine), retention off, priority
  passthrough off, service charged with the controller's cost model for the profile;
* ``defaults`` (``--defaults``, the high load only) — ``agentrt controller serve --backend
  URL,kind=emulator`` with no policy flags, beside the simulator's ``PolicySpec()`` (the same
  defaults table), the controller's default cost model and its 1 s probe period.

Reported per configuration and load: mean / p50 / p95 of program E2E latency and of program
token latency (E2E ÷ generated tokens), TTFT and completed throughput; the live median over
``--reps`` runs, the simulated value and the error; the policy ranking on both sides; the live
ratio of the recommended configuration to direct FCFS. The simulator also runs each
configuration on ``--sim-jitter`` copies of the trace whose arrivals are moved by up to
±``--sim-jitter-s`` (2 s): where a policy's outcome hangs on who got memory first, its figures
move under such a change as much as a live run's, and the report says whether the live median
falls inside that spread (``--from-json FILES --sim-jitter N`` runs that spread again for saved
live runs). Each live run also records whether the
emulator kept up with its schedule (delivery lag, schedule restarts: docs/engine-emulator.md),
the CPU seconds of each process and the load average: a run whose emulator fell behind is
flagged, not counted as agreement.

**The coding trace** (``--workload coding``; issue #25, item 5): the ``coding`` workload
(docs/simulator.md, "Coding, research, agents") with its contexts scaled down about 5x
(:data:`CODING_PARAMS`: 12 calls per program instead of 33, a 16 K-token last context instead
of 84.5 K, tool waits clipped at 20 s) so that a live run takes minutes on two cores, on an
engine of 4,096 KV blocks (65,536 tokens: about four last contexts), so that contexts are
evicted and recomputed as on a KV-bound GPU; ``direct`` against the controller's
``defaults`` at 0.2 programs/s for 600 s (``near``) and at 0.1/s (``half``, the same
programs). ``--num-gpu-blocks N`` sizes the engine (both sides) and ``--memory-admission JSON``
sets the controller's ``memory_admission`` table for every configuration through it (the live
controller's ``--config`` file, the simulator's ``PolicySpec.memory_admission``): e.g. the
short-context threshold at another engine size, against a fixed one.

Run (from the repository root)::

    .venv/bin/python benchmarks/sim_vs_live.py --quick          # smoke: ~1 minute
    .venv/bin/python benchmarks/sim_vs_live.py --defaults --write-docs   # ~23 min on 2 idle cores
    .venv/bin/python benchmarks/sim_vs_live.py --workload coding --loads near --write-docs # 28 min
    .venv/bin/python benchmarks/sim_vs_live.py --workload coding --quick
    .venv/bin/python benchmarks/sim_vs_live.py --workload coding --loads near --configs defaults \\
        --num-gpu-blocks 6144 --memory-admission '{"min_context_tokens": 8192}'
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import _report  # noqa: E402
from benchmarks._engine_health import kept_up, scrape  # noqa: E402
from benchmarks._processes import cpu_s, free_port, server  # noqa: E402

HEADING = "## Simulator vs live stack"
#: The coding trace's section of docs/benchmarks.md.
CODING_HEADING = "## Simulator vs live stack: coding"
AGENTRT = str(Path(sys.executable).with_name("agentrt"))

#: Metrics compared: (label, summary key, statistic).
METRICS: tuple[tuple[str, str, str], ...] = (
    ("E2E mean", "e2e_latency_s", "mean"),
    ("E2E p50", "e2e_latency_s", "p50"),
    ("E2E p95", "e2e_latency_s", "p95"),
    ("tok mean", "token_latency_s", "mean"),
    ("tok p50", "token_latency_s", "p50"),
    ("tok p95", "token_latency_s", "p95"),
    ("TTFT mean", "ttft_s", "mean"),
    ("thr/s", "throughput_programs_per_s", ""),
    ("prefix hits", "prefix_hit_rate", ""),
)
#: Goals: |error| of mean E2E and of p95 E2E, percent.
GOAL_MEAN_PCT = 10.0
GOAL_P95_PCT = 15.0


@dataclass(frozen=True)
class Setup:
    """What both sides run: the trace, the engine and the live run's speed."""

    #: Programs/s of the high-load trace ("near"); the "half" trace has half of it. With
    #: batch 8 the simulated engine sustains about 0.25 programs/s over 600 s (``bench
    #: sweep``), so "half" runs at that capacity and "near" is a 120 s burst at twice it.
    rate_per_s: float = 0.5
    #: Arrival window of the high-load trace, model seconds.
    duration_s: float = 120.0
    seed: int = 1
    profile: str = "a100-llama3-8b"
    max_num_seqs: int = 8
    num_gpu_blocks: int = 16384
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    max_model_len: int = 131072
    #: The emulator and the replay run this many times faster than the modelled GPU.
    time_scale: float = 5.0
    #: The emulator's ``--stream-interval-ms``: intermediate tokens are written at most this
    #: often (first and last never held), so that the per-token HTTP work of the emulator,
    #: the controller and the client stays far below the machine's capacity.
    stream_interval_ms: float = 20.0
    #: Live runs per configuration at the high load and at the half load.
    reps: int = 2
    reps_half: int = 2
    #: Simulated runs per configuration with every arrival moved by a random amount of up to
    #: ±``sim_jitter_s`` model seconds (seeds 1..N): how far the simulator's own figures move
    #: when nothing but timing changes, the yardstick for a live run's error (0: none). A
    #: live run's timing drifts from the trace's call by call, so its programs meet in other
    #: orders: ±2 s reorders arrivals about as much (±50 ms copies stayed near the trace's
    #: own order and missed live medians that ±2 s copies matched: docs/benchmarks.md,
    #: "How far one arrival order moves the result").
    sim_jitter_runs: int = 8
    sim_jitter_s: float = 2.0
    #: The trace's workload (``agentrt bench sim --workload``) and its parameter overrides
    #: ``{kind: {field: value}}`` (``--workload-param``).
    workload: str = "mixed"
    workload_params: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    #: The controller's ``memory_admission`` table for every configuration through it, live
    #: (its ``--config`` file) and simulated (``PolicySpec.memory_admission``); empty: the
    #: defaults (docs/scheduling.md, "Admission under memory pressure").
    memory_admission: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def window(self) -> int:
        """The controller's fixed admission window: the batch + 2, so that a finished call's
        slot is refilled from the engine's own queue while the controller forwards the next
        (with exactly the batch, every finish would leave a slot empty for a round trip)."""
        return self.max_num_seqs + 2


#: The coding trace's workload parameters (``--workload-param coding.FIELD=VALUE``): the
#: calibrated workload scaled down about 5x in tokens and 3x in calls, tools clipped at 20 s.
CODING_PARAMS: dict[str, dict[str, float]] = {
    "coding": {
        "calls_mean": 12.0,
        "calls_max": 40,
        "system_tokens": 1000,
        "repo_tokens": 4000,
        "issue_tokens_mean": 300.0,
        "final_context_tokens_mean": 16000.0,
        "output_tokens_mean": 200.0,
        "result_tokens_max": 8192,
        "tool_max_s": 20.0,
    }
}


def coding_setup(quick: bool) -> Setup:
    """The coding trace's setup (see the module docstring), at time scale 2: its calls carry
    up to ~40 K tokens, and at 5 a busy 2-core machine's emulator fell behind its schedule
    (docs/replay.md); 600 s of arrivals: over 120 s the engine mostly fills up, and the
    memory rule has not yet paid (docs/scheduling.md, "Shared prefixes counted once");
    ``quick``: 40 s of arrivals, one run, at time scale 10."""
    setup = Setup(
        time_scale=2.0,
        rate_per_s=0.2,
        duration_s=600.0,
        num_gpu_blocks=4096,
        reps=1,
        reps_half=1,
        workload="coding",
        workload_params=CODING_PARAMS,
    )
    return dataclasses.replace(setup, duration_s=40.0, time_scale=10.0) if quick else setup


def heading(setup: Setup) -> str:
    """The docs section of ``setup``'s workload."""
    return CODING_HEADING if setup.workload == "coding" else HEADING


#: name -> (policy, through the controller?)
CONFIGS: dict[str, tuple[str, bool]] = {
    "direct": ("fcfs", False),
    "fcfs": ("fcfs", True),
    "plas": ("plas", True),
    "atlas": ("atlas", True),
    "defaults": ("", True),
    # The defaults with one policy named (``--policy``): to compare a policy with the default
    # one on the same stack, e.g. the previous default.
    "defaults-plas": ("plas", True),
    "defaults-gittins": ("gittins", True),
}
LOADS = ("half", "near")


# -- traces and the simulator ------------------------------------------------------------------


def make_traces(setup: Setup, directory: Path) -> dict[str, Path]:
    """The near-saturation trace and the half-load one (same programs, arrivals × 2)."""
    from agentrt_sim.runner import BenchConfig
    from agentrt_sim.workloads.trace import save_trace

    programs = BenchConfig(
        workload=setup.workload,
        rate_per_s=setup.rate_per_s,
        duration_s=setup.duration_s,
        seed=setup.seed,
        workload_params=setup.workload_params,
    ).programs()
    paths = {"near": directory / "near.jsonl", "half": directory / "half.jsonl"}
    save_trace(programs, str(paths["near"]))
    stretched = [dataclasses.replace(p, arrival_s=2.0 * p.arrival_s) for p in programs]
    save_trace(stretched, str(paths["half"]))
    return paths


def jittered(trace: Path, seed: int, jitter_s: float, directory: Path) -> Path:
    """``trace`` with every arrival moved by a uniform random amount in ±``jitter_s``
    (``seed``), written beside it: the same programs, the same load, other timing."""
    from agentrt_sim.workloads.trace import load_trace, save_trace

    rng = random.Random(seed)
    programs = [
        dataclasses.replace(p, arrival_s=max(0.0, p.arrival_s + rng.uniform(-jitter_s, jitter_s)))
        for p in load_trace(str(trace))
    ]
    path = directory / f"{trace.stem}-jitter{seed}.jsonl"
    save_trace(programs, str(path))
    return path


def simulate_jittered(setup: Setup, trace: Path, config: str) -> dict[str, Any]:
    """:func:`simulate` on ``setup.sim_jitter_runs`` jittered copies of ``trace``, each
    summary cut to the compared metrics, as an entry's ``sim_jittered`` with the
    ``sim_jitter_s`` they were moved by. A live run's arrivals (and everything after them)
    are off the trace's by the machine's timing; where a policy's outcome hangs on who got
    memory first, the simulator moves as much under such a change, and a live figure inside
    this spread is no disagreement."""
    keys = {key for _, key, _ in METRICS}
    out = []
    for seed in range(1, setup.sim_jitter_runs + 1):
        path = jittered(trace, seed, setup.sim_jitter_s, trace.parent)
        out.append({k: v for k, v in simulate(setup, path, config).items() if k in keys})
    return {"sim_jittered": out, "sim_jitter_s": setup.sim_jitter_s}


def simulate(setup: Setup, trace: Path, config: str) -> dict[str, Any]:
    """The simulator's summary of ``config`` on ``trace`` (one run: it is deterministic)."""
    from agentrt_controller.cost_model import CostModel
    from agentrt_controller.service.config import ControllerConfig
    from agentrt_emulator.core.types import EngineConfig
    from agentrt_sim.registry import PolicySpec
    from agentrt_sim.runner import BenchConfig, run_comparison
    from agentrt_sim.workloads.trace import load_trace

    programs = load_trace(str(trace))
    last = max(p.arrival_s for p in programs)
    bench = BenchConfig(
        workload=f"trace:{trace.name}",
        rate_per_s=len(programs) / last,
        duration_s=last,
        seed=setup.seed,
        warmup_s=0.1 * last,  # bench replay's default
        drain_s=20.0 * last,  # the live replay waits for every program
        profile=setup.profile,
        engine=EngineConfig(
            max_num_seqs=setup.max_num_seqs,
            num_gpu_blocks=setup.num_gpu_blocks,
            block_size=setup.block_size,
            max_num_batched_tokens=setup.max_num_batched_tokens,
            max_model_len=setup.max_model_len,
            scheduling_policy="fcfs",
            enable_prefix_caching=True,
        ),
    )
    policy, via_controller = CONFIGS[config]
    if config.startswith("defaults"):
        # What `controller serve --backend URL` runs: the shared defaults table, the
        # controller's default cost model (not the simulator's roofline default) and its
        # default probe period for the adaptive window's engine gauges, in wall seconds, so
        # `time_scale` times as many model seconds (the probes keep real time; the policies
        # run on the emulator's model seconds).
        named = {"policy": policy} if policy else {}
        spec = PolicySpec(**named, memory_admission=setup.memory_admission)
        cost = CostModel.from_mapping({}).service_s
        probe_s = ControllerConfig().scrape_interval_s * setup.time_scale
        bench = dataclasses.replace(bench, scrape_interval_s=probe_s)
    else:
        spec = PolicySpec(
            policy=policy,
            router="round_robin",
            retention="off",
            admission_window=setup.window if via_controller else None,
            scheduler_options={},
            router_options={},
            memory_admission=setup.memory_admission if via_controller else {},
        )
        cost = CostModel.from_profile(setup.profile).service_s
    started = time.perf_counter()
    (outcome,) = run_comparison(bench, [spec], programs=programs, cost_model=cost)
    summary = dict(outcome.summary)
    summary["wall_s"] = time.perf_counter() - started
    return summary


# -- the live stack ----------------------------------------------------------------------------


def _healthy(url: str) -> bool:
    with urllib.request.urlopen(url + "/health", timeout=2) as response:
        return bool(response.status == 200)


def _server(
    argv: Sequence[str], url: str, log: Path
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """The server ``argv``, its output in ``log``, once ``url``'s ``/health`` answers 200."""
    return server(argv, lambda: _healthy(url), url, log)


def engine_argv(setup: Setup, port: int) -> list[str]:
    """``agentrt engine serve`` with the simulated engine's parameters."""
    return [
        AGENTRT, "engine", "serve", "--port", str(port),
        "--profile", setup.profile,
        "--time-scale", f"{setup.time_scale:g}",
        "--stream-interval-ms", f"{setup.stream_interval_ms:g}",
        "--max-num-seqs", str(setup.max_num_seqs),
        "--num-gpu-blocks", str(setup.num_gpu_blocks),
        "--block-size", str(setup.block_size),
        "--max-num-batched-tokens", str(setup.max_num_batched_tokens),
        "--max-model-len", str(setup.max_model_len),
        "--scheduling-policy", "fcfs",
    ]  # fmt: skip


def controller_argv(
    setup: Setup, config: str, port: int, engine_url: str, config_file: Path | None = None
) -> list[str]:
    """``agentrt controller serve`` for ``config`` in front of ``engine_url``; with
    ``setup.memory_admission``, its table in ``config_file`` (written here)."""
    # The policies on the emulator's model seconds, as the simulator's and the trace's.
    argv = [AGENTRT, "controller", "serve", "--port", str(port),
            "--time-scale", f"{setup.time_scale:g}"]  # fmt: skip
    if setup.memory_admission:
        if config_file is None:
            raise ValueError("a memory_admission table needs a config file to write it to")
        config_file.write_text(json.dumps({"memory_admission": setup.memory_admission}))
        argv += ["--config", str(config_file)]
    policy, _ = CONFIGS[config]
    if config.startswith("defaults"):
        # No policy flag (``defaults-<policy>``: that one); kind=emulator so that retention
        # (on by default) can pin, as the simulated engines do (a backend of the default kind,
        # vllm, has no pins).
        named = ["--policy", policy] if policy else []
        return [*argv, "--backend", f"{engine_url},kind=emulator", *named]
    return [
        *argv,
        "--backend", f"{engine_url},kind=emulator,priority=off",
        "--policy", policy,
        "--admission-window", str(setup.window),
        "--router", "round_robin",
        "--retention", "off",
        "--scheduling", "{}",
        "--cost", json.dumps({"profile": setup.profile}),
    ]  # fmt: skip


def retention_counts(controller_url: str) -> dict[str, int] | None:
    """The live controller's retention counters (``GET /agentrt/v1/queues`` →
    ``retention.counts``: decisions by reason, pins placed and the blocks they held), the
    simulator's ``retention_counts`` to compare; ``None`` with retention off."""
    with urllib.request.urlopen(controller_url + "/agentrt/v1/queues", timeout=10) as response:
        retention = json.load(response).get("retention")
    return None if retention is None else dict(retention["counts"])


def live_run(setup: Setup, trace: Path, config: str, workdir: Path) -> dict[str, Any]:
    """One live run of ``config`` on ``trace``: the replay's summary plus ``health``."""
    _, via_controller = CONFIGS[config]
    engine_port = free_port()
    engine_url = f"http://127.0.0.1:{engine_port}"
    load_before = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        engine = stack.enter_context(
            _server(engine_argv(setup, engine_port), engine_url, workdir / "engine.log")
        )
        target, controller = engine_url, None
        if via_controller:
            port = free_port()
            target = f"http://127.0.0.1:{port}"
            controller = stack.enter_context(
                _server(
                    controller_argv(setup, config, port, engine_url, workdir / "controller.json"),
                    target,
                    workdir / "controller.log",
                )
            )
        cpu_before = {"engine": cpu_s(engine.pid)}
        if controller is not None:
            cpu_before["controller"] = cpu_s(controller.pid)
        argv = [
            AGENTRT, "bench", "replay", "--trace", str(trace),
            "--base-url", target + "/v1",
            "--tokenize-url", engine_url, "--metrics-url", engine_url,
            "--time-scale", f"{setup.time_scale:g}", "--json", "--no-progress",
        ]  # fmt: skip
        started = time.monotonic()
        out_path, err_path = workdir / "replay.json", workdir / "replay.err"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            replay = subprocess.Popen(argv, stdout=out, stderr=err)
            _, status, usage = os.wait4(replay.pid, 0)
            replay.returncode = os.waitstatus_to_exitcode(status)
        wall_s = time.monotonic() - started
        if replay.returncode != 0:
            raise RuntimeError(f"bench replay ({config}) failed: {err_path.read_text()[-2000:]}")
        cpu = {name: cpu_s(proc.pid) - cpu_before[name] for name, proc in
               (("engine", engine), ("controller", controller)) if proc is not None}  # fmt: skip
        cpu["replay"] = usage.ru_utime + usage.ru_stime
        health: dict[str, Any] = scrape(engine_url)
        if controller is not None:
            health["retention_counts"] = retention_counts(target)
    (summary,) = json.loads(out_path.read_text())
    health.update(
        {
            "wall_s": wall_s,
            "load_1m_before": load_before,
            "load_1m_after": os.getloadavg()[0],
            **{f"cpu_{name}_s": value for name, value in cpu.items()},
        }
    )
    summary["health"] = health
    return dict(summary)


# -- results -----------------------------------------------------------------------------------


def metric(summary: Mapping[str, Any], key: str, stat: str) -> float:
    value = summary.get(key)
    if isinstance(value, Mapping):
        value = value.get(stat)
    return math.nan if value is None else float(value)


def spread(runs: Sequence[Mapping[str, Any]], key: str, stat: str) -> tuple[float, float, float]:
    """(median, least, greatest) of a metric over ``runs`` (those that have it)."""
    values = [v for v in (metric(r, key, stat) for r in runs) if math.isfinite(v)]
    if not values:
        return (math.nan, math.nan, math.nan)
    return (statistics.median(values), min(values), max(values))


def live_median(runs: Sequence[Mapping[str, Any]], key: str, stat: str) -> float:
    return spread(runs, key, stat)[0]


#: The metrics whose spread under jittered arrivals is reported (labels of :data:`METRICS`).
SPREAD_METRICS = ("E2E mean", "E2E p95", "tok mean")


def error_pct(live: float, sim: float) -> float:
    return (live - sim) / sim * 100.0 if sim and math.isfinite(sim) else math.nan


def rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per (load, config): per metric the live median, the simulated value, the
    error (percent), and whether every live run kept up."""
    out = []
    for load in LOADS:
        for config, entry in result["runs"].get(load, {}).items():
            sim, live = entry["sim"], entry["live"]
            row: dict[str, Any] = {"load": load, "config": config, "reps": len(live)}
            for label, key, stat in METRICS:
                lv, sv = live_median(live, key, stat), metric(sim, key, stat)
                row[label] = (lv, sv, error_pct(lv, sv))
            jittered_runs = entry.get("sim_jittered") or []
            row["sim_spread"] = {
                label: spread(jittered_runs, key, stat)
                for label, key, stat in METRICS
                if label in SPREAD_METRICS and jittered_runs
            }
            row["sim_jittered_runs"] = len(jittered_runs)
            row["sim_jitter_s"] = _with_jitter(entry, result)["sim_jitter_s"]
            row["kept_up"] = all(kept_up(r["health"]) for r in live)
            row["lag_mean_s"] = max(
                (r["health"].get("lag_mean_s") or 0.0 for r in live), default=math.nan
            )
            out.append(row)
    return out


def _ranked(result: Mapping[str, Any], load: str) -> list[dict[str, Any]]:
    """The rows ranked at ``load``: for the mixed trace the policies with the fixed window
    (``defaults`` runs another cost model and probe period, so it is compared on its own);
    for the coding trace ``direct`` and ``defaults``, its only two configurations."""
    coding = result["setup"].get("workload") == "coding"
    return [
        r
        for r in rows(result)
        if r["load"] == load and (coding or not r["config"].startswith("defaults"))
    ]


def ranking(result: Mapping[str, Any], load: str, label: str) -> tuple[list[str], list[str]]:
    """Configurations ordered best-first by ``label`` (live medians, simulated)."""
    table = _ranked(result, load)
    live = [r["config"] for r in sorted(table, key=lambda r: r[label][0])]
    sim = [r["config"] for r in sorted(table, key=lambda r: r[label][1])]
    return live, sim


#: Two configurations whose simulated values differ by less than this (relative) are a tie:
#: their live order is not held against the simulator (direct FCFS and FCFS behind a window
#: larger than the batch are the same schedule).
TIE = 0.03


def ranking_disagreements(result: Mapping[str, Any], load: str, label: str) -> list[str]:
    """Pairs the simulator orders (beyond :data:`TIE`) that the live medians order the other
    way, as ``"a < b"`` (the simulated order)."""
    table = _ranked(result, load)
    out = []
    for i, a in enumerate(table):
        for b in table[i + 1 :]:
            (la, sa, _), (lb, sb, _) = a[label], b[label]
            if abs(sa - sb) <= TIE * min(sa, sb):
                continue
            if (sa < sb) != (la < lb):
                first, second = (a, b) if sa < sb else (b, a)
                out.append(f"{first['config']} < {second['config']}")
    return out


def win_ratios(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """Direct FCFS ÷ the recommended configuration near saturation (the controller's
    defaults when run, else plas): mean token latency and mean E2E, live and simulated."""
    near = {r["config"]: r for r in rows(result) if r["load"] == "near"}
    recommended = "defaults" if "defaults" in near else "plas"
    if "direct" not in near or recommended not in near:
        return None
    out: dict[str, Any] = {"recommended": recommended}
    for label in ("tok mean", "E2E mean"):
        direct, rec = near["direct"][label], near[recommended][label]
        out[label] = (direct[0] / rec[0], direct[1] / rec[1])
    return out


def _f(value: float, digits: int = 3) -> str:
    if not math.isfinite(value):
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _pct(value: float) -> str:
    return "—" if not math.isfinite(value) else f"{value:+.1f} %"


def _loads_run(result: Mapping[str, Any]) -> list[str]:
    """The loads ``result`` has runs of, in :data:`LOADS` order."""
    return [load for load in LOADS if result["runs"].get(load)]


def _seconds(value: float) -> str:
    return f"{value * 1000:g} ms" if value < 1 else f"{value:g} s"


def spread_lines(table_rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per row, the simulator's figures under jittered arrivals and where the live median
    falls against them."""
    lines = []
    for row in table_rows:
        if not row["sim_spread"]:
            continue
        parts, where = [], []
        for label, (median, least, greatest) in row["sim_spread"].items():
            parts.append(f"{label} {_f(median)} [{_f(least)}–{_f(greatest)}]")
            live = row[label][0]
            side = "below" if live < least else "above" if live > greatest else "inside"
            where.append(f"{label} {_f(live)} {side}")
        lines.append(
            f"* {row['load']} {row['config']}, the simulator with every arrival moved by up to "
            f"±{_seconds(row['sim_jitter_s'])} ({row['sim_jittered_runs']} runs; median "
            f"[range]): {', '.join(parts)}; live: {', '.join(where)}"
        )
    return lines


def retention_lines(result: Mapping[str, Any]) -> list[str]:
    """Per configuration with retention, its counters live (median over the runs) and
    simulated: where the two stacks' retention decided or pinned differently."""
    lines = []
    for load in LOADS:
        for config, entry in result["runs"].get(load, {}).items():
            sim = entry["sim"].get("retention_counts")
            live = [r["health"].get("retention_counts") for r in entry["live"]]
            live = [c for c in live if c]
            if not sim or not live:
                continue
            keys = [k for k in sim if k != "pinned_blocks"] + [
                k for k in sorted({k for c in live for k in c}) if k not in sim
            ]
            keys += ["pinned_blocks"]
            parts = [
                f"{k} {_f(statistics.median(c.get(k, 0) for c in live))} / {_f(sim.get(k, 0))}"
                for k in keys
                if any(c.get(k) for c in live) or sim.get(k)
            ]
            lines.append(
                f"* {load} {config}, retention counts live / simulated (decisions by reason, "
                f"pins placed, the blocks they held): {', '.join(parts)}"
            )
    return lines


def _reps(table_rows: Sequence[Mapping[str, Any]], load: str, planned: int) -> str:
    """The live runs per config of ``load`` (``planned`` when none ran; a range when the
    configs differ: merged files)."""
    counts = sorted({r["reps"] for r in table_rows if r["load"] == load})
    if not counts:
        return str(planned)
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def markdown(result: Mapping[str, Any]) -> str:
    """The docs section."""
    setup = Setup(**result["setup"])
    table_rows = rows(result)
    ran_half = any(r["load"] == "half" for r in table_rows)
    if setup.workload == "coding":
        trace = (
            f"one coding trace ({result['programs']} programs, seed {setup.seed}; the "
            "`coding` workload scaled down: "
            + ", ".join(f"{k}={v:g}" for k, v in setup.workload_params["coding"].items())
            + ")"
        )
        held = (
            setup.num_gpu_blocks
            * setup.block_size
            / (setup.workload_params["coding"]["final_context_tokens_mean"])
        )
        loads = (
            f"`near` = {setup.rate_per_s:g} programs/s for {setup.duration_s:g} s (the KV "
            f"cache holds about {held:.0f} last contexts: contexts are evicted and recomputed)"
            + (
                f", `half` = the same programs at {setup.rate_per_s / 2:g}/s (arrivals × 2)"
                if ran_half
                else " (`half` not run)"
            )
            + ". `defaults` = `controller serve --backend URL,kind=emulator` with no policy "
            "flag (retention on, native pins); `defaults-<policy>` the same with `--policy`."
        )
    else:
        trace = f"one {setup.workload} trace ({result['programs']} programs, seed {setup.seed})"
        loads = (
            f"`near` = {setup.rate_per_s:g} programs/s for {setup.duration_s:g} s (a burst at "
            f"about twice the {setup.rate_per_s / 2:g}/s this engine sustains)"
            + (
                f", `half` = the same programs at {setup.rate_per_s / 2:g}/s (arrivals × 2)"
                if ran_half
                else " (`half` not run)"
            )
            + f". Controller: fixed window {setup.window} (batch + 2), round robin, retention "
            "off, priority off."
        )
    lines = [
        heading(setup),
        "",
        f"`benchmarks/sim_vs_live.py`: {trace} in the simulator and live (`bench replay` → "
        "`controller serve` → `engine serve`, or straight to the engine for `direct`) at "
        f"`--time-scale {setup.time_scale:g}`; engine {setup.profile}, batch "
        f"{setup.max_num_seqs}, {setup.num_gpu_blocks} KV blocks of {setup.block_size}, FCFS, "
        f"prefix caching, streams written at most every {setup.stream_interval_ms:g} ms. "
        f"Loads: {loads} Live = median of {_reps(table_rows, 'near', setup.reps)} runs (`near`)"
        + (f" / {_reps(table_rows, 'half', setup.reps_half)} (`half`)" if ran_half else "")
        + "; cells are live / simulated / error; times in model seconds; thr/s = "
        "completed programs per second in the arrival window."
        + (
            f" The controller's `memory_admission`: `{json.dumps(setup.memory_admission)}`."
            if setup.memory_admission
            else ""
        ),
        "",
    ]
    header = ["load", "config", *(m[0] for m in METRICS), "kept up"]
    cells = []
    for row in table_rows:
        cell = [row["load"], row["config"]]
        for label, _, _ in METRICS:
            lv, sv, err = row[label]
            cell.append(f"{_f(lv)} / {_f(sv)} / {_pct(err)}")
        cell.append("yes" if row["kept_up"] else f"**no** (lag {_f(row['lag_mean_s'])} s)")
        cells.append(cell)
    lines += _report.table(header, cells)
    lines.append("")
    lines += spread_lines(table_rows)
    lines += retention_lines(result)
    for load in LOADS:
        for label in ("E2E mean", "tok mean"):
            live, sim = ranking(result, load, label)
            if live:
                wrong = ranking_disagreements(result, load, label)
                verdict = "same order" if not wrong else "**live reverses** " + ", ".join(wrong)
                lines.append(
                    f"* {load}, {label}: live {' < '.join(live)}; simulated "
                    f"{' < '.join(sim)} ({verdict}; ties within {TIE:.0%} not counted)"
                )
    wins = win_ratios(result)
    if wins:
        lines.append(
            f"* live win near saturation, direct FCFS ÷ {wins['recommended']}: token latency "
            f"{wins['tok mean'][0]:.2f}× (simulated {wins['tok mean'][1]:.2f}×), mean E2E "
            f"{wins['E2E mean'][0]:.2f}× (simulated {wins['E2E mean'][1]:.2f}×)"
        )
    counted = [r for r in table_rows if r["kept_up"]]
    worst_mean = max((abs(r["E2E mean"][2]) for r in counted), default=math.nan)
    worst_p95 = max((abs(r["E2E p95"][2]) for r in counted), default=math.nan)
    flagged = len(table_rows) - len(counted)
    note = f"; {flagged} rows flagged (emulator fell behind)" if flagged else ""
    lines.append(
        f"* worst |error| over the {len(counted)} rows whose emulator kept up: mean E2E "
        f"{_f(worst_mean)} % (goal ≤ {GOAL_MEAN_PCT:g} %), p95 E2E {_f(worst_p95)} % (goal ≤ "
        f"{GOAL_P95_PCT:g} %){note}"
    )
    loads = [
        r["health"][k]
        for per_load in result["runs"].values()
        for entry in per_load.values()
        for r in entry["live"]
        for k in ("load_1m_before", "load_1m_after")
    ]
    if loads:
        lines.append(
            f"* machine: {os.cpu_count()} cores, 1-minute load average {min(loads):.2f}–"
            f"{max(loads):.2f} during the live runs; total wall {result['wall_s'] / 60:.1f} min"
        )
    given = coding_setup(False) if setup.workload == "coding" else Setup()
    flags = (
        f"--num-gpu-blocks {setup.num_gpu_blocks} "
        if setup.num_gpu_blocks != given.num_gpu_blocks
        else ""
    ) + (
        f"--memory-admission '{json.dumps(setup.memory_admission)}' "
        if setup.memory_admission
        else ""
    )
    lines += [
        "",
        "Reproduce: `.venv/bin/python benchmarks/sim_vs_live.py "
        + (
            f"--workload coding --loads {','.join(_loads_run(result))} {flags}--write-docs` "
            if setup.workload == "coding"
            else f"--defaults {flags}--write-docs` "
        )
        + '(`--quick` for a smoke run). What the errors come from: docs/simulator.md, "Fidelity".',
        "",
    ]
    return "\n".join(lines)


# -- main --------------------------------------------------------------------------------------


def run(
    setup: Setup, configs: Sequence[str], loads: Sequence[str], log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Every configuration at every load: the simulator once, the live stack ``reps`` times."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sim_vs_live-") as tmp:
        workdir = Path(tmp)
        traces = make_traces(setup, workdir)
        programs = sum(1 for _ in traces["near"].open()) - 1
        runs: dict[str, dict[str, Any]] = {}
        for load in loads:
            for config in configs:
                if config.startswith("defaults") and load != "near" and setup.workload != "coding":
                    continue
                sim = simulate(setup, traces[load], config)
                spread = simulate_jittered(setup, traces[load], config)
                live = []
                for rep in range(setup.reps if load == "near" else setup.reps_half):
                    summary = live_run(setup, traces[load], config, workdir)
                    live.append(summary)
                    h = summary["health"]
                    log(
                        f"{load:>4} {config:>8} rep {rep + 1}: E2E mean live "
                        f"{metric(summary, 'e2e_latency_s', 'mean'):.2f} sim "
                        f"{metric(sim, 'e2e_latency_s', 'mean'):.2f}, tok mean live "
                        f"{metric(summary, 'token_latency_s', 'mean'):.4f} sim "
                        f"{metric(sim, 'token_latency_s', 'mean'):.4f}, lag "
                        f"{h['lag_mean_s'] or 0:.4f} s, resets {h['schedule_resets']}, "
                        f"wall {h['wall_s']:.0f} s, load {h['load_1m_after']:.2f}"
                    )
                runs.setdefault(load, {})[config] = {"sim": sim, **spread, "live": live}
    return {
        "setup": dataclasses.asdict(setup),
        "programs": programs,
        "runs": runs,
        "wall_s": time.perf_counter() - started,
    }


def _simulated(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry's simulated run without its wall time (the one figure a rerun changes)."""
    return {k: v for k, v in entry["sim"].items() if k != "wall_s"}


#: The setup fields of the simulator's jittered spread: how many copies it ran and how far
#: their arrivals moved are the yardstick's, not what the runs measure.
SPREAD_FIELDS = ("sim_jitter_runs", "sim_jitter_s")


def _measured_setup(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result's setup, a field a file saved before it existed at its default, without the
    :data:`SPREAD_FIELDS`."""
    setup = dataclasses.asdict(Setup(**result["setup"]))
    return {k: v for k, v in setup.items() if k not in SPREAD_FIELDS}


def _with_jitter(entry: Mapping[str, Any], result: Mapping[str, Any]) -> dict[str, Any]:
    """``entry`` naming how far its jittered copies moved (a file saved before entries named
    it: its setup's)."""
    return {"sim_jitter_s": Setup(**result["setup"]).sim_jitter_s, **entry}


def merge(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Saved results of one setup (e.g. the two loads run apart) as one. A (load, config) in
    several files with the same simulated run — the same code, repetitions run apart — pools
    its live runs, with the simulator's jittered spread (and its jitter) of the file that ran
    the most copies; otherwise later files win."""
    merged: dict[str, Any] = {**results[0], "runs": {}, "wall_s": 0.0}
    for result in results:
        if _measured_setup(result) != _measured_setup(merged) or (
            result["programs"] != merged["programs"]
        ):
            raise SystemExit("--from-json: the files were made with different setups")
        for load, per_config in result["runs"].items():
            runs = merged["runs"].setdefault(load, {})
            for config, entry in per_config.items():
                entry, before = _with_jitter(entry, result), runs.get(config)
                if before is not None and _simulated(before) == _simulated(entry):
                    spread = max(before, entry, key=lambda e: len(e.get("sim_jittered") or []))
                    entry = {**entry, "live": [*before["live"], *entry["live"]],
                             "sim_jittered": spread.get("sim_jittered") or [],
                             "sim_jitter_s": spread["sim_jitter_s"]}  # fmt: skip
                runs[config] = entry
        merged["wall_s"] += result["wall_s"]
    return merged


def overridden(setup: Setup, overrides: Mapping[str, Any]) -> Setup:
    """``setup`` with the ``overrides`` that were given (``None``: not given, kept)."""
    return dataclasses.replace(setup, **{k: v for k, v in overrides.items() if v is not None})


def respread(result: Mapping[str, Any], runs: int | None, jitter_s: float | None) -> dict[str, Any]:
    """``result`` with the simulator's jittered spread run again, ``runs`` copies moved by up
    to ±``jitter_s`` (``None``: the setup's): a new yardstick for saved live runs, without
    running them again. Refused when the simulator no longer gives the saved simulated runs
    (the code changed since)."""
    setup = overridden(
        Setup(**result["setup"]), {"sim_jitter_runs": runs, "sim_jitter_s": jitter_s}
    )
    out: dict[str, Any] = {**result, "setup": dataclasses.asdict(setup), "runs": {}}
    with tempfile.TemporaryDirectory(prefix="sim_vs_live-") as tmp:
        traces = make_traces(setup, Path(tmp))
        for load, per_config in result["runs"].items():
            for config, entry in per_config.items():
                again = {"sim": simulate(setup, traces[load], config)}
                if _simulated(again) != _simulated(entry):
                    raise SystemExit(
                        f"--from-json: the simulator no longer gives the saved {load} {config} "
                        "run (the code changed since); run the comparison again"
                    )
                out["runs"].setdefault(load, {})[config] = {
                    **entry,
                    **simulate_jittered(setup, traces[load], config),
                }
    return out


def _memory_table(text: str) -> dict[str, Any]:
    """``--memory-admission``: a JSON object the controller's ``memory_admission`` table
    accepts (checked here, before a run of many minutes)."""
    from agentrt.errors import ConfigError
    from agentrt_controller.scheduling.memory import MemoryAdmissionConfig

    try:
        table = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(table, dict):
        raise argparse.ArgumentTypeError("expected a JSON object, e.g. '{\"enabled\": false}'")
    try:
        MemoryAdmissionConfig.from_mapping(table)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny and fast")
    parser.add_argument(
        "--from-json",
        metavar="FILE[,FILE]",
        help="render saved results (several are merged; a config's live runs made apart, "
        "against the same simulated run, are pooled)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument(
        "--save", metavar="FILE", help="also write the results (merged, respread) as JSON"
    )
    parser.add_argument("--time-scale", type=float, default=None)
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument(
        "--sim-jitter",
        type=int,
        default=None,
        metavar="N",
        help="simulated runs per configuration with jittered arrivals, the simulator's own "
        f"spread (default {Setup.sim_jitter_runs}; 0: none); with --from-json: run that "
        "spread again for the saved live runs",
    )
    parser.add_argument(
        "--sim-jitter-s",
        type=float,
        default=None,
        metavar="S",
        help="how far those copies move each arrival, ± model seconds (default "
        f"{Setup.sim_jitter_s:g}); with --from-json: run the spread again",
    )
    parser.add_argument("--rate", type=float, default=None)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument(
        "--num-gpu-blocks",
        type=int,
        default=None,
        metavar="N",
        help="the engine's KV cache in blocks, live and simulated (default: the workload's)",
    )
    parser.add_argument(
        "--memory-admission",
        type=_memory_table,
        default=None,
        metavar="JSON",
        help="the controller's memory_admission table for every configuration through it, "
        """live and simulated, e.g. '{"min_context_tokens": 8192}' (default: its defaults)""",
    )
    parser.add_argument(
        "--configs", default=None, help="comma-separated subset of " + ",".join(CONFIGS)
    )
    parser.add_argument("--loads", default="half,near")
    parser.add_argument(
        "--defaults", action="store_true", help="also run the controller's defaults"
    )
    parser.add_argument(
        "--workload",
        choices=["mixed", "coding"],
        default="mixed",
        help="the trace: mixed (the default), or a scaled-down coding trace on a KV-bound "
        "engine, direct vs the controller's defaults (module docstring)",
    )
    args = parser.parse_args(argv)
    if args.sim_jitter_s is not None and not args.sim_jitter_s > 0:
        parser.error("--sim-jitter-s: expected seconds > 0")
    if args.from_json:
        result = merge([json.loads(Path(f).read_text()) for f in args.from_json.split(",")])
        if args.sim_jitter is not None or args.sim_jitter_s is not None:
            result = respread(result, args.sim_jitter, args.sim_jitter_s)
    else:
        if args.workload == "coding":
            setup = coding_setup(args.quick)
        else:
            setup = Setup(duration_s=40.0, reps=1, time_scale=10.0) if args.quick else Setup()
        overrides = {
            "time_scale": args.time_scale,
            "reps": args.reps,
            "sim_jitter_runs": args.sim_jitter,
            "sim_jitter_s": args.sim_jitter_s,
            "rate_per_s": args.rate,
            "duration_s": args.duration,
            "num_gpu_blocks": args.num_gpu_blocks,
            "memory_admission": args.memory_admission,
        }
        setup = overridden(setup, overrides)
        if args.configs:
            configs = args.configs.split(",")
        elif args.workload == "coding":
            configs = ["direct", "defaults"]
        else:
            configs = ["direct", "plas"] if args.quick else ["direct", "fcfs", "plas", "atlas"]
        if args.defaults and "defaults" not in configs:
            configs.append("defaults")
        loads = ["near"] if args.quick else [x for x in args.loads.split(",") if x]
        result = run(setup, configs, loads, log=lambda s: print(s, file=sys.stderr, flush=True))
    if args.save:
        Path(args.save).write_text(json.dumps(result, indent=1))
    section_heading = heading(Setup(**result["setup"]))
    return _report.publish(args, markdown(result), result, ROOT / "docs", section_heading)


if __name__ == "__main__":
    raise SystemExit(main())
