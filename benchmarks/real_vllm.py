"""Real-engine benchmark (INDICATIVE: a tiny random model on a 2-core CPU machine): the same
mixed agent programs straight to a stock vLLM and through the controller on its product
defaults, same engine, same load, CPU cores split between the engine and the rest.

Setup (docs/real-vllm.md, "The real-engine benchmark"):

* one real vLLM 0.32 CPU server (scripts/vllm/server.py) as a user runs it: FCFS (vLLM's
  default scheduling), ``--max-num-seqs`` 8, prefix caching, and a 12 ms engine step floor
  (``--step-floor-ms``): a real model on a GPU takes 10-30 ms per decode step, and a slower
  step leaves the CPU to the HTTP processes, so that the engine rather than the CPU of the
  HTTP processes is the bottleneck, as on a real deployment;
* **CPU pinning** (``--pin``, on by default with >= 2 usable cores): every vLLM process
  (API server, engine core, worker and all their threads) on ``--engine-cpus`` (core 1), the
  load generator (this process) and the controller on ``--client-cpus`` (core 0), in every
  configuration, so that the extra hop's CPU does not come out of the engine's. The pinning is
  read back from ``/proc/<pid>/task/<tid>/status`` (``Cpus_allowed_list``) of every process
  of vLLM's process group, the controller and this process, printed and recorded; a thread
  outside its core set stops the benchmark;
* configurations (``--configs``; the first two always run):

  - ``direct``: the programs straight to vLLM;
  - ``controller``: ``agentrt controller serve --backend URL`` and no other policy flag, i.e.
    the product defaults (agentrt_controller/defaults.py: PLAS, adaptive admission window,
    prefix router, KV retention on, priority passthrough off); against a stock vLLM the
    adaptive window follows the scraped ``vllm:num_requests_waiting`` (vLLM reports no batch
    size). The controller's start-up line is recorded to show what it ran;
  - extra rows: the defaults with one setting changed — ``retention-off``, ``fixed-window``
    (``--admission-window --window``), ``no-window`` (unlimited), ``slow-scrape``
    (``--scrape-interval-s 5``: fewer /metrics pages for vLLM's API server to render);
    ``proxy`` (FCFS, no window, retention off: the cost of the extra hop alone); ``atlas``
    (ATLAS, window ``--window``, retention off, ``priority=on`` in front of a second,
    ``--scheduling-policy priority`` server on the same engine cores: the configuration
    measured before the product defaults existed);

* one seeded workload, replayed for each configuration: programs arrive as a Poisson process
  (``--rate`` per second for ``--duration-s``), an equal mix of the three kinds below, whose
  sizes are long-tailed (``scale`` x Pareto(1.3), capped) as in every workload Autellix
  measured (arXiv 2502.13965):

  - **react**: 1-12 steps (median 2) of (LLM call, 32 tokens; tool wait, lognormal, median
    0.3 s, 0.05-2 s), then a 48-token answer; a ~300-token system prompt shared by all react
    programs, the conversation growing step by step;
  - **map_reduce**: 3-16 parallel map calls (median 5) over ~120-token chunks (24 tokens
    each), then a 48-token reduce call;
  - **mcts**: 1-8 iterations (median 1) of 3 parallel proposals (32 tokens) then 3 parallel
    evaluations (8 tokens); the best child is expanded next (a small LATS shape);

  all written with the agentrt SDK (``Runtime``, ``chat``, ``@tool``, ``gather``,
  ``map_reduce``); outputs have fixed lengths (``ignore_eos``);
* per repetition every configuration runs once, one after the other, in the given order in
  even repetitions and reversed in odd ones (direct and controller alternate which goes
  first) to spread slow drifts of the machine; each run on a
  freshly reset prefix cache and an idle engine; the machine's load average (``uptime``) is
  recorded before each run.

Reported per configuration, the median over repetitions: program E2E latency (end - scheduled
arrival, s) mean and p95, and the mean token latency (each program's E2E divided by its output
tokens, averaged over programs; the normalised latency of the vLLM paper, Kwon et al., SOSP
2023); ratios direct / configuration paired within each repetition (> 1: programs finish
sooner than direct), their median and min-max; and where the time of a call goes (the SDK's
call latency, the controller's queue wait, vLLM's own queue and request latency, from both
/metrics pages) with the CPU each side used.

Run::

    AGENTRT_VLLM_PYTHON=.vllm-venv/bin/python .venv/bin/python benchmarks/real_vllm.py
    ... --write-docs      # also replace the "Real vLLM (indicative)" section of docs/benchmarks.md
    ... --save FILE       # the JSON result; --render FILE re-renders it without servers
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import datetime
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

import agentrt
from agentrt import Runtime, RuntimeConfig, tool

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import _report  # noqa: E402
from benchmarks._processes import free_port  # noqa: E402
from benchmarks._real_vllm_pinning import (  # noqa: E402
    Pinning,
    affinity,
    children,
    cpu_seconds,
    format_cpu_list,
    process_group,
    resolve_pinning,
)
from benchmarks._real_vllm_report import markdown  # noqa: E402
from benchmarks._vllm_launcher import load_launcher  # noqa: E402

IGNORE_EOS = {"ignore_eos": True}
KINDS = ("react", "map_reduce", "mcts")
SYSTEM = "You are a careful agent. Tools:\n" + "\n".join(
    f"def tool_{i}(value_{i}, option_{i}=None):  # returns result_{i}" for i in range(30)
)


# --- the workload ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgramSpec:
    """One program of the workload: its kind, arrival (s after the run's start) and shape."""

    index: int
    kind: str
    arrival_s: float
    #: react: one tool-wait duration (s) per step.
    tool_s: tuple[float, ...] = ()
    #: map_reduce: number of chunks.
    chunks: int = 0
    #: mcts: number of expand/evaluate iterations.
    iterations: int = 0


def heavy_tail(rng: random.Random, scale: float, cap: int) -> int:
    """A program size: ``scale`` x Pareto(alpha 1.3), at least 1, at most ``cap``. Program
    lengths are long-tailed in every workload Autellix measured (arXiv 2502.13965); with
    light-tailed lengths, least-attained-service policies have nothing to exploit."""
    return max(1, min(cap, round(scale * rng.paretovariate(1.3))))


def make_workload(
    seed: int, rate: float, duration_s: float, sizes: str = "heavy"
) -> list[ProgramSpec]:
    """Poisson arrivals at ``rate`` programs/s for ``duration_s``; kinds in equal shares.
    ``sizes``: ``heavy`` (long-tailed, the default) or ``light`` (uniform: 2-4 react steps,
    4-6 chunks, 2-3 MCTS iterations)."""
    rng = random.Random(seed)

    def size(scale: float, cap: int, low: int, high: int) -> int:
        return heavy_tail(rng, scale, cap) if sizes == "heavy" else rng.randint(low, high)

    arrivals: list[float] = []
    t = rng.expovariate(rate)
    while t < duration_s:
        arrivals.append(t)
        t += rng.expovariate(rate)
    kinds = [KINDS[i % len(KINDS)] for i in range(len(arrivals))]
    rng.shuffle(kinds)
    specs = []
    for index, (arrival, kind) in enumerate(zip(arrivals, kinds, strict=True)):
        tool_s: tuple[float, ...] = ()
        if kind == "react":  # tool waits: lognormal, median 0.3 s, clipped to [0.05, 2] s
            steps = size(1.5, 12, 2, 4)
            tool_s = tuple(
                min(2.0, max(0.05, rng.lognormvariate(math.log(0.3), 0.8))) for _ in range(steps)
            )
        specs.append(
            ProgramSpec(
                index,
                kind,
                arrival,
                tool_s=tool_s,
                chunks=size(3.0, 16, 4, 6) if kind == "map_reduce" else 0,
                iterations=size(1.0, 8, 2, 3) if kind == "mcts" else 0,
            )
        )
    return specs


@tool
async def observe(seconds: float) -> str:
    """Run an external tool that takes ``seconds`` to answer.

    Args:
        seconds: how long the tool takes.
    """
    await anyio.sleep(seconds)
    return f"observation after {seconds:.2f} s"


def code_lines(tag: str, lines: int) -> str:
    """Python-like text (the tiny tokenizer's home ground, ~9 tokens a line)."""
    return "\n".join(f"value_{tag}_{i} = compute(value_{tag}_{i - 1}, {i})" for i in range(lines))


@dataclass
class Tally:
    """What one program's calls add up to (shared by the program's parallel branches)."""

    #: Output tokens of the program's calls (``usage.completion_tokens``).
    output_tokens: int = 0
    #: The run's per-call latencies as the SDK saw them (s), appended to by every program.
    call_latency_s: list[float] = field(default_factory=list)


#: The running program's tally; branches (``gather``, ``map_reduce``) share the object.
TALLY: contextvars.ContextVar[Tally] = contextvars.ContextVar("real_vllm_tally")


async def ask(messages: list[dict[str, str]], tokens: int) -> str:
    tally = TALLY.get()
    started = time.perf_counter()
    reply = await agentrt.chat(messages, max_tokens=tokens, extra_body=IGNORE_EOS)
    tally.call_latency_s.append(time.perf_counter() - started)
    if reply.usage is None:
        raise RuntimeError("the server answered without usage; token latency needs it")
    tally.output_tokens += reply.usage.completion_tokens
    return reply.choices[0].message.content or ""


async def react(spec: ProgramSpec) -> None:
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"task {spec.index}: {code_lines(f't{spec.index}', 4)}"},
    ]
    for seconds in spec.tool_s:
        messages.append({"role": "assistant", "content": await ask(messages, 32)})
        messages.append({"role": "user", "content": await observe(seconds=seconds)})
    await ask(messages, 48)


