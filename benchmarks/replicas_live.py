"""Controller replicas behind HAProxy, live on loopback (docs/benchmarks.md, "Controller
replicas (live, HAProxy)"; docs/replicas.md).

Debian's ``haproxy`` with the shipped ``deploy/haproxy/haproxy.cfg`` (only its ``bind``
addresses and ``server`` lines replaced, as ``tests/ops/test_haproxy_replicas.py`` does) in
front of 1, 2 or 3 ``agentrt controller serve`` processes, all sharing two emulated engines
(``agentrt engine serve --time-scale X``). ``agentrt bench replay`` sends one mixed trace
through HAProxy as real SDK programs (program ids from the trace: HAProxy shards by them).

Reported per configuration, the median of ``--reps`` runs: programs completed / failed,
program E2E mean and p95 (model seconds), calls answered by each replica (the sum of its
``agentrt_controller_requests_total``) and each replica's CPU seconds per call (user + system
from ``/proc/<pid>/stat``). The **kill** configuration runs three replicas and SIGKILLs the
first one ``--kill-after`` wall seconds into the replay; it reports the calls HAProxy retried
on another replica (its log's retry count), the streams cut (a replica gone mid-answer:
termination state ``S?``, status 200), the calls the replay re-sent after a cut stream
(``bench replay --max-retries``, default 2: its ``calls_resent``) and the programs that
failed anyway.

``--shared-queue`` instead measures one shared engine's waiting queue with 1, 2 and 3
in-process replicas (adaptive windows, the batch size known or hidden as on a stock vLLM, and
no window), as ``tests/ops/test_replicas_shared_backend.py`` does (docs/replicas.md, "Shared
backends").

Run (from the repository root)::

    .venv/bin/python benchmarks/replicas_live.py --quick           # smoke: ~2 minutes
    .venv/bin/python benchmarks/replicas_live.py --reps 3          # the documented run
    .venv/bin/python benchmarks/replicas_live.py --shared-queue    # ~1 minute
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentrt_controller.backends.prometheus_text import sum_samples  # noqa: E402
from benchmarks._processes import cpu_s, free_port, server  # noqa: E402
from tests.ops.test_haproxy_replicas import (  # noqa: E402 - the substitution the test checks
    FRONTEND,
    HAPROXY_CONFIG,
    STATS,
    all_up,
    haproxy_config,
    replica_status,
)

AGENTRT = str(Path(sys.executable).with_name("agentrt"))
#: Wall seconds each replica's idle CPU is measured for before a replay.
IDLE_S = 4.0
#: An HAProxy httplog line: status, termination state, then the connection counts ending in
#: the retries (``+`` when redispatched to another server).
_LOG = re.compile(r"\] \S+ \S+/(\S+) \S+ (\d{3}) \d+ \S+ \S+ (\S{4}) \S+/\S+/\S+/\S+/\+?(\d+) ")


@dataclass(frozen=True)
class Setup:
    """What one run replays and on what."""

    #: Trace: the mixed workload, arrivals per model second, duration (model s), seed.
    rate_per_s: float = 0.5
    duration_s: float = 120.0
    seed: int = 1
    max_programs: int = 30
    #: The emulators run this many times faster than the modelled GPU.
    time_scale: float = 10.0
    #: Wall seconds into the replay at which the kill configuration SIGKILLs replica 1.
    kill_after_s: float = 8.0


def get(url: str, timeout_s: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def requests_total(url: str) -> float:
    """Sum of a controller's ``agentrt_controller_requests_total`` samples (its answered
    OpenAI calls)."""
    _, text = get(url + "/metrics")
    name = "agentrt_controller_requests_total"
    return sum_samples(text, (name,)).get(name, 0.0)


def haproxy_status(stats_url: str) -> dict[str, str]:
    """HAProxy's status of each replica, by server name (none while its stats page is empty)."""
    _, text = get(stats_url + "/stats;csv")
    return replica_status(text) if text else {}


def haproxy_log(log: Path) -> dict[str, int]:
    """Calls retried on another replica and streams cut by a replica, from HAProxy's log."""
    retried = cut = 0
    for line in set(log.read_text(errors="replace").splitlines()):  # printed twice with -db
        match = _LOG.search(line)
        if not match:
            continue
        _, status, termination, retries = match.groups()
        retried += int(retries) > 0
        cut += status == "200" and termination[0] == "S"
    return {"retried_calls": retried, "cut_streams": cut}


