"""Peers: our controller side by side with the routers users would pick instead.

vllm-router (Rust, program scheduling on), sglang-router (Rust, cache-aware) and LiteLLM's
proxy (Python) are installed at pinned versions into ``.peers-venv`` (git-ignored; a peer that
cannot be installed is skipped with the reason) and measured in one interleaved run against
ours (``agentrt controller serve``):

1. **overhead** — every proxy in front of one fixed-reply backend (``_peers_load``); per
   repetition, in rotating order: direct and via-proxy latency of sequential calls (added
   p50 / p99), calls/s with concurrent connections, and the proxy's CPU (its process tree,
   ``/proc``) per 1,000 calls and per 1,000 streamed chunks;
2. **programs** — a trace (``agentrt bench sim --trace-out``; ``mixed``, and ``coding`` with
   ``--coding``) replayed with ``agentrt bench replay``'s code through each proxy in front of
   fresh emulators (``agentrt engine serve``; the coding trace's are short of KV memory, as
   today's coding agents run: :data:`TRACE_DEFAULTS`): program E2E mean / p95, token latency, prefix
   hit rate, programs completed and the proxy's CPU over the run. The SDK sends
   vllm-router's ``agentic_context`` (``peer_hints``) and reports tool waits to ours.

Not run in CI (minutes long); ``_peers_report`` (medians, ratios, the docs section) is tested.

Run::

    .venv/bin/python benchmarks/peers.py --quick               # a smaller run, printed
    .venv/bin/python benchmarks/peers.py --write-docs          # docs/benchmarks.md "Peers"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import _peers_load as load  # noqa: E402
from benchmarks import _peers_report as report  # noqa: E402
from benchmarks import _peers_setup as setup  # noqa: E402
from benchmarks._engine_health import kept_up, scrape  # noqa: E402
from benchmarks._processes import free_port, stop, wait_until  # noqa: E402
from benchmarks._report import replace_section  # noqa: E402
from benchmarks.controller_overhead import word_counts  # noqa: E402

#: Extra ``agentrt controller serve`` options (``--ours-option``), set by :func:`main`.
OURS_OPTIONS: list[str] = []

#: The emulators' model (their default).
ENGINE_MODEL = "agentrt/emulated-llama-3.1-8b"


def _ready(port: int, key: str) -> bool:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/models", headers={"authorization": f"Bearer {key}"}
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        return bool(answer.status == 200)


@contextlib.contextmanager
def _started(
    argv: Sequence[str], env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            stop(proc)


@contextlib.contextmanager
def _proxy(
    name: str, backends: Sequence[str], model: str, workdir: Path, time_scale: float = 1.0
) -> Iterator[tuple[int, int]]:
    """``name`` started in front of ``backends`` (emulators at ``time_scale``); yields (port,
    pid) once it lists models."""
    port = free_port()
    spec = setup.launch(
        name, port, backends, model, workdir, free_port(), load.API_KEY, OURS_OPTIONS, time_scale
    )
    for path, text in spec.files.items():
        path.write_text(text)
    log = workdir / f"{name}.log"
    with _started(spec.argv, setup.environment(spec.env), log) as proc:
        try:
            wait_until(lambda: _ready(port, load.API_KEY), name, proc, 180.0)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc} (log: {log})") from None
        yield port, proc.pid


# --- 1. overhead ----------------------------------------------------------------------------


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _overhead_point(
    name: str, rep: int, port: int, pid: int, backend: int, args: argparse.Namespace
) -> dict[str, Any]:
    idle_from = load.tree_cpu_s(pid)
    await asyncio.sleep(args.idle_seconds)
    idle = load.tree_cpu_s(pid) - idle_from
    direct = await load.latencies(backend, args.calls)
    via = await load.latencies(port, args.calls)
    before = load.tree_cpu_s(pid)
    calls = await load.rate(port, args.concurrency, args.seconds, stream=False)
    middle = load.tree_cpu_s(pid)
    streamed = await load.rate(port, args.concurrency, args.seconds, stream=True)
    after = load.tree_cpu_s(pid)
    paced: dict[str, float] = {}
    if args.paced_seconds > 0:
        calls_paced = await load.rate(
            port, args.concurrency, args.paced_seconds, stream=True, paced=True
        )
        chunks = max(calls_paced * load.STREAM_CHUNKS, 1)
        paced = {
            "paced_calls_per_s": calls_paced / args.paced_seconds,
            "cpu_s_per_1k_paced_chunks": (load.tree_cpu_s(pid) - after) / chunks * 1e3,
        }
    prompts = {
        f"prompt_cpu_us_{words}": await load.prompt_cpu_s(port, pid, words, args.prompt_seconds)
        * 1e6
        for words in args.prompt_words
    }
    return {
        **paced,
        **prompts,
        "proxy": name,
        "rep": rep,
        "direct_p50_ms": _pct(direct, 0.5) * 1e3,
        "via_p50_ms": _pct(via, 0.5) * 1e3,
        "added_p50_ms": (_pct(via, 0.5) - _pct(direct, 0.5)) * 1e3,
        "added_p99_ms": (_pct(via, 0.99) - _pct(direct, 0.99)) * 1e3,
        "calls_per_s": calls / args.seconds,
        "cpu_s_per_1k_calls": (middle - before) / max(calls, 1) * 1e3,
        "streamed_calls_per_s": streamed / args.seconds,
        "cpu_s_per_1k_chunks": (after - middle) / max(streamed * load.STREAM_CHUNKS, 1) * 1e3,
        "idle_cpu_ms_per_s": idle / max(args.idle_seconds, 1e-9) * 1e3,
    }


def overhead(
    proxies: Sequence[str], args: argparse.Namespace, workdir: Path
) -> list[dict[str, Any]]:
    backend = free_port()
    points: list[dict[str, Any]] = []
    serve = [sys.executable, __file__, "--serve-backend", str(backend)]
    with contextlib.ExitStack() as stack:
        proc = stack.enter_context(_started(serve, dict(os.environ), workdir / "backend.log"))
        wait_until(lambda: _ready(backend, load.API_KEY), "backend", proc, 30.0)
        url = [f"http://127.0.0.1:{backend}"]
        running = {
            name: stack.enter_context(_proxy(name, url, load.MODEL, workdir)) for name in proxies
        }
        for rep in range(args.reps):
            shift = rep % len(proxies)
            for name in [*proxies[shift:], *proxies[:shift]]:
                port, pid = running[name]
                point = asyncio.run(_overhead_point(name, rep, port, pid, backend, args))
                points.append(point)
                print(f"overhead rep {rep} {name}: {json.dumps(point)}", file=sys.stderr)
    return points


# --- 2. programs ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceRun:
    """One trace to replay: its workload's arrivals and the emulators it runs on."""

    workload: str
    #: Programs per second.
    rate: float
    #: Model seconds of arrivals.
    duration_s: float
    #: KV blocks per emulator; ``None`` = the profile's (27,804 on the default a100).
    gpu_blocks: int | None


