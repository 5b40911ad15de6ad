"""Coding agents on a real vLLM (CPU build, tiny model, a small KV cache): does the
controller's KV retention act on a real engine? (issue #25 item 5, docs/real-vllm.md)

One small coding trace (``agentrt bench sim --workload coding`` scaled down to the tiny model's
4,096-token context) is replayed with ``agentrt bench replay`` twice against one vLLM server
whose KV cache holds fewer tokens than the programs' contexts together: direct to vLLM, and
through ``agentrt controller serve --backend URL`` with its defaults. Before each run the
prefix cache is reset; vLLM's own counters are read before and after (prefix-cache hits /
queries, external (CPU tier) hits, preemptions, prompt tokens computed) and, for the
controller run, its ``GET /agentrt/v1/queues`` (retention counts: pins, re-warms; the KV
capacity and CPU tier it learned from ``vllm:cache_config_info``).

``--offload-gib X`` adds vLLM's native KV offloading (``--kv-offloading-size X
--kv-offloading-backend native``) to the server. Latency on a CPU tiny model means little;
the point is the mechanism: decisions made, re-warms sent, hits up and recompute down.

    python benchmarks/real_vllm_agents.py [--offload-gib 0.01] [--save F] [--render F]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _vllm_launcher import ROOT, load_launcher

#: The trace's scaled-down coding parameters (``--workload-param coding.K=V``): contexts
#: that grow from ~1.3 K to ~2.6 K tokens over ~6 calls, tool waits of ~1-10 s.
CODING_PARAMS: dict[str, str] = {
    "calls_mean": "6",
    "calls_max": "10",
    "system_tokens": "300",
    "repo_tokens": "900",
    "issue_tokens_mean": "100",
    "final_context_tokens_mean": "2600",
    "output_tokens_mean": "40",
    "output_tokens_max": "200",
    "result_tokens_max": "600",
    "tool_p50_s": "1",
    "tool_p90_s": "4",
    "tool_max_s": "10",
    "repos": "2",
}

#: vLLM counters whose increase over a run is reported (summed over labels).
COUNTERS: tuple[str, ...] = (
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:external_prefix_cache_queries_total",
    "vllm:external_prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:request_prefill_kv_computed_tokens_sum",
)


def counter_deltas(
    before: Mapping[str, float], after: Mapping[str, float]
) -> dict[str, float | None]:
    """Per counter of :data:`COUNTERS`, its increase (all labels summed); None when vLLM does
    not expose it (e.g. the external prefix cache without a KV connector)."""
    launcher = load_launcher()
    out: dict[str, float | None] = {}
    for name in COUNTERS:
        a, b = launcher.metric_sum(after, name), launcher.metric_sum(before, name)
        out[name] = None if a is None else a - (b or 0.0)
    return out


def engine_row(deltas: Mapping[str, float | None]) -> dict[str, float | None]:
    """The reported figures from one run's counter deltas: prefix-cache hit rate, external
    (CPU tier) hits, preemptions, prompt tokens computed (queried − hit − external hit: what
    the engine prefilled, recomputation after a preemption or an eviction included)."""
    queries = deltas.get("vllm:prefix_cache_queries_total") or 0.0
    hits = deltas.get("vllm:prefix_cache_hits_total") or 0.0
    ext_hits = deltas.get("vllm:external_prefix_cache_hits_total")
    return {
        "queries": queries,
        "hits": hits,
        "hit_rate": hits / queries if queries else None,
        "external_queries": deltas.get("vllm:external_prefix_cache_queries_total"),
        "external_hits": ext_hits,
        "preemptions": deltas.get("vllm:num_preemptions_total"),
        "computed": queries - hits - (ext_hits or 0.0),
        "prompt_tokens": deltas.get("vllm:prompt_tokens_total"),
        "requests": deltas.get("vllm:request_success_total"),
    }


def controller_row(queues: Mapping[str, Any]) -> dict[str, Any]:
    """From ``GET /agentrt/v1/queues``: the retention counts and what the controller learned
    of each backend's memory (KV capacity, CPU tier, reload cost per token)."""
    retention = queues.get("retention") or {}
    counts = dict(retention.get("counts") or {})
    memory = retention.get("backends") or {}
    first: Mapping[str, Any] = (
        next(iter(memory.values()), {}) if isinstance(memory, Mapping) else {}
    )
    decisions = dict((retention.get("policy") or {}).get("decisions") or {})
    return {
        "decisions": decisions,
        "pins": counts.get("pins", 0),
        "unpins": counts.get("unpins", 0),
        "rewarms": counts.get("rewarms", 0),
        "errors": counts.get("errors", 0),
        "dropped": counts.get("dropped", 0),
        "retained_at_end": retention.get("retained"),
        "kv_capacity_tokens": first.get("kv_capacity_tokens"),
        "cpu_kv_capacity_tokens": first.get("cpu_kv_capacity_tokens"),
        "reload_s_per_token": first.get("reload_s_per_token"),
        "capacity_published": first.get("published"),
    }


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if digits else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def render(result: Mapping[str, Any]) -> str:
    """The docs table: one row per run (direct, controller), then the controller's side."""
    lines = [
        f"server: {result['server']}",
        f"trace: {result['trace']['programs']} programs, {result['trace']['calls']} calls",
        f"load average before each run: {result.get('load')}",
        "",
        "| run | programs done | E2E mean (s) | prefix hits / queries (tokens) | hit rate "
        "| external hits / queries | preemptions | prompt tokens computed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in result["runs"]:
        e = run["engine"]
        rate = "—" if e["hit_rate"] is None else f"{100 * e['hit_rate']:.1f} %"
        lines.append(
            f"| `{run['name']}` | {_fmt(run.get('completed'))} | {_fmt(run.get('e2e_mean_s'), 2)} "
            f"| {_fmt(e['hits'])} / {_fmt(e['queries'])} | {rate} "
            f"| {_fmt(e['external_hits'])} / {_fmt(e['external_queries'])} "
            f"| {_fmt(e['preemptions'])} | {_fmt(e['computed'])} |"
        )
    for run in result["runs"]:
        c = run.get("controller")
        if not c:
            continue
        lines += [
            "",
            f"controller (`{run['name']}`): retention decisions "
            f"{json.dumps(c.get('decisions', {}), sort_keys=True)}; pins {c['pins']}, "
            f"unpins {c['unpins']}, re-warms {c['rewarms']}, errors {c['errors']}, "
            f"dropped {c['dropped']}, retained at end "
            f"{_fmt(c['retained_at_end'])}; learned KV capacity {_fmt(c['kv_capacity_tokens'])} "
            f"tokens, CPU tier {_fmt(c['cpu_kv_capacity_tokens'])} tokens, reload "
            f"{_fmt(c['reload_s_per_token'], 8)} s/token (published: "
            f"{c['capacity_published']})",
        ]
    return "\n".join(lines)


# --- the run ----------------------------------------------------------------------------------


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentrt.cli", *args]


def make_trace(path: Path, rate: float, duration: float, seed: int) -> dict[str, int]:
    """``bench sim --workload coding ... --trace-out PATH``; returns its program / call count."""
    command = _cli(
        "bench", "sim", "--workload", "coding", "--rate", str(rate), "--duration",
        str(duration), "--seed", str(seed), "--trace-out", str(path),
    )  # fmt: skip
    for key, value in CODING_PARAMS.items():
        command += ["--workload-param", f"coding.{key}={value}"]
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True)
    programs = calls = 0
    for line in path.read_text().splitlines()[1:]:
        program = json.loads(line)
        programs += 1
        calls += sum(1 for node in program["nodes"] if node["type"] == "llm")
    return {"programs": programs, "calls": calls}