def make_trace(setup: Setup, path: Path) -> None:
    subprocess.run(
        [
            AGENTRT,
            "bench",
            "sim",
            "--workload",
            "mixed",
            "--rate",
            f"{setup.rate_per_s:g}",
            "--duration",
            f"{setup.duration_s:g}",
            "--seed",
            str(setup.seed),
            "--trace-out",
            str(path),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def run(setup: Setup, trace: Path, replicas: int, kill: bool, workdir: Path) -> dict[str, Any]:
    """One replay through HAProxy in front of ``replicas`` controllers."""
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    with contextlib.ExitStack() as stack:
        engines = []
        for i in range(2):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            argv = [
                AGENTRT, "engine", "serve", "--port", str(port),
                "--time-scale", f"{setup.time_scale:g}", "--max-model-len", "131072",
            ]  # fmt: skip
            stack.enter_context(
                server(
                    argv,
                    lambda u=url: get(u + "/health")[0] == 200,
                    f"engine {i}",
                    workdir / f"engine{i}.log",
                )
            )
            engines.append(url)
        controllers: list[tuple[subprocess.Popen[bytes], str]] = []
        for i in range(replicas):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            argv = [AGENTRT, "controller", "serve", "--port", str(port),
                    "--time-scale", f"{setup.time_scale:g}"]  # fmt: skip
            for engine in engines:
                argv += ["--backend", f"{engine},kind=emulator"]
            proc = stack.enter_context(
                server(
                    argv,
                    lambda u=url: get(u + "/readyz")[0] == 200,
                    f"replica {i + 1}",
                    workdir / f"replica{i + 1}.log",
                )
            )
            controllers.append((proc, url))
        lb_port, stats_port = free_port(), free_port()
        config = workdir / "haproxy.cfg"
        binds = {FRONTEND: f"127.0.0.1:{lb_port}", STATS: f"127.0.0.1:{stats_port}"}
        addresses = [u.removeprefix("http://") for _, u in controllers]
        config.write_text(haproxy_config(HAPROXY_CONFIG.read_text(), binds, addresses))
        stats_url = f"http://127.0.0.1:{stats_port}"
        log = workdir / "haproxy.log"
        stack.enter_context(
            server(
                [haproxy, "-db", "-f", str(config)],
                lambda: all_up(haproxy_status(stats_url), replicas),
                "haproxy",
                log,
            )
        )
        # Each replica's idle CPU (probes and scrapes of the engines, HAProxy's checks): the
        # rate over IDLE_S before the replay, taken out of its CPU per call.
        idle_before = [cpu_s(p.pid) for p, _ in controllers]
        time.sleep(IDLE_S)
        cpu_before = [cpu_s(p.pid) for p, _ in controllers]
        idle_rate = [
            (after - before) / IDLE_S for before, after in zip(idle_before, cpu_before, strict=True)
        ]
        argv = [
            AGENTRT, "bench", "replay", "--trace", str(trace),
            "--base-url", f"http://127.0.0.1:{lb_port}/v1",
            "--tokenize-url", engines[0], "--metrics-url", engines[0],
            "--time-scale", f"{setup.time_scale:g}", "--max-programs", str(setup.max_programs),
            "--json", "--no-progress",
        ]  # fmt: skip
        out_path, err_path = workdir / "replay.json", workdir / "replay.err"
        started = time.monotonic()
        victim_cpu = victim_calls = None
        with out_path.open("wb") as out, err_path.open("wb") as err:
            replay = subprocess.Popen(argv, stdout=out, stderr=err)
            if kill:
                try:
                    replay.wait(timeout=setup.kill_after_s)
                except subprocess.TimeoutExpired:
                    victim, victim_url = controllers[0]
                    victim_calls = requests_total(victim_url)
                    victim_cpu = cpu_s(victim.pid) - cpu_before[0]
                    os.kill(victim.pid, signal.SIGKILL)
            replay.wait()
        wall_s = time.monotonic() - started
        if replay.returncode != 0:
            raise RuntimeError(f"bench replay failed: {err_path.read_text()[-2000:]}")
        per_replica = []
        for i, (proc, url) in enumerate(controllers):
            if proc.poll() is None:
                calls, cpu = requests_total(url), cpu_s(proc.pid) - cpu_before[i]
            else:
                calls, cpu = victim_calls or 0.0, victim_cpu or 0.0
            lived_s = wall_s if proc.poll() is None or not kill else setup.kill_after_s
            busy = max(0.0, cpu - idle_rate[i] * lived_s)
            per_replica.append(
                {
                    "calls": calls,
                    "cpu_s": cpu,
                    "idle_cpu_s_per_s": idle_rate[i],
                    "cpu_ms_per_call": 1000 * busy / calls if calls else None,
                }
            )
        status = haproxy_status(stats_url)
    (summary,) = json.loads(out_path.read_text())
    return {
        "replicas": replicas,
        "kill": kill,
        "wall_s": wall_s,
        "programs": setup.max_programs,
        "programs_failed": summary["programs_failed"],
        "programs_measured_completed": summary["programs_completed"],
        "errors": (summary.get("errors") or [])[:3],
        "calls_resent": summary["calls_resent"],
        "resends": summary["resends"],
        "e2e_mean_s": summary["e2e_latency_s"]["mean"],
        "e2e_p95_s": summary["e2e_latency_s"]["p95"],
        "per_replica": per_replica,
        "haproxy_status_after": status,
        **haproxy_log(log),
        "load_1m": os.getloadavg()[0],
    }


def median(runs: Sequence[Mapping[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in runs)


def markdown(results: Mapping[str, Sequence[Mapping[str, Any]]], setup: Setup) -> str:
    lines = [
        f"Trace: `bench sim --workload mixed --rate {setup.rate_per_s:g} --duration "
        f"{setup.duration_s:g} --seed {setup.seed}`, first {setup.max_programs} programs, "
        f"replayed at `--time-scale {setup.time_scale:g}`; two emulators; medians of "
        f"{len(next(iter(results.values())))} runs.",
        "",
        "| configuration | programs done / failed | E2E mean / p95 (model s) | calls per replica | "
        "busy CPU ms per call, per replica | retried by HAProxy | streams cut | "
        "re-sent by the replay |",
        "|---|---:|---:|---|---|---:|---:|---:|",
    ]
    for name, runs in results.items():
        done = [r["programs"] - r["programs_failed"] for r in runs]
        failed = [r["programs_failed"] for r in runs]
        calls = [
            statistics.median(r["per_replica"][i]["calls"] for r in runs)
            for i in range(len(runs[0]["per_replica"]))
        ]
        cpu = [
            statistics.median(r["per_replica"][i]["cpu_ms_per_call"] or 0.0 for r in runs)
            for i in range(len(runs[0]["per_replica"]))
        ]
        lines.append(
            f"| {name} | {statistics.median(done):g} / {statistics.median(failed):g} | "
            f"{median(runs, 'e2e_mean_s'):.1f} / {median(runs, 'e2e_p95_s'):.1f} | "
            f"{' · '.join(f'{c:.0f}' for c in calls)} | "
            f"{' · '.join(f'{c:.2f}' for c in cpu)} | "
            f"{median(runs, 'retried_calls'):g} | {median(runs, 'cut_streams'):g} | "
            f"{median(runs, 'calls_resent'):g} |"
        )
    return "\n".join(lines)


async def shared_queue_run(count: int, batch_size_known: bool, window: str) -> dict[str, Any]:
    """Two or three in-process controllers flooding one in-process emulator (a batch of 8)
    with 120 calls in all, as ``tests/ops/test_replicas_shared_backend.py`` does: the engine's
    waiting queue sampled every 50 ms after the first fifth of the run."""
    import httpx

    from tests.ops.test_replicas_shared_backend import LIMITS, flood_sampling_waiting, shared_engine
    from tests.ops.test_replicas_shared_backend import replicas as in_process_replicas

    admission = None if window == "unlimited" else window
    async with (
        shared_engine(batch_size_known) as (engine, backend),
        in_process_replicas(count, backend, admission_window=admission) as urls,
        httpx.AsyncClient(timeout=120, limits=LIMITS) as http,
    ):
        waiting = await flood_sampling_waiting(http, urls, 120 // count, engine)
    steady = sorted(waiting[len(waiting) // 5 :])
    return {
        "replicas": count,
        "batch_size_known": batch_size_known,
        "window": window,
        "waiting_mean": statistics.mean(steady),
        "waiting_p90": steady[int(0.9 * (len(steady) - 1))],
        "waiting_max": steady[-1],
    }


def shared_queue() -> str:
    """The table of docs/replicas.md, "Shared backends"."""
    import anyio

    runs = [(n, known, "adaptive") for known in (True, False) for n in (1, 2, 3)]
    runs.append((2, True, "unlimited"))
    lines = ["| replicas, batch size, window | engine waiting mean / p90 / max |", "|---|---|"]
    for count, known, window in runs:
        r = anyio.run(shared_queue_run, count, known, window)
        label = f"{count}, {'known' if known else 'hidden'}, {window}"
        lines.append(f"| {label} | {r['waiting_mean']:.2f} / {r['waiting_p90']} / "
                     f"{r['waiting_max']} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one rep, 12 programs")
    parser.add_argument("--kill-after", type=float, default=Setup.kill_after_s)
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument(
        "--shared-queue",
        action="store_true",
        help="only the shared-backend measurement (in process, ~1 minute)",
    )
    args = parser.parse_args(argv)
    if args.shared_queue:
        print(shared_queue())
        return 0
    setup = Setup(kill_after_s=args.kill_after)
    reps = args.reps
    if args.quick:
        setup, reps = Setup(max_programs=12, kill_after_s=4.0), 1
    configurations = [("1 replica", 1, False), ("2 replicas", 2, False),
                      ("3 replicas", 3, False), ("3 replicas, one SIGKILLed", 3, True)]  # fmt: skip
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in configurations}
    with tempfile.TemporaryDirectory(prefix="agentrt-replicas-") as tmp:
        trace = Path(tmp) / "trace.jsonl"
        make_trace(setup, trace)
        for rep in range(reps):
            for name, count, kill in configurations:
                workdir = Path(tmp) / f"{rep}-{count}-{kill}"
                workdir.mkdir()
                result = run(setup, trace, count, kill, workdir)
                print(json.dumps({"configuration": name, "rep": rep, **result}), file=sys.stderr)
                results[name].append(result)
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1))
    print(markdown(results, setup))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
