"""Real-engine benchmark (INDICATIVE: a tiny random model on 2 shared CPU cores): the same mixed
agent programs through the controller and straight to vLLM, same run, same load.

Setup (docs/real-vllm.md):

* two real vLLM 0.32 CPU servers (scripts/vllm/server.py), identical but for the scheduling
  policy: one ``--scheduling-policy priority`` behind the controller, one FCFS (vLLM's
  default) for the direct baseline; ``--max-num-seqs`` 8, prefix caching, and a 12 ms engine
  step floor (``--step-floor-ms``; the tests use 4 ms): a real model on a GPU takes 10-30 ms
  per decode step, and a slower step leaves the CPU to the HTTP processes, so that the engine
  rather than the 2 shared cores is the bottleneck, as on a real deployment;
* the controller as a separate process (``agentrt controller serve``): ATLAS with its default
  queues and cost model, ``priority=on`` passthrough, admission window ``--window``
  (``--configs`` adds ``proxy``: the controller with FCFS, no window and no priority in front
  of the FCFS server, i.e. the cost of the extra hop alone; and ``retention``: the ATLAS
  controller with ``--retention on``, docs/routing.md);
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
* per repetition every configuration runs once, one after the other (the order rotating), each
  on a freshly reset prefix cache. Program E2E latency = end - scheduled arrival (s).

Reported: mean / p50 / p95 of program E2E per configuration (the median over repetitions),
and direct / configuration ratios (> 1: programs finish sooner than when sent directly).

Run::

    AGENTRT_VLLM_PYTHON=.vllm-venv/bin/python .venv/bin/python benchmarks/real_vllm.py
    ... --write-docs      # also replace the "Real vLLM (indicative)" section of docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import httpx

import agentrt
from agentrt import Runtime, RuntimeConfig, tool

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import _report  # noqa: E402

IGNORE_EOS = {"ignore_eos": True}
KINDS = ("react", "map_reduce", "mcts")
SYSTEM = "You are a careful agent. Tools:\n" + "\n".join(
    f"def tool_{i}(value_{i}, option_{i}=None):  # returns result_{i}" for i in range(30)
)


def load_launcher() -> ModuleType:
    """scripts/vllm/server.py as a module (stdlib only; see docs/real-vllm.md)."""
    path = ROOT / "scripts" / "vllm" / "server.py"
    spec = importlib.util.spec_from_file_location("agentrt_vllm_launcher", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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


async def ask(messages: list[dict[str, str]], tokens: int) -> str:
    reply = await agentrt.chat(messages, max_tokens=tokens, extra_body=IGNORE_EOS)
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
    """One configuration's run: program E2E (s) by kind, and the run's wall time (s)."""

    e2e_s: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    wall_s: float = 0.0
    #: The machine's 1-minute load average at the end of the run (other jobs included).
    load_average: float = 0.0

    def all(self) -> list[float]:
        return [x for values in self.e2e_s.values() for x in values]


async def run_workload(
    specs: list[ProgramSpec], base_url: str, model: str, controller: bool
) -> RunResult:
    """Start each program at its arrival time; record its E2E latency."""
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
            await anyio.sleep_until(start + spec.arrival_s)
            async with rt.program(spec.kind):
                await PROGRAMS[spec.kind](spec)
            result.e2e_s[spec.kind].append(anyio.current_time() - start - spec.arrival_s)

        async with anyio.create_task_group() as group:
            for spec in specs:
                group.start_soon(one, spec)
        result.wall_s = anyio.current_time() - start
    result.load_average = os.getloadavg()[0]
    return result


# --- servers ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def vllm_servers(max_num_seqs: int, step_floor_ms: float) -> Iterator[tuple[Any, Any]]:
    """A priority and an FCFS vLLM server, started in parallel, stopped at the end."""
    launcher = load_launcher()
    python = launcher.find_vllm_python()
    if python is None:
        raise SystemExit("real vLLM not installed: run scripts/vllm/setup.sh")
    model_dir = launcher.ensure_model(python)
    options = [
        launcher.ServerOptions(
            max_num_seqs=max_num_seqs, scheduling_policy=policy, step_floor_ms=step_floor_ms
        )
        for policy in ("priority", "fcfs")
    ]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(launcher.start_server, python, model_dir, o) for o in options]
        servers = [f.result() for f in futures]
    try:
        yield servers[0], servers[1]
    finally:
        for server in servers:
            launcher.stop_server(server)


@contextlib.contextmanager
def controller_process(
    backend: str, policy: str, window: str, retention: str = "off"
) -> Iterator[str]:
    """``agentrt controller serve --policy POLICY --admission-window WINDOW --retention
    RETENTION --backend BACKEND`` as a separate process (as deployed); yields its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "agentrt.cli", "controller", "serve", "--port", str(port)]
    command += ["--policy", policy, "--admission-window", window, "--backend", backend]
    command += ["--retention", retention]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_CONTROLLER_")}
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the controller did not start")
            time.sleep(0.1)
        yield url
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