def replay(trace: Path, base_url: str, engine_url: str, controller: str) -> dict[str, Any]:
    """``bench replay --json`` of the trace; its one result object."""
    command = _cli(
        "bench", "replay", "--trace", str(trace), "--base-url", base_url + "/v1",
        "--tokenize-url", engine_url, "--metrics-url", engine_url, "--controller", controller,
        "--warmup", "0", "--json", "--no-progress",
    )  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise SystemExit(f"bench replay failed:\n{done.stderr[-3000:]}")
    parsed = json.loads(done.stdout)
    found: dict[str, Any] = parsed[0] if isinstance(parsed, list) else parsed
    return found


def _start_controller(backend: str, log: Any) -> tuple[subprocess.Popen[bytes], str]:
    port = load_launcher().free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_CONTROLLER_")}
    proc = subprocess.Popen(
        _cli("controller", "serve", "--port", str(port), "--backend", backend),
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the controller did not start (see its log)")
        time.sleep(0.2)


def run_one(name: str, trace: Path, engine_url: str, through_controller: bool) -> dict[str, Any]:
    launcher = load_launcher()
    httpx.post(engine_url + "/reset_prefix_cache", timeout=30).raise_for_status()
    load = os.getloadavg()[0]
    before = launcher.scrape_metrics(engine_url)
    row: dict[str, Any] = {"name": name, "load": round(load, 1)}
    if through_controller:
        with tempfile.TemporaryFile() as log:
            proc, url = _start_controller(engine_url, log)
            try:
                time.sleep(2.0)  # one scrape: the controller reads vllm:cache_config_info
                summary = replay(trace, url, engine_url, "required")
                time.sleep(1.0)
                queues = httpx.get(url + "/agentrt/v1/queues", timeout=10).json()
            finally:
                proc.terminate()
                proc.wait(timeout=20)
        row["controller"] = controller_row(queues)
        row["retention_snapshot"] = queues.get("retention")
    else:
        summary = replay(trace, engine_url, engine_url, "off")
    after = launcher.scrape_metrics(engine_url)
    row["engine"] = engine_row(counter_deltas(before, after))
    row["completed"] = summary.get("programs_completed")
    row["e2e_mean_s"] = (summary.get("e2e_latency_s") or {}).get("mean")
    row["replay"] = summary
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kv-tokens", type=int, default=6144, help="vLLM KV cache in tokens")
    parser.add_argument("--offload-gib", type=float, default=0.0, help="native KV offloading")
    parser.add_argument("--max-num-seqs", type=int, default=4)
    parser.add_argument("--rate", type=float, default=0.5, help="programs/s of the trace")
    parser.add_argument("--duration", type=float, default=12.0, help="trace arrivals, s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--save", type=Path, help="write the result as JSON")
    parser.add_argument("--render", type=Path, help="print a saved result and exit")
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())))
        return 0
    launcher = load_launcher()
    python = launcher.find_vllm_python()
    if python is None:
        raise SystemExit("no vLLM venv: run scripts/vllm/setup.sh (docs/real-vllm.md)")
    extra: tuple[str, ...] = ()
    if args.offload_gib > 0:
        extra = ("--kv-offloading-size", str(args.offload_gib), "--kv-offloading-backend", "native")
    options = launcher.ServerOptions(
        max_num_seqs=args.max_num_seqs,
        kv_cache_bytes=args.kv_tokens * 2048,  # 2 layers x K,V x 2 heads x 64 x fp32
        scheduling_policy="fcfs",
        extra_args=extra,
        step_floor_ms=4.0,
    )
    work = Path(tempfile.mkdtemp(prefix="real-vllm-agents-"))
    trace = work / "coding.jsonl"
    counts = make_trace(trace, args.rate, args.duration, args.seed)
    model = launcher.ensure_model(python)
    server = launcher.start_server(python, model, options)
    result: dict[str, Any] = {
        "server": f"vLLM CPU, tiny model, KV {args.kv_tokens} tokens, max-num-seqs "
        f"{args.max_num_seqs}, fcfs, offloading {args.offload_gib or 'off'} GiB",
        "trace": counts,
        "command": " ".join(["benchmarks/real_vllm_agents.py", *(argv or sys.argv[1:])]),
        "runs": [],
    }
    try:
        for name, through in (("direct", False), ("controller", True)):
            result["runs"].append(run_one(name, trace, server.base_url, through))
            print(f"{name} done", file=sys.stderr)
    finally:
        launcher.stop_server(server)
    result["load"] = [run["load"] for run in result["runs"]]
    if args.save:
        args.save.write_text(json.dumps(result, indent=1))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