async def map_reduce(spec: ProgramSpec) -> None:
    async def summarise(chunk: int) -> str:
        text = code_lines(f"d{spec.index}c{chunk}", 13)
        return await ask([{"role": "user", "content": f"summarise:\n{text}"}], 24)

    async def combine(parts: list[str]) -> str:
        return await ask([{"role": "user", "content": "combine:\n" + "\n".join(parts)}], 48)

    await agentrt.map_reduce(list(range(spec.chunks)), summarise, combine, limit=None)


async def mcts(spec: ProgramSpec) -> None:
    path = f"puzzle {spec.index}: {code_lines(f'p{spec.index}', 6)}"
    for depth in range(spec.iterations):

        def propose(child: int, base: str = path, level: int = depth) -> Any:
            text = f"{base}\nstep {level}, option {child}:"
            return ask([{"role": "user", "content": text}], 32)

        children = await agentrt.gather(*(lambda c=c: propose(c) for c in range(3)))

        def evaluate(child: str, base: str = path) -> Any:
            text = f"{base}\n{child}\nscore:"
            return ask([{"role": "user", "content": text}], 8)

        scores = await agentrt.gather(*(lambda c=c: evaluate(c) for c in children))
        best = max(range(3), key=lambda i: (len(scores[i]), -i))  # any deterministic choice
        path = f"{path}\n{children[best]}"