# --- statistics and report -------------------------------------------------------------------


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]  # nearest rank
    return {"mean": statistics.fmean(ordered), "p50": statistics.median(ordered), "p95": p95}


#: Configurations: what each one runs the workload against.
CONFIGS = {
    "controller": "through the controller (ATLAS, priority on, window {window})",
    "direct": "direct to vLLM (FCFS)",
    "proxy": "through the controller (FCFS, priority off, no window)",
    "retention": "through the controller (ATLAS, priority on, window {window}, retention on)",
}


async def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    specs = make_workload(args.seed, args.rate, args.duration_s, args.sizes)
    names = [n.strip() for n in args.configs.split(",")]
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown or "controller" not in names or "direct" not in names:
        raise SystemExit(f"--configs must include controller and direct, from {sorted(CONFIGS)}")
    runs: dict[str, list[RunResult]] = {name: [] for name in names}
    with contextlib.ExitStack() as stack:
        priority_server, fcfs_server = stack.enter_context(
            vllm_servers(args.max_num_seqs, args.step_floor_ms)
        )
        atlas = f"{priority_server.base_url},priority=on"
        via = stack.enter_context(controller_process(atlas, "atlas", args.window))
        targets = {
            "controller": (priority_server, via + "/v1", True),
            "direct": (fcfs_server, fcfs_server.openai_base_url, False),
        }
        if "retention" in names:
            retained = stack.enter_context(
                controller_process(atlas, "atlas", args.window, retention="on")
            )
            targets["retention"] = (priority_server, retained + "/v1", True)
        if "proxy" in names:
            fcfs = f"{fcfs_server.base_url},priority=off"
            proxy = stack.enter_context(controller_process(fcfs, "fcfs", "unlimited"))
            targets["proxy"] = (fcfs_server, proxy + "/v1", True)
        # Warm-up (not measured): the first programs of the workload, all at once, through
        # every configuration; a fresh server's and controller's first calls are slower.
        warm_up = [dataclasses.replace(spec, arrival_s=0.0) for spec in specs[:6]]
        for name in names:
            server, url, via_controller = targets[name]
            await run_workload(warm_up, url, server.model, via_controller)
        for rep in range(args.reps):
            shift = rep % len(names)  # each configuration goes first as often as the others
            for name in names[shift:] + names[:shift]:
                server, url, via_controller = targets[name]
                await reset_cache(server)
                run = await run_workload(specs, url, server.model, via_controller)
                runs[name].append(run)
                stats = summary(run.all())
                print(
                    f"rep {rep} {name:10s} mean {stats['mean']:.2f} s  p50 "
                    f"{stats['p50']:.2f} s  p95 {stats['p95']:.2f} s  wall {run.wall_s:.1f} s  "
                    f"load average {run.load_average:.1f}",
                    file=sys.stderr,
                    flush=True,
                )
    result: dict[str, Any] = {
        "programs": len(specs),
        "programs_per_kind": {k: sum(1 for s in specs if s.kind == k) for k in KINDS},
        "settings": vars(args),
        "configs": {},
    }
    for name, reps in runs.items():
        per_rep = [summary(r.all()) | {"load_average": r.load_average} for r in reps]
        by_kind = {k: statistics.median(statistics.fmean(r.e2e_s[k]) for r in reps) for k in KINDS}
        result["configs"][name] = {
            stat: statistics.median(s[stat] for s in per_rep) for stat in ("mean", "p50", "p95")
        } | {"per_rep": per_rep, "mean_by_kind": by_kind}
    direct = result["configs"]["direct"]
    result["ratio_direct_over"] = {
        name: {stat: direct[stat] / row[stat] for stat in ("mean", "p50", "p95")}
        for name, row in result["configs"].items()
        if name != "direct"
    }
    # Paired within each repetition (the runs closest in time), which cancels slow drifts
    # of the machine's background load.
    result["paired_mean_ratio_per_rep"] = {
        name: [
            d["mean"] / r["mean"] for d, r in zip(direct["per_rep"], row["per_rep"], strict=True)
        ]
        for name, row in result["configs"].items()
        if name != "direct"
    }
    return result


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    mix = ", ".join(f"{n} {kind}" for kind, n in result["programs_per_kind"].items())
    lines = [
        "## Real vLLM (indicative)",
        "",
        "**Indicative only**: a tiny random-weight model (hidden size 128, 2 layers) on "
        "vLLM 0.32's CPU build, 2 CPU cores shared with other jobs (vLLM's three processes, "
        "the controller and the load generator all on them), a "
        f"{s['step_floor_ms']:g} ms engine step floor (docs/real-vllm.md). It shows that the "
        "controller works in front of a real vLLM "
        "and which way the levers push; it is not a performance claim for GPUs.",
        "",
        f"{result['programs']} agent programs written with the SDK ({mix}; {s['sizes']}-tailed "
        "sizes; "
        f"Poisson arrivals at {s['rate']}/s over {s['duration_s']} s, seed {s['seed']}; "
        "benchmarks/real_vllm.py describes them), vLLM "
        f"`--max-num-seqs {s['max_num_seqs']}`. Controller: `agentrt controller serve "
        f"--policy atlas --admission-window {s['window']}` (default queues and cost model) "
        "with `priority=on`, in front of a `--scheduling-policy priority` server; direct: the "
        "same programs to an FCFS server. Program E2E latency (s), the median over "
        f"{s['reps']} repetitions (order rotating, prefix cache reset before each run); "
        "ratio = direct / configuration (> 1: programs finish sooner than direct):",
        "",
        "| configuration | mean | p50 | p95 | react | map_reduce | mcts | ratio mean / p50 / p95 "
        "| mean per rep (paired ratio) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in result["configs"].items():
        kinds = " | ".join(f"{row['mean_by_kind'][k]:.2f}" for k in KINDS)
        ratio = result["ratio_direct_over"].get(name)
        shown = "—" if ratio is None else " / ".join(f"{ratio[x]:.2f}×" for x in ratio)
        paired = result["paired_mean_ratio_per_rep"].get(name)
        reps = ", ".join(
            f"{r['mean']:.2f}" + ("" if paired is None else f" ({paired[i]:.2f}×)")
            for i, r in enumerate(row["per_rep"])
        )
        label = CONFIGS[name].format(window=s["window"])
        lines.append(
            f"| {label} | {row['mean']:.2f} | {row['p50']:.2f} | {row['p95']:.2f} | {kinds} "
            f"| {shown} | {reps} |"
        )
    loads = [r["load_average"] for row in result["configs"].values() for r in row["per_rep"]]
    lines += [
        "",
        "How to read it: `proxy` is the cost of one more process hop on these 2 shared cores "
        "(on a GPU deployment the controller's CPU does not compete with the engine's); "
        "`controller` adds program-level order (ATLAS levels passed as vLLM `priority`, "
        "admission window); `retention` adds KV retention (a program back from a tool skips "
        "its ATLAS position). Differences smaller than the spread of a configuration's "
        "per-rep means are noise from the other jobs on this machine.",
        "",
        f"Machine load average (1 min) at the end of the runs: {min(loads):.1f}-{max(loads):.1f} "
        "on 2 cores (other engineers' jobs included).",
        "",
        "Reproduce: `AGENTRT_VLLM_PYTHON=.vllm-venv/bin/python .venv/bin/python "
        f"benchmarks/real_vllm.py --configs {s['configs']} --rate {s['rate']} --duration-s "
        f"{s['duration_s']} --reps {s['reps']} --sizes {s['sizes']} --window {s['window']} "
        f"--max-num-seqs {s['max_num_seqs']} --step-floor-ms {s['step_floor_ms']:g} --seed "
        f"{s['seed']} --write-docs` (`--json` for "
        "all figures).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
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
    parser.add_argument("--window", default="10", help="controller --admission-window")
    parser.add_argument(
        "--configs", default="direct,controller", help="comma-separated: " + ", ".join(CONFIGS)
    )
    parser.add_argument("--json", action="store_true", help="print the JSON result")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument(
        "--render", metavar="JSON", help="only render a saved --json result (no servers)"
    )
    args = parser.parse_args()
    if args.render:
        result = json.loads(Path(args.render).read_text())
    else:
        result = asyncio.run(benchmark(args))
    section = markdown(result)
    print(json.dumps(result, indent=2) if args.json else section)
    if args.write_docs:
        _report.replace_section(
            ROOT / "docs" / "benchmarks.md", "## Real vLLM (indicative)", section
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
