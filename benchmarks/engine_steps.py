"""Engine-model throughput: simulated engine steps per second of wall time.

Workloads (all on the ``a100-llama3-8b`` profile, a batch of 64 sequences):

* ``steady-64`` — chatbot-like steady state: 64 sequences always running
  (``max_num_seqs=64``), a waiting queue that never runs dry, prompts of 256 tokens with a
  shared 128-token system prompt, outputs uniform in 100..450 tokens (mean ≈ 277, the ShareGPT
  chatbot output length Autellix reports, arXiv 2502.13965).
  Requests finish at staggered times, so fused runs end at the next finish.
* ``decode-64`` — 64 sequences started together, 1,500 output tokens each: long pure-decode
  stretches (the best case for fusion; the simulator bounds runs by its next event instead).

Modes: ``single`` calls ``step(now)`` (one iteration per call); ``fused`` calls
``step(now, max_steps=10**6)``. The figure is total ``num_steps`` / seconds, median of
``--repeats`` runs, both per wall second and per CPU second of this process (the machine is
shared: wall figures drop when other jobs run, CPU figures much less); ``speedup`` is
fused / single (CPU), measured in the same run.

    .venv/bin/python benchmarks/engine_steps.py [--steps N] [--repeats R] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrt_emulator.core import EngineConfig, EngineCore, EngineRequest, get_profile

BATCH = 64
SYSTEM_PROMPT = list(range(128))


def _request(rng: random.Random, serial: int, output_len: int, now_s: float) -> EngineRequest:
    user = [rng.randrange(1000, 50_000) for _ in range(128)]
    output = [rng.randrange(1000, 50_000) for _ in range(output_len)]
    return EngineRequest(f"r{serial}", SYSTEM_PROMPT + user, output, now_s)


Run = Callable[[], int]


def steady(steps: int, max_steps: int) -> Run:
    """Steady-state chatbot batch. Returns the timed part, which returns the steps simulated;
    the request stream is built beforehand so token generation is not timed."""
    rng = random.Random(7)
    # a request finishes every ~277 / 64 ≈ 4.3 steps
    stream = [_request(rng, i, rng.randint(100, 450), 0.0) for i in range(steps // 3 + 3 * BATCH)]

    def timed() -> int:
        core = EngineCore(EngineConfig(max_num_seqs=BATCH), get_profile("a100-llama3-8b"))
        feed = iter(stream)
        for _ in range(2 * BATCH):
            core.add_request(next(feed))
        done = 0
        now_s = 0.0
        while done < steps:
            result = core.step(now_s, max_steps=max_steps)
            assert result is not None
            now_s += result.duration_s
            done += result.num_steps
            for p in result.progress:
                if p.finished:
                    core.add_request(next(feed))
        return done

    return timed


def decode(steps: int, max_steps: int) -> Run:
    """64 long decodes started together (again and again until ``steps`` are simulated)."""
    rng = random.Random(11)
    batch = [_request(rng, i, 1500, 0.0) for i in range(BATCH)]

    def timed() -> int:
        done = 0
        now_s = 0.0
        while done < steps:
            core = EngineCore(EngineConfig(max_num_seqs=BATCH), get_profile("a100-llama3-8b"))
            for req in batch:
                core.add_request(req)
            while (result := core.step(now_s, max_steps=max_steps)) is not None:
                now_s += result.duration_s
                done += result.num_steps
        return done

    return timed


WORKLOADS: dict[str, Callable[[int, int], Run]] = {"steady-64": steady, "decode-64": decode}
MODES = {"single": 1, "fused": 10**6}


def measure(workload: Callable[[int, int], Run], steps: int, max_steps: int) -> tuple[float, float]:
    """Simulated steps per wall second and per CPU second of this process, for one run."""
    timed = workload(steps, max_steps)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    simulated = timed()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return simulated / wall, simulated / cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20_000, help="steps per run (default 20000)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    for name, workload in WORKLOADS.items():
        row: dict[str, float] = {}
        for mode, max_steps in MODES.items():
            runs = [measure(workload, args.steps, max_steps) for _ in range(args.repeats)]
            row[f"{mode}_wall"] = statistics.median(r[0] for r in runs)
            row[f"{mode}_cpu"] = statistics.median(r[1] for r in runs)
        row["speedup"] = row["fused_cpu"] / row["single_cpu"]
        results[name] = row
    if args.json:
        print(json.dumps({"batch": BATCH, "steps": args.steps, "results": results}, indent=2))
        return 0
    print(f"simulated engine steps per second, batch {BATCH}, median of {args.repeats} runs")
    print(f"of {args.steps} steps (wall = elapsed time; cpu = this process's CPU time)")
    header = ("workload", "single/wall", "single/cpu", "fused/wall", "fused/cpu", "speedup")
    print(f"{header[0]:<11}" + "".join(f"{h:>13}" for h in header[1:]))
    for name, row in results.items():
        cells = [row["single_wall"], row["single_cpu"], row["fused_wall"], row["fused_cpu"]]
        print(f"{name:<11}" + "".join(f"{c:>13,.0f}" for c in cells) + f"{row['speedup']:>12.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