PROGRAMS = {"react": react, "map_reduce": map_reduce, "mcts": mcts}


@dataclass
class RunResult:
    """One configuration's run."""

    #: Program E2E latency (s) by kind.
    e2e_s: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    #: Per program: E2E / output tokens (s per token).
    token_latency_s: list[float] = field(default_factory=list)
    #: Every call's latency as the SDK saw it (s).
    call_latency_s: list[float] = field(default_factory=list)
    #: From the first arrival's schedule to the last program's end (s).
    wall_s: float = 0.0

    def all(self) -> list[float]:
        return [x for values in self.e2e_s.values() for x in values]


async def run_workload(
    specs: list[ProgramSpec], base_url: str, model: str, controller: bool
) -> RunResult:
    """Start each program at its arrival time; record its E2E latency and its calls."""
    result = RunResult()
    config = RuntimeConfig(
        base_url=base_url,
        model=model,
        controller="required" if controller else "off",
        max_retries=2,
        request_timeout_s=300.0,
    )
    async with Runtime(config) as rt:
        start = anyio.current_time()

        async def one(spec: ProgramSpec) -> None:
            tally = Tally(call_latency_s=result.call_latency_s)
            TALLY.set(tally)  # this task's own context: the program's branches inherit it
            await anyio.sleep_until(start + spec.arrival_s)
            async with rt.program(spec.kind):
                await PROGRAMS[spec.kind](spec)
            e2e = anyio.current_time() - start - spec.arrival_s
            result.e2e_s[spec.kind].append(e2e)
            result.token_latency_s.append(e2e / max(1, tally.output_tokens))

        async with anyio.create_task_group() as group:
            for spec in specs:
                group.start_soon(one, spec)
        result.wall_s = anyio.current_time() - start
    return result


