"""The report of benchmarks/real_vllm.py: medians over repetitions, paired ratios direct /
configuration (all, and over only the repetitions in which vLLM ran at the same pace), and the
docs section (docs/benchmarks.md, "Real vLLM (indicative)") rendered from a saved result."""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

from benchmarks import _report

__all__ = ["aggregate", "markdown"]

COMPARED = (("e2e_mean", "E2E mean"), ("e2e_p95", "E2E p95"), ("token_latency_mean", "token"))


def aggregate(result: dict[str, Any]) -> dict[str, Any]:
    """Medians over repetitions and paired ratios direct / configuration per repetition."""
    runs = result["runs"]
    kinds = list(result["programs_per_kind"])
    direct = runs["direct"]
    out: dict[str, Any] = {}
    for name, reps in runs.items():
        numeric = [k for k, v in reps[0].items() if isinstance(v, int | float)]
        row: dict[str, Any] = {k: statistics.median(r[k] for r in reps) for k in numeric}
        row["mean_by_kind"] = {
            k: statistics.median(r["mean_by_kind"][k] for r in reps) for k in kinds
        }
        row["cpu_cores"] = {
            side: statistics.median(r["cpu_cores"][side] for r in reps)
            for side in reps[0]["cpu_cores"]
        }
        if name != "direct":
            for key, _ in COMPARED:
                paired = [d[key] / r[key] for d, r in zip(direct, reps, strict=True)]
                row[f"ratio_{key}"] = {
                    "median": statistics.median(paired),
                    "min": min(paired),
                    "max": max(paired),
                    "per_rep": paired,
                }
            row["like_paced"] = like_paced(direct, reps)
        out[name] = row
    return out


#: Two runs ran the engine at the same pace when their mean inter-token latencies differ by
#: at most this fraction.
SAME_PACE = 0.10