#: Each trace's arrival window and KV blocks per emulator when the command sets none. The
#: coding trace's engines are short of memory (12,288 blocks hold two or three of its 35-111 K
#: token contexts): with the profile's 27,804 and 90 s of arrivals nothing contends and every
#: proxy replays it alike; the mixed trace's contexts (< 1 K tokens) never fill an engine.
TRACE_DEFAULTS: dict[str, tuple[float, int | None]] = {
    "mixed": (90.0, None),
    "coding": (600.0, 12_288),
}


def trace_runs(args: argparse.Namespace) -> list[TraceRun]:
    """The traces the command asks for, each with ``--duration`` and ``--num-gpu-blocks``
    where given, else its own defaults (:data:`TRACE_DEFAULTS`)."""
    workloads = [
        *(() if args.coding_only else ("mixed",)),
        *(("coding",) if args.coding or args.coding_only else ()),
    ]
    runs = []
    for workload in workloads:
        duration, blocks = TRACE_DEFAULTS[workload]
        runs.append(
            TraceRun(
                workload,
                args.rate if workload == "mixed" else args.coding_rate,
                duration if args.duration is None else args.duration,
                blocks if args.num_gpu_blocks is None else args.num_gpu_blocks or None,
            )
        )
    return runs


def make_trace(trace: TraceRun, workdir: Path) -> Path:
    path = workdir / f"{trace.workload}.jsonl"
    subprocess.run(
        [
            sys.executable, "-m", "agentrt.cli", "bench", "sim", "--workload", trace.workload,
            "--rate", str(trace.rate), "--duration", str(trace.duration_s), "--seed", "1",
            "--trace-out", str(path),
        ],
        cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return path


@contextlib.contextmanager
def _engines(
    args: argparse.Namespace, workdir: Path, gpu_blocks: int | None
) -> Iterator[list[str]]:
    with contextlib.ExitStack() as stack:
        urls = []
        for index in range(args.engines):
            port = free_port()
            argv = [
                sys.executable, "-m", "agentrt.cli", "engine", "serve", "--port", str(port),
                "--time-scale", str(args.time_scale), "--max-num-seqs", str(args.max_num_seqs),
                # the coding trace's prompts reach ~90 K tokens (the default is 32,768)
                "--max-model-len", "131072",
                "--stream-interval-ms", f"{args.stream_interval_ms:g}",
                *(["--num-gpu-blocks", str(gpu_blocks)] if gpu_blocks else []),
            ]  # fmt: skip
            proc = stack.enter_context(
                _started(argv, dict(os.environ), workdir / f"engine{index}.log")
            )
            wait_until(lambda port=port: _ready(port, "x"), f"engine {index}", proc, 60.0)
            urls.append(f"http://127.0.0.1:{port}")
        yield urls


def _program_point(
    name: str, rep: int, trace: Path, gpu_blocks: int | None, args: argparse.Namespace,
    workdir: Path,
) -> dict[str, Any]:  # fmt: skip
    import anyio

    from agentrt_sim.replay.runner import ReplayConfig, replay
    from agentrt_sim.replay.summary import summarize_replay
    from agentrt_sim.workloads.trace import load_trace

    programs = load_trace(trace)
    with (
        _engines(args, workdir, gpu_blocks) as engines,
        _proxy(name, engines, ENGINE_MODEL, workdir, args.time_scale) as (port, pid),
    ):
        config = ReplayConfig(
            f"http://127.0.0.1:{port}/v1",
            model=ENGINE_MODEL,
            time_scale=args.time_scale,
            api_key=load.API_KEY,
            tokenize_url=engines[0],
            metrics_url=engines[0],
            controller="auto"
            if name in (report.OURS, *setup.VARIANTS) and args.ours_events == "on"
            else "off",
            peer_hints=("vllm-router",) if name == "vllm-router" else (),
        )
        before = load.tree_cpu_s(pid)
        result, _ = anyio.run(replay, programs, config)
        cpu = load.tree_cpu_s(pid) - before
        health = [scrape(url) for url in engines]
    duration = max(max(p.arrival_s for p in programs), 1e-9)
    summary = summarize_replay(
        result, scale=args.time_scale, warmup_s=0.1 * duration, window_end_s=duration
    )
    failed = [p.error for p in result.programs if p.error]
    return {
        "proxy": name,
        "rep": rep,
        "e2e_mean_s": summary["e2e_latency_s"]["mean"],
        "e2e_p95_s": summary["e2e_latency_s"]["p95"],
        "token_latency_mean_s": summary["token_latency_s"]["mean"],
        "prefix_hit_rate": summary["prefix_hit_rate"],
        "proxy_cpu_s": cpu,
        "programs_completed": summary["programs_completed"],
        "programs_failed": len(failed),
        "first_error": failed[0] if failed else None,
        "engine_lag_mean_s": max(h["lag_mean_s"] or 0.0 for h in health),
        "engine_dropped_model_s": sum(h["dropped_model_s"] or 0.0 for h in health),
        "engines_kept_up": all(kept_up(h) for h in health),
    }


def programs(
    proxies: Sequence[str], trace: TraceRun, args: argparse.Namespace, workdir: Path
) -> list[dict[str, Any]]:
    path = make_trace(trace, workdir)
    points = []
    for rep in range(args.program_reps):
        shift = rep % len(proxies)
        for name in [*proxies[shift:], *proxies[:shift]]:
            point = _program_point(name, rep, path, trace.gpu_blocks, args, workdir)
            points.append(point)
            print(f"programs {trace.workload} rep {rep} {name}: {json.dumps(point)}",
                  file=sys.stderr)  # fmt: skip
    return points


# --- the run --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    proxies = report.parse_proxies(args.proxies, setup.KNOWN)
    workdir = Path(tempfile.mkdtemp(prefix="agentrt-peers-"))
    peers = [p for p in proxies if p not in (report.OURS, *setup.REFERENCES, *setup.VARIANTS)]
    skipped = {} if args.no_install else setup.install(peers, log=workdir / "pip.log")
    versions: dict[str, str] = {"agentrt": _our_version()}
    versions.update(
        {r: f"reference ({setup.REFERENCES[r]})" for r in proxies if r in setup.REFERENCES}
    )
    versions.update(
        {
            v: f"reference (ours, {' '.join(setup.VARIANTS[v])})"
            for v in proxies
            if v in setup.VARIANTS
        }
    )
    for peer in peers:
        version = setup.installed_version(peer)
        if version is None:
            skipped.setdefault(peer, f"not installed in {setup.VENV}")
        elif peer not in skipped:
            versions[peer] = version
    usable = [p for p in proxies if p not in skipped]
    for peer, reason in skipped.items():
        print(f"skipping {peer}: {reason}", file=sys.stderr)
    load_before = os.getloadavg()[0]
    result: dict[str, Any] = {
        "command": "python benchmarks/peers.py " + " ".join(args.argv),
        "versions": versions,
        "skipped": skipped,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "reps": args.reps, "calls": args.calls, "concurrency": args.concurrency,
        "seconds": args.seconds, "chunks": load.STREAM_CHUNKS, "idle_seconds": args.idle_seconds,
        "prompt_words": args.prompt_words, "prompt_seconds": args.prompt_seconds,
        "paced_seconds": args.paced_seconds, "pace_ms": load.PACE_S * 1e3,
        "engines": args.engines, "time_scale": args.time_scale, "trace": "mixed",
        "max_num_seqs": args.max_num_seqs, "stream_interval_ms": args.stream_interval_ms,
        "ours_events": args.ours_events,
        # our controller runs the program rows at the emulators' time scale
        "ours_time_scale": args.time_scale,
    }  # fmt: skip
    started = time.monotonic()
    result["overhead"] = overhead(usable, args, workdir) if args.reps else []
    result["program"] = []
    for trace in trace_runs(args) if args.program_reps else []:
        for key, value in (
            ("rate", trace.rate),
            ("duration", trace.duration_s),
            ("num_gpu_blocks", trace.gpu_blocks),
            ("program", programs(usable, trace, args, workdir)),
        ):
            result[report.trace_key(trace.workload, key)] = value
        if trace.workload != "mixed":
            result["trace"] = "mixed, coding"
    result["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def _our_version() -> str:
    from agentrt import __version__

    return str(__version__)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--proxies",
        default=",".join(setup.PROXIES),
        help=f"comma-separated, of {', '.join(setup.KNOWN)} (default: all but the reference "
        "rows: python-floor, the least a Python relay costs, and agentrt-quiet, ours without "
        "its access log)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, shorter runs")
    parser.add_argument("--reps", type=int, default=5, help="overhead repetitions (0 = skip)")
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per latency run")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0, help="per calls/s and streaming run")
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=1.0,
        help="before each overhead repetition, the proxy's CPU with no calls is measured for "
        "this long (a proxy whose threads poll burns CPU idle, which the per-call figures "
        "include)",
    )
    parser.add_argument(
        "--paced-seconds", type=float, default=2.0,
        help="a third run, this long, of streams whose backend sends each event 1 ms after "
        "the one before (each a read of its own, as an engine at decode pace): CPU per "
        "chunk there (0 = skip)",
    )  # fmt: skip
    parser.add_argument(
        "--prompt-words", type=word_counts, default=[1000, 128000],
        help="comma-separated prompt sizes (words, ≈ tokens): each overhead repetition also "
        "measures the proxy's CPU per call with an agent-like prompt of each size, a history "
        "every call repeats ('' = none; default: 1000,128000)",
    )  # fmt: skip
    parser.add_argument(
        "--prompt-seconds", type=float, default=2.0,
        help="sequential calls for this long per prompt size (at least 5)",
    )  # fmt: skip
    parser.add_argument(
        "--program-reps", type=int, default=3, help="trace replays per proxy (0 = skip)"
    )
    parser.add_argument(
        "--coding", action="store_true", help="replay the coding workload's trace too"
    )
    parser.add_argument(
        "--coding-only", action="store_true", help="replay the coding trace only (no mixed)"
    )
    parser.add_argument("--rate", type=float, default=0.6, help="mixed trace: programs per second")
    parser.add_argument(
        "--coding-rate", type=float, default=0.03, help="coding trace: programs per second"
    )
    parser.add_argument(
        "--duration", type=float,
        help="model seconds of arrivals in every trace (default: mixed 90, coding 600)",
    )  # fmt: skip
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--max-num-seqs", type=int, default=8, help="slots per emulator")
    parser.add_argument(
        "--num-gpu-blocks", type=int,
        help="KV blocks of 16 tokens per emulator in every trace (0 = the profile's: 27,804 on "
        "the default a100; default: mixed the profile's, coding 12,288, short of memory)",
    )  # fmt: skip
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument(
        "--stream-interval-ms", type=float, default=0.0,
        help="the emulators' --stream-interval-ms in the program runs: a stream's tokens are "
        "written at most this often, first and last never held (default 0: every engine step, "
        "as vLLM streams; more spares the shared cores the per-token work of every process)",
    )  # fmt: skip
    parser.add_argument(
        "--ours-option",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra argument to our controller serve (repeat; e.g. "
        "--ours-option=--admission-window --ours-option=unlimited)",
    )
    parser.add_argument(
        "--ours-events", choices=("on", "off"), default="on",
        help="whether the SDK sends ours its program and tool-wait events in the program runs "
        "(default on, as an agentrt runtime does; off = ours gets what the others get)",
    )  # fmt: skip
    parser.add_argument(
        "--note",
        action="append",
        default=[],
        metavar="TEXT",
        help="an observation to print under the tables (repeat; kept in --json)",
    )
    parser.add_argument("--no-install", action="store_true", help="use .peers-venv as it is")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--from-json", metavar="FILE", help="render a saved --json result")
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--serve-backend", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.serve_backend:
        load.serve_backend(args.serve_backend)
        return 0
    OURS_OPTIONS[:] = args.ours_option
    if args.quick:
        args.reps, args.calls, args.seconds = (
            min(args.reps, 3),
            min(args.calls, 300),
            min(args.seconds, 2.0),
        )
        args.program_reps, args.duration = (
            min(args.program_reps, 1),
            min(args.duration or 60.0, 60.0),
        )
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
    else:
        try:
            result = run(args)
        except ValueError as exc:
            parser.error(str(exc))
    result["notes"] = [*result.get("notes", []), *args.note]
    section = report.markdown(result)
    print(json.dumps(result, indent=2) if args.json else section)
    if args.write_docs:
        replace_section(ROOT / "docs" / "benchmarks.md", "## Peers", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