# --- servers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def vllm_servers(
    policies: Sequence[str], max_num_seqs: int, step_floor_ms: float, pinning: Pinning
) -> Iterator[dict[str, Any]]:
    """One vLLM server per scheduling policy (``fcfs``, ``priority``), started in parallel on
    the engine CPUs, stopped at the end."""
    launcher = load_launcher()
    python = launcher.find_vllm_python()
    if python is None:
        raise SystemExit("real vLLM not installed: run scripts/vllm/setup.sh")
    model_dir = launcher.ensure_model(python)
    cpus = None if pinning.engine is None else format_cpu_list(pinning.engine)
    options = [
        launcher.ServerOptions(
            max_num_seqs=max_num_seqs,
            scheduling_policy=policy,
            step_floor_ms=step_floor_ms,
            cpus=cpus,
        )
        for policy in policies
    ]
    with concurrent.futures.ThreadPoolExecutor(len(options)) as pool:
        futures = [pool.submit(launcher.start_server, python, model_dir, o) for o in options]
        servers = [f.result() for f in futures]
    try:
        yield dict(zip(policies, servers, strict=True))
    finally:
        for server in servers:
            launcher.stop_server(server)


@dataclass
class ControllerProcess:
    """A running ``agentrt controller serve``."""

    url: str
    pid: int
    #: Its start-up line ("agentrt controller on ... policy=... window=... ...").
    banner: str


@contextlib.contextmanager
def controller_process(
    backend: str, extra_args: Sequence[str], pinning: Pinning
) -> Iterator[ControllerProcess]:
    """``agentrt controller serve --port P --backend BACKEND [EXTRA_ARGS]`` as a separate
    process (as deployed), on the client CPUs when pinned."""
    port = free_port()
    command = [sys.executable, "-m", "agentrt.cli", "controller", "serve", "--port", str(port)]
    command += ["--backend", backend, *extra_args]
    if pinning.client is not None:
        command = ["taskset", "-c", format_cpu_list(pinning.client), *command]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_CONTROLLER_")}
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise SystemExit(f"the controller did not start:\n{log.read()[-3000:]}")
                time.sleep(0.1)
            log.seek(0)
            banner = next((ln for ln in log if "agentrt controller on" in ln), "").strip()
            yield ControllerProcess(url, proc.pid, banner)
        finally:
            proc.terminate()
            proc.wait(timeout=20)


async def reset_cache(server: Any) -> None:
    """An empty prefix cache and an idle engine before each run."""
    async with httpx.AsyncClient(timeout=30) as http:
        for _ in range(600):
            metrics = (await http.get(server.metrics_url)).text
            if re.search(r"^vllm:num_requests_running\{[^}]*\} 0\.0$", metrics, re.M):
                break
            await anyio.sleep(0.1)
        (await http.post(server.base_url + "/reset_prefix_cache")).raise_for_status()


#: Prometheus series summed over labels, read before and after each run.
VLLM_SERIES = (
    "vllm:request_queue_time_seconds_sum",
    "vllm:e2e_request_latency_seconds_sum",
    "vllm:e2e_request_latency_seconds_count",
    "vllm:request_prefill_time_seconds_sum",
    "vllm:request_decode_time_seconds_sum",
    "vllm:num_preemptions_total",
    "vllm:inter_token_latency_seconds_sum",
    "vllm:inter_token_latency_seconds_count",
    "vllm:prompt_tokens_total",
    "vllm:prefix_cache_hits_total",
)
CONTROLLER_SERIES = (
    "agentrt_controller_queue_wait_seconds_sum",
    "agentrt_controller_queue_wait_seconds_count",
)