def like_paced(direct: list[dict[str, Any]], reps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The paired ratios over only the repetitions in which vLLM ran at the same pace in both
    runs (other jobs took about as much of its core), or an empty ``reps`` list; None for a
    result saved before the pace was recorded."""
    if any("vllm_itl_mean" not in r for r in [*direct, *reps]):
        return None
    chosen = [
        i
        for i, (d, r) in enumerate(zip(direct, reps, strict=True))
        if abs(r["vllm_itl_mean"] / d["vllm_itl_mean"] - 1) <= SAME_PACE
    ]
    out: dict[str, Any] = {"reps": chosen}
    for key, _ in COMPARED:
        paired = [direct[i][key] / reps[i][key] for i in chosen]
        if paired:
            out[key] = {"median": statistics.median(paired), "min": min(paired), "max": max(paired)}
    return out


def policy_summary(banner: str) -> str:
    """``policy=... priority=...`` from the controller's start-up line."""
    found = re.search(r"policy=.*?(?= backends=|$)", banner)
    return found.group(0) if found else "(not recorded)"


def run_cell(run: dict[str, Any]) -> str:
    cell = f"{run['e2e_mean']:.2f} / {run['e2e_p95']:.2f}"
    return cell + (f" ({run['vllm_itl_mean'] * 1000:.0f})" if "vllm_itl_mean" in run else "")


def ratio_cell(ratio: dict[str, Any]) -> str:
    return f"{ratio['median']:.2f}× ({ratio['min']:.2f}-{ratio['max']:.2f})"


def markdown(result: dict[str, Any], note: str | None = None) -> str:
    """The docs section; ``note``: a paragraph of findings put after the figures."""
    s, machine = result["settings"], result["machine"]
    rows = aggregate(result)
    kinds = list(result["programs_per_kind"])
    labels = result["labels"]
    mix = ", ".join(f"{n} {kind}" for kind, n in result["programs_per_kind"].items())
    if machine["pinned"]:
        setup = (
            f"pinned with `taskset`: every vLLM process and thread on core "
            f"{machine['engine_cpus']}, the load generator and the controller on core "
            f"{machine['client_cpus']}, in every configuration (read back from "
            "`/proc/<pid>/task/*/status` `Cpus_allowed_list` after the warm-up and at the end)"
        )
    else:
        setup = "not pinned: vLLM, the controller and the load generator share all cores"
    loads = [x["load_before"][0] for reps in result["runs"].values() for x in reps]
    nice = (
        f" (niceness {machine['nice']}, inherited by vLLM and the controller)"
        if machine.get("nice")
        else ""
    )
    lines = [
        "## Real vLLM (indicative)",
        "",
        "**Indicative only**: a tiny random-weight model (hidden size 128, 2 layers) on "
        f"vLLM 0.32's CPU build on a {machine['cpus']}-core machine shared with other jobs, "
        f"{setup}; a {s['step_floor_ms']:g} ms engine step floor (docs/real-vllm.md). It shows "
        "that the controller works in front of a real vLLM and what its extra hop and its "
        "defaults cost or gain there; it is not a performance claim for GPUs.",
        "",
        f"Run finished {result['date']}{nice}. {result['programs']} agent programs written "
        "with the SDK "
        f"({mix}; {s['sizes']}-tailed sizes; Poisson arrivals at {s['rate']}/s over "
        f"{s['duration_s']} s, seed {s['seed']}; benchmarks/real_vllm.py describes them), one "
        f"stock vLLM server (FCFS, `--max-num-seqs {s['max_num_seqs']}`). `controller` is "
        "`agentrt controller serve --backend URL` with no other policy flag (its start-up line: "
        f"`{policy_summary(result['controller_banners'].get('controller', ''))}`). "
        f"Figures: the median over {s['reps']} repetitions (order alternating, prefix cache "
        "reset before each run); token = mean token latency (each program's E2E / its output "
        "tokens, ms per token); react / map_reduce / mcts = mean E2E of that kind (s); ratio = "
        "direct / configuration, paired within each repetition, "
        "median (min-max) over repetitions (> 1: programs finish sooner than direct):",
        "",
    ]
    header = ["configuration", "E2E mean (s)", "E2E p95 (s)", "token (ms)", *kinds]
    header += [f"ratio {h}" for _, h in COMPARED]
    body = []
    for name, row in rows.items():
        ratios = (
            ["—"] * len(COMPARED)
            if name == "direct"
            else [ratio_cell(row[f"ratio_{key}"]) for key, _ in COMPARED]
        )
        body.append(
            [
                f"`{name}`: {labels[name]}",
                f"{row['e2e_mean']:.2f}",
                f"{row['e2e_p95']:.2f}",
                f"{row['token_latency_mean'] * 1000:.1f}",
                *(f"{row['mean_by_kind'][k]:.2f}" for k in kinds),
                *ratios,
            ]
        )
    lines += _report.table(header, body)
    for name, row in rows.items():
        same = row.get("like_paced")
        if same is None:
            continue
        if not same["reps"]:
            lines += [
                "",
                f"`{name}`: no repetition in which vLLM ran at the same pace in both runs.",
            ]
            continue
        shown = ", ".join(f"{h} {ratio_cell(same[key])}" for key, h in COMPARED)
        lines += [
            "",
            f"`{name}` over only the repetitions in which vLLM ran at the same pace in both runs "
            f"(mean inter-token latency within {SAME_PACE:.0%}; reps "
            f"{', '.join(map(str, same['reps']))}): ratio {shown}.",
        ]
    lines += [
        "",
        "Per repetition: E2E mean / p95 (s), and in brackets vLLM's mean inter-token latency "
        "(`vllm:inter_token_latency_seconds`, ms: the engine's pace, the step floor when its core "
        "is its own, more when other jobs take the core); the machine's load average (1 min) "
        "before each run, in run order:",
        "",
    ]
    header = ["rep", "order", *[f"`{n}`" for n in rows], "load before (1 min)"]
    body = []
    for rep, order in enumerate(result["orders"]):
        cells = [run_cell(result["runs"][n][rep]) for n in rows]
        load = " ".join(f"{result['runs'][n][rep]['load_before'][0]:.1f}" for n in order)
        body.append([str(rep), " → ".join(order), *cells, load])
    lines += _report.table(header, body)
    lines += [
        "",
        "Where a call's time goes (medians over repetitions): the SDK's call latency, the "
        "controller's queue wait (`agentrt_controller_queue_wait_seconds`), vLLM's request "
        "latency and its queue time (`vllm:e2e_request_latency_seconds`, "
        "`vllm:request_queue_time_seconds`), vLLM requests per run (re-warms included), CPU "
        "cores used during the run (CPU time / wall) by vLLM's processes and by the client side; "
        "from samples every 0.5 s during the runs: vLLM batch = mean `num_requests_running` "
        f"(of {s['max_num_seqs']}), in flight when held = the controller's calls in flight at "
        "vLLM while it held calls in its queues (the admission window in use); idle = median "
        "latency of 20 sequential 8-token calls before the runs:",
        "",
    ]
    header = ["configuration", "call (s)", "controller queue (s)", "vLLM request (s)"]
    header += ["vLLM queue (s)", "vLLM requests", "vLLM batch", "in flight when held"]
    header += ["vLLM CPU", "controller CPU", "load gen. CPU", "idle call (ms)"]
    body = []
    for name, row in rows.items():
        cpu = row["cpu_cores"]
        queue = row.get("controller_queue_wait_mean")
        held = row.get("in_flight_when_held_mean")
        body.append(
            [
                f"`{name}`",
                f"{row['call_latency_mean']:.3f}",
                "—" if queue is None else f"{queue:.3f}",
                f"{row['vllm_e2e_mean']:.3f}",
                f"{row['vllm_queue_mean']:.3f}",
                f"{row['vllm_requests']:.0f}",
                f"{row.get('vllm_running_mean', math.nan):.1f}",
                "—" if held is None else f"{held:.1f}",
                f"{cpu['vllm']:.2f}",
                f"{cpu['controller']:.2f}" if "controller" in cpu else "—",
                f"{cpu['load generator']:.2f}",
                f"{result['idle_call_latency_s'][name] * 1000:.0f}",
            ]
        )
    lines += _report.table(header, body)
    settings = " ".join(
        f"--{k.replace('_', '-')} {s[k]:g}"
        if isinstance(s[k], float)
        else f"--{k.replace('_', '-')} {s[k]}"
        for k in (
            "configs",
            "reps",
            "rate",
            "duration_s",
            "sizes",
            "max_num_seqs",
            "step_floor_ms",
            "window",
            "seed",
            "pin",
            "engine_cpus",
            "client_cpus",
        )
    )
    lines += [
        "",
        *([note, ""] if note else []),
        *(
            [
                f"Stopped early: repetition {failure['rep']} of `{failure['config']}` failed "
                f"({failure['error'][:300]}); the figures are the {len(result['orders'])} "
                "repetitions completed before it.",
                "",
            ]
            if (failure := result.get("failure"))
            else []
        ),
        f"Machine load average (1 min) before the runs: {min(loads):.1f}-{max(loads):.1f} on "
        f"{machine['cpus']} cores (other jobs on the machine included). What these figures mean"
        ' and why: docs/real-vllm.md, "The real-engine benchmark".',
        "",
        "Reproduce: `AGENTRT_VLLM_PYTHON=.vllm-venv/bin/python .venv/bin/python "
        f"benchmarks/real_vllm.py {settings} --write-docs` (`--save FILE` keeps all figures).",
        "",
    ]
    return "\n".join(lines)