def prometheus_sums(text: str, names: Sequence[str]) -> dict[str, float]:
    """Each of ``names`` summed over all its label sets in a Prometheus text page (0 if
    absent)."""
    sums = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        key, _, value = line.rpartition(" ")
        name = key.partition("{")[0]
        if name in sums:
            with contextlib.suppress(ValueError):
                sums[name] += float(value)
    return sums


async def scrape(url: str, names: Sequence[str]) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.get(url + "/metrics")
        response.raise_for_status()
        return prometheus_sums(response.text, names)


async def probe_hop(url: str, model: str, calls: int = 20) -> float:
    """Median latency (s) of ``calls`` sequential 8-token chat calls at an idle engine."""
    latencies = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for i in range(calls):
            body = {
                "model": model,
                "messages": [{"role": "user", "content": code_lines(f"h{i}", 2)}],
                "max_tokens": 8,
            } | IGNORE_EOS
            started = time.perf_counter()
            (await http.post("/chat/completions", json=body)).raise_for_status()
            latencies.append(time.perf_counter() - started)
    return statistics.median(latencies)


@dataclass(frozen=True)
class Sample:
    """Queue lengths at one moment of a run."""

    #: vLLM's ``num_requests_running`` and ``num_requests_waiting`` (its /metrics).
    vllm_running: float
    vllm_waiting: float
    #: Calls waiting in the controller's queues (retained lane included) and its calls in
    #: flight at vLLM (``GET /agentrt/v1/queues``); None without a controller.
    controller_queued: int | None = None
    controller_in_flight: int | None = None


async def sample_queues(
    vllm_url: str, controller_url: str | None, samples: list[Sample], period_s: float = 0.5
) -> None:
    """Append a :class:`Sample` every ``period_s`` until cancelled (the same rate in every
    configuration: each scrape of vLLM's /metrics costs its API server a few ms)."""
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting")
    async with httpx.AsyncClient(timeout=10) as http:
        while True:
            await anyio.sleep(period_s)
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, IndexError):
                gauges = prometheus_sums((await http.get(vllm_url + "/metrics")).text, names)
                queued = in_flight = None
                if controller_url is not None:
                    snap = (await http.get(controller_url + "/agentrt/v1/queues")).json()
                    queued = int(snap["queued"]) + int(snap["retained_lane"]["queued"])
                    in_flight = int(snap["backends"][0]["in_flight"])
                samples.append(Sample(gauges[names[0]], gauges[names[1]], queued, in_flight))


def queue_figures(samples: list[Sample], max_num_seqs: int) -> dict[str, Any]:
    """Means over a run's samples: vLLM's batch occupancy and queue; with a controller, its
    queue, and how often it held calls while vLLM's batch had free slots (the window, not
    the engine, was the limit)."""
    if not samples:
        return {}
    figures: dict[str, Any] = {
        "samples": len(samples),
        "vllm_running_mean": statistics.fmean(x.vllm_running for x in samples),
        "vllm_waiting_mean": statistics.fmean(x.vllm_waiting for x in samples),
    }
    held = [x for x in samples if x.controller_queued]
    if samples[0].controller_queued is not None:
        figures["controller_queued_mean"] = statistics.fmean(
            x.controller_queued or 0 for x in samples
        )
        figures["held_share"] = len(held) / len(samples)
        figures["held_with_free_slots_share"] = sum(
            1 for x in held if x.vllm_running < max_num_seqs
        ) / len(samples)
        figures["in_flight_when_held_mean"] = (
            statistics.fmean(x.controller_in_flight or 0 for x in held) if held else 0.0
        )
    return figures


# --- configurations --------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """What one configuration runs the workload against."""

    label: str
    #: The vLLM server's scheduling policy (one server per policy).
    server: str
    #: ``agentrt controller serve`` arguments besides ``--port`` and ``--backend``; None:
    #: straight to vLLM.
    controller_args: tuple[str, ...] | None
    #: Appended to the backend URL (``,priority=on``).
    backend_suffix: str = ""


def configs(window: str) -> dict[str, Config]:
    off = ("--retention", "off")
    return {
        "direct": Config("direct to vLLM (FCFS)", "fcfs", None),
        "controller": Config("through the controller, product defaults", "fcfs", ()),
        "retention-off": Config("through the controller, defaults but retention off", "fcfs", off),
        "fixed-window": Config(
            f"through the controller, defaults but admission window {window}",
            "fcfs",
            ("--admission-window", window),
        ),
        "no-window": Config(
            "through the controller, defaults but no admission window",
            "fcfs",
            ("--admission-window", "unlimited"),
        ),
        "slow-scrape": Config(
            "through the controller, defaults but vLLM's /metrics scraped every 5 s",
            "fcfs",
            ("--scrape-interval-s", "5"),
        ),
        "proxy": Config(
            "through the controller (FCFS, no window, retention off)",
            "fcfs",
            ("--policy", "fcfs", "--admission-window", "unlimited", *off),
        ),
        "atlas": Config(
            f"through the controller (ATLAS, priority on, window {window}, retention off)",
            "priority",
            ("--policy", "atlas", "--admission-window", window, *off),
            ",priority=on",
        ),
    }


@dataclass
class Target:
    config: Config
    server: Any
    #: OpenAI base URL (…/v1) the SDK talks to.
    url: str
    controller: ControllerProcess | None = None


# --- the benchmark ---------------------------------------------------------------------------


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]  # nearest rank
    return {"mean": statistics.fmean(ordered), "p50": statistics.median(ordered), "p95": p95}


def run_record(
    run: RunResult,
    engine: dict[str, float],
    controller: dict[str, float] | None,
    cpu: dict[str, float],
    load_before: tuple[float, float, float],
) -> dict[str, Any]:
    """One run's figures (JSON-able): E2E, token latency, the time split, CPU, load."""
    e2e = summary(run.all())
    calls = len(run.call_latency_s)
    vllm_requests = engine["vllm:e2e_request_latency_seconds_count"]
    per_request = max(1.0, vllm_requests)
    record: dict[str, Any] = {
        "e2e_mean": e2e["mean"],
        "e2e_p50": e2e["p50"],
        "e2e_p95": e2e["p95"],
        "token_latency_mean": statistics.fmean(run.token_latency_s),
        "mean_by_kind": {k: statistics.fmean(run.e2e_s[k]) for k in KINDS if run.e2e_s[k]},
        "wall_s": run.wall_s,
        "calls": calls,
        "call_latency_mean": statistics.fmean(run.call_latency_s),
        "vllm_requests": vllm_requests,
        "vllm_queue_mean": engine["vllm:request_queue_time_seconds_sum"] / per_request,
        "vllm_e2e_mean": engine["vllm:e2e_request_latency_seconds_sum"] / per_request,
        "vllm_prefill_mean": engine["vllm:request_prefill_time_seconds_sum"] / per_request,
        "vllm_decode_mean": engine["vllm:request_decode_time_seconds_sum"] / per_request,
        "vllm_preemptions": engine["vllm:num_preemptions_total"],
        # The engine's pace: >= the step floor; above it when the engine's core was contended.
        "vllm_itl_mean": engine["vllm:inter_token_latency_seconds_sum"]
        / max(1.0, engine["vllm:inter_token_latency_seconds_count"]),
        "prefix_hit_rate": engine["vllm:prefix_cache_hits_total"]
        / max(1.0, engine["vllm:prompt_tokens_total"]),
        "cpu_cores": {name: seconds / run.wall_s for name, seconds in cpu.items()},
        "load_before": list(load_before),
    }
    if controller is not None:
        waited = controller["agentrt_controller_queue_wait_seconds_count"]
        record["controller_queue_wait_mean"] = controller[
            "agentrt_controller_queue_wait_seconds_sum"
        ] / max(1.0, waited)
    return record


async def measure(target: Target, specs: list[ProgramSpec], pinning: Pinning) -> dict[str, Any]:
    """One measured run of ``specs`` against ``target`` with everything around it."""
    server = target.server
    await reset_cache(server)
    load_before = os.getloadavg()
    engine_pids = process_group(server.pid)
    controller_pids = [] if target.controller is None else children(target.controller.pid)
    groups = {"vllm": engine_pids, "controller": controller_pids, "load generator": [os.getpid()]}
    cpu_before = {name: cpu_seconds(pids) for name, pids in groups.items()}
    engine_before = await scrape(server.base_url, VLLM_SERIES)
    ctl_url = None if target.controller is None else target.controller.url
    ctl_before = None if ctl_url is None else await scrape(ctl_url, CONTROLLER_SERIES)
    samples: list[Sample] = []
    async with anyio.create_task_group() as group:
        group.start_soon(sample_queues, server.base_url, ctl_url, samples)
        run = await run_workload(specs, target.url, server.model, target.controller is not None)
        group.cancel_scope.cancel()
    await reset_cache(server)  # waits until vLLM's running count is back at 0
    engine = await scrape(server.base_url, VLLM_SERIES)
    engine = {k: v - engine_before[k] for k, v in engine.items()}
    ctl = None
    if ctl_url is not None and ctl_before is not None:
        after = await scrape(ctl_url, CONTROLLER_SERIES)
        ctl = {k: v - ctl_before[k] for k, v in after.items()}
    cpu = {name: cpu_seconds(pids) - cpu_before[name] for name, pids in groups.items()}
    if target.controller is None:
        del cpu["controller"]
    return run_record(run, engine, ctl, cpu, load_before) | queue_figures(
        samples, server.max_num_seqs
    )


def pinning_report(targets: dict[str, Target], pinning: Pinning) -> list[str]:
    """Every process's and thread's allowed CPUs; SystemExit when pinned and one strays."""
    lines: list[str] = []
    seen: set[int] = set()
    for name, target in targets.items():
        if target.server.pid not in seen:
            seen.add(target.server.pid)
            label = f"vLLM ({target.config.server})"
            lines += affinity(label, process_group(target.server.pid), pinning.engine)
        if target.controller is not None:
            label = f"controller ({name})"
            lines += affinity(label, children(target.controller.pid), pinning.client)
    lines += affinity("load generator", [os.getpid()], pinning.client)
    return lines


async def benchmark(args: argparse.Namespace, pinning: Pinning) -> dict[str, Any]:
    specs = make_workload(args.seed, args.rate, args.duration_s, args.sizes)
    table = configs(args.window)
    names = list(dict.fromkeys(["direct", "controller", *args.configs.split(",")]))
    names = [n.strip() for n in names if n.strip()]
    unknown = sorted(set(names) - set(table))
    if unknown:
        raise SystemExit(f"unknown configuration(s) {unknown}; known: {sorted(table)}")
    policies = sorted({table[n].server for n in names})
    records: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    orders: list[list[str]] = []
    with contextlib.ExitStack() as stack:
        servers = stack.enter_context(
            vllm_servers(policies, args.max_num_seqs, args.step_floor_ms, pinning)
        )
        targets: dict[str, Target] = {}
        for name in names:
            config = table[name]
            server = servers[config.server]
            if config.controller_args is None:
                targets[name] = Target(config, server, server.openai_base_url)
                continue
            backend = server.base_url + config.backend_suffix
            proc = stack.enter_context(controller_process(backend, config.controller_args, pinning))
            targets[name] = Target(config, server, proc.url + "/v1", proc)
            print(f"{name}: {proc.banner}", file=sys.stderr, flush=True)
        # Warm-up (not measured): the first programs of the workload, all at once, through
        # every configuration; a fresh server's and controller's first calls are slower.
        warm_up = [dataclasses.replace(spec, arrival_s=0.0) for spec in specs[:6]]
        for target in targets.values():
            await run_workload(
                warm_up, target.url, target.server.model, target.controller is not None
            )
        checked = pinning_report(targets, pinning)
        print("\n".join(checked), file=sys.stderr, flush=True)
        hop = {name: await probe_hop(t.url, t.server.model) for name, t in targets.items()}
        print(
            "idle call latency (8 tokens, median of 20): "
            + ", ".join(f"{n} {s * 1000:.0f} ms" for n, s in hop.items()),
            file=sys.stderr,
            flush=True,
        )
        failure: dict[str, Any] | None = None
        for rep in range(args.reps):
            if failure is not None:
                break
            # Alternating: direct before controller in even repetitions, after it in odd ones.
            order = names if rep % 2 == 0 else names[::-1]
            orders.append(order)
            for name in order:
                try:
                    record = await measure(targets[name], specs, pinning)
                except Exception as exc:  # ExceptionGroup too: a program of the run failed
                    failure = {"rep": rep, "config": name, "error": repr(exc)[:2000]}
                    print(f"rep {rep} {name}: FAILED, {exc!r}", file=sys.stderr, flush=True)
                    break
                records[name].append(record)
                print(
                    f"rep {rep} {name:13s} E2E mean {record['e2e_mean']:.2f} s  p95 "
                    f"{record['e2e_p95']:.2f} s  token {record['token_latency_mean'] * 1000:.1f}"
                    f" ms  wall {record['wall_s']:.1f} s  load before "
                    + " ".join(f"{x:.2f}" for x in record["load_before"]),
                    file=sys.stderr,
                    flush=True,
                )
        # A failed run ends the benchmark; the repetitions completed before it are kept.
        complete = min(len(r) for r in records.values())
        if complete == 0:
            raise SystemExit(f"no repetition completed: {failure}")
        records = {name: r[:complete] for name, r in records.items()}
        orders = orders[:complete]
        checked_end = pinning_report(targets, pinning)
        banners = {n: t.controller.banner for n, t in targets.items() if t.controller is not None}
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "programs": len(specs),
        "programs_per_kind": {k: sum(1 for s in specs if s.kind == k) for k in KINDS},
        "settings": {k: v for k, v in vars(args).items() if k not in ("save", "render", "note")},
        "machine": {
            "cpus": os.cpu_count(),
            "pinned": pinning.on,
            "nice": os.nice(0),  # vLLM and the controller inherit it
            "engine_cpus": None if pinning.engine is None else format_cpu_list(pinning.engine),
            "client_cpus": None if pinning.client is None else format_cpu_list(pinning.client),
            "affinity_after_warm_up": checked,
            "affinity_at_end": checked_end,
        },
        "labels": {name: table[name].label for name in names},
        "controller_banners": banners,
        "idle_call_latency_s": hop,
        "orders": orders,
        "runs": records,
        "failure": failure,
    }


# --- statistics and report -------------------------------------------------------------------


#: (key, heading) of the figures compared with direct; lower is better for all.
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rate", type=float, default=2.4, help="program arrivals per second")
    parser.add_argument("--duration-s", type=float, default=20.0, help="arrival window (s)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--sizes", choices=("heavy", "light"), default="heavy", help="program size distribution"
    )
    parser.add_argument("--max-num-seqs", type=int, default=8)
    parser.add_argument(
        "--step-floor-ms", type=float, default=12.0, help="minimum engine step (ms)"
    )
    parser.add_argument("--window", default="10", help="admission window of the atlas row")
    parser.add_argument(
        "--configs",
        default="direct,controller",
        help="comma-separated, direct and controller always included: " + ", ".join(configs("N")),
    )
    parser.add_argument(
        "--pin",
        choices=("auto", "on", "off"),
        default="auto",
        help="CPU pinning (auto: on with >= 2 usable CPUs and taskset)",
    )
    parser.add_argument("--engine-cpus", default="1", help="CPUs of every vLLM process")
    parser.add_argument(
        "--client-cpus", default="0", help="CPUs of the load generator and the controller"
    )
    parser.add_argument("--save", metavar="FILE", help="write the JSON result to FILE")
    parser.add_argument("--note", help="a paragraph of findings for the docs section")
    parser.add_argument("--json", action="store_true", help="print the JSON result")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument(
        "--render", metavar="JSON", help="only render a saved --save result (no servers)"
    )
    args = parser.parse_args()
    if args.render:
        result = json.loads(Path(args.render).read_text())
    else:
        pinning = resolve_pinning(args.pin, args.engine_cpus, args.client_cpus)
        if pinning.client is not None:
            # Before any thread exists: every thread of this process inherits it.
            os.sched_setaffinity(0, pinning.client)
        result = asyncio.run(benchmark(args, pinning))
        if args.save:
            Path(args.save).write_text(json.dumps(result, indent=2) + "\n")
    section = markdown(result, args.note)
    print(json.dumps(result, indent=2) if args.json else section)
    if args.write_docs:
        _report.replace_section(
            ROOT / "docs" / "benchmarks.md", "## Real vLLM (indicative)", section
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
