"""The report of ``benchmarks/agents.py``: the grid's vocabulary, medians and ranges over
seeds, the ratios to direct and to the best peer-like configuration, the issue's goals and the
docs section (docs/benchmarks.md, "Agents"). Nothing here runs a simulation."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentrt_sim.peers import EXTRA, PEERS
from benchmarks import _report

WORKLOADS = ("coding", "research", "agents")
LOADS = (0.5, 0.8, 1.0, 1.5)
#: Short profile names -> the simulator's hardware profiles.
PROFILES = {"a100": "a100-llama3-8b", "h100": "h100-llama3-8b"}
#: The default grid's configurations, in report order.
CONFIGS = tuple(PEERS)
#: Every configuration ``--configs`` takes: the grid's, then the extra ones (a peer-like on
#: other engines, the clairvoyant bounds; ``agentrt_sim.peers.EXTRA``).
ALL_CONFIGS = (*PEERS, *EXTRA)
#: The peer-like configurations ("the best peer-like" is the best of these at a point).
PEER_LIKE = ("continuum", "llm-d", "thunderagent")
#: The goals are judged on these workloads (the issue: "near direct's saturation on coding
#: and agents").
GOAL_WORKLOADS = ("coding", "agents")

#: Multiples of ``DEFAULT_RATES[workload] × engines`` that ``--calibrate`` tries, in order.
CALIBRATION_STEPS = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0)

#: The figures of a point (one run); medians and ranges over seeds are taken of each.
KEYS = (
    "mean_s",
    "p95_s",
    "token_mean_s",
    "throughput",
    "completed",
    "unfinished",
    "recomputed",
    "reloaded",
    "preemptions",
    "queue_delay_s",
    "arrival_rate",
)


def point_key(row: Mapping[str, Any]) -> tuple[str, str, int, float]:
    return (row["workload"], row["profile"], int(row["engines"]), float(row["load"]))


def aggregate(points: Iterable[Mapping[str, Any]], configs: Sequence[str]) -> list[dict[str, Any]]:
    """One row per point and configuration: per :data:`KEYS` the median over seeds and its
    range (``KEY_min``, ``KEY_max``), ``seeds`` and the summed ``wall_s``; rows ordered by
    workload, profile, engines, load, then ``configs``."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for point in points:
        groups.setdefault((*point_key(point), point["config"]), []).append(point)
    rank = {c: i for i, c in enumerate(configs)}
    workload_rank = {w: i for i, w in enumerate(WORKLOADS)}
    rows = []
    for key in sorted(
        groups,
        key=lambda k: (workload_rank.get(k[0], 99), k[0], k[1], k[2], k[3], rank.get(k[4], 99)),
    ):
        group = groups[key]
        row: dict[str, Any] = {
            "workload": key[0],
            "profile": key[1],
            "engines": key[2],
            "load": key[3],
            "config": key[4],
            "rate": group[0]["rate"],
            "duration_s": group[0]["duration_s"],
            "seeds": sorted(p["seed"] for p in group),
            "wall_s": sum(p["wall_s"] for p in group),
        }
        for name in KEYS:
            values = [float(p[name]) for p in group]
            row[name] = statistics.median(values)
            row[f"{name}_min"], row[f"{name}_max"] = min(values), max(values)
        rows.append(row)
    return rows


def compare(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with ratios (``x ÷ reference``, < 1 = lower) added: ``vs_direct_mean``,
    ``vs_direct_p95``, ``vs_direct_throughput`` and ``vs_best_peer_mean``, plus ``best_peer``
    (the peer-like configuration with the lowest median mean JCT at the point); ``None`` where
    the reference is missing or zero."""
    by_point: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_point.setdefault(point_key(row), {})[row["config"]] = row
    out = []
    for row in rows:
        at = by_point[point_key(row)]
        direct = at.get("direct")
        peers = [at[c] for c in PEER_LIKE if c in at]
        best = min(peers, key=lambda r: r["mean_s"]) if peers else None
        out.append(
            {
                **row,
                "vs_direct_mean": _ratio(row["mean_s"], direct and direct["mean_s"]),
                "vs_direct_p95": _ratio(row["p95_s"], direct and direct["p95_s"]),
                "vs_direct_throughput": _ratio(row["throughput"], direct and direct["throughput"]),
                "best_peer": best["config"] if best else None,
                "vs_best_peer_mean": _ratio(row["mean_s"], best and best["mean_s"]),
            }
        )
    return out


def _ratio(value: float, reference: float | None) -> float | None:
    return value / reference if reference else None


# --- goals ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    """One of the issue's goals at one point: the measured ratio and whether it is met."""

    point: str
    text: str
    ratio: float | None
    met: bool | None  # None: not measured (a configuration or load missing)


#: (load, what, row key, test on the ratio, the bound as the issue words it)
GOALS: tuple[tuple[float, str, str, Callable[[float], bool], str], ...] = (
    (1.0, "mean JCT vs direct", "vs_direct_mean", lambda r: r <= 0.5, "≥ 2× lower (≤ 0.50)"),
    (1.0, "p95 JCT vs direct", "vs_direct_p95", lambda r: r <= 1 / 1.5, "≥ 1.5× lower (≤ 0.67)"),
    (
        1.0,
        "completed/s vs direct",
        "vs_direct_throughput",
        lambda r: r >= 1.0,
        "≥ direct's (≥ 1.00)",
    ),
    (
        1.0,
        "mean JCT vs the best peer-like",
        "vs_best_peer_mean",
        lambda r: r <= 1 / 1.3,
        "≥ 1.3× lower (≤ 0.77)",
    ),
    (
        0.5,
        "mean JCT vs direct at 0.5 load",
        "vs_direct_mean",
        lambda r: r <= 1 / 0.98,
        "no worse than 0.98× (≤ 1.02)",
    ),
)


def goals(rows: Sequence[Mapping[str, Any]]) -> list[Goal]:
    """The issue's goals for ``defaults`` on :data:`GOAL_WORKLOADS`, per profile and engine
    count (``rows`` from :func:`compare`); "near saturation" is load 1.0."""
    defaults = {point_key(r): r for r in rows if r["config"] == "defaults"}
    setups = sorted({(r["workload"], r["profile"], int(r["engines"])) for r in rows})
    out = []
    for workload, profile, engines in setups:
        if workload not in GOAL_WORKLOADS:
            continue
        for load, what, key, test, bound in GOALS:
            row = defaults.get((workload, profile, engines, load))
            ratio = row.get(key) if row else None
            out.append(
                Goal(
                    f"{workload}, {profile} x{engines}, load {load:g}",
                    f"{what} {bound}",
                    ratio,
                    None if ratio is None else bool(test(ratio)),
                )
            )
    return out


# --- the report ----------------------------------------------------------------------------

#: What of each paper the preset could not model (docs/benchmarks.md).
NOT_MODELLED = {
    "continuum-gpu": "as `continuum`.",
    "oracle": "a bound, not a product: it knows each program's remaining service.",
    "oracle+cpu": "a bound, not a product: it knows each program's remaining service.",
    "direct": "vLLM's own preemption is recompute (v1); swap to CPU is not modelled apart from "
    "the CPU tier of `direct+cpu`.",
    "direct+cpu": "the tier is vLLM's native offloading (LRU, PCIe cost not overlapped with the "
    "forward pass): LMCache's layer-wise pipelining and disk tiers are not modelled.",
    "continuum": "its `T` (recent queueing delay of evicted requests): the backend's recent "
    "queueing delay from the wait's facts where the driver gives it (since [agents] item 3), "
    "else direct's mean per-call queueing delay at the same point (so in the figures below); "
    "η = 1; the deadlock guard refuses a pin that would not fit instead of unpinning the latest "
    "pins later; a pin holds the GPU blocks (no CPU offload of pinned KV); its CPU tier is "
    "the engine model's (vLLM's native offloading), not LMCache's.",
    "llm-d": "its flow control's saturation detector is stood in for by our adaptive admission "
    "window; its prefix- and load-aware scorers (which decide a session's first pod) by "
    "`autellix`'s least-loaded first placement; no per-pod KV-utilisation threshold.",
    "thunderagent": "its pause/resume of whole programs at tool boundaries, capacity model and "
    "best-fit-decreasing resume across nodes are not modelled: the preset keeps programs on "
    "their engine, orders the queue by program and evicts the shortest context first inside "
    "the engine when memory runs out; its tool-environment management is out of scope.",
    "defaults": "—",
    "defaults+cpu": "—",
}


def _cell(row: Mapping[str, Any], key: str, fmt: str, scale: float = 1.0) -> str:
    """``median [min–max]`` of ``key`` (a single value when the range is empty)."""
    median = format(row[key] / scale, fmt)
    low, high = format(row[f"{key}_min"] / scale, fmt), format(row[f"{key}_max"] / scale, fmt)
    return median if low == high else f"{median} [{low}–{high}]"


def _r(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def table_rows(rows: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """One markdown row per load and configuration (``rows`` from :func:`compare`)."""
    lines = []
    for r in rows:
        lines.append(
            [
                f"{r['load']:g} ({r['rate']:.4g}/s)",
                f"`{r['config']}`",
                _cell(r, "mean_s", ".0f"),
                _cell(r, "p95_s", ".0f"),
                f"{_r(r['vs_direct_mean'])} / {_r(r['vs_direct_p95'])}",
                _r(r["vs_best_peer_mean"]),
                _cell(r, "token_mean_s", ".3f"),
                _cell(r, "throughput", ".4f"),
                _cell(r, "unfinished", ".0f"),
                f"{_cell(r, 'recomputed', '.1f', 1e6)} / {_cell(r, 'reloaded', '.1f', 1e6)}",
                _cell(r, "preemptions", ".0f"),
            ]
        )
    return lines


def spread(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per load, how far apart the configurations' median mean JCTs are: the highest over
    the lowest, and which is lowest."""
    parts = []
    for load in dict.fromkeys(r["load"] for r in rows):
        at = [r for r in rows if r["load"] == load and r["mean_s"] > 0]
        if not at:
            continue
        low = min(at, key=lambda r: r["mean_s"])
        high = max(at, key=lambda r: r["mean_s"])
        parts.append(
            f"load {load:g}: {high['mean_s'] / low['mean_s'] - 1:.0%} "
            f"(lowest `{low['config']}`, highest `{high['config']}`)"
        )
    return "Spread of the median mean JCT over the configurations: " + "; ".join(parts) + "."


HEADER = (
    "load (rate)",
    "config",
    "JCT mean (s)",
    "JCT p95 (s)",
    "÷ direct (mean / p95)",
    "÷ best peer (mean)",
    "token latency (s/token)",
    "completed/s",
    "unfinished",
    "recomputed / reloaded (M tokens)",
    "preemptions",
)


def markdown(
    rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any], heading: str = "## Agents"
) -> str:
    """The docs section (under ``heading``) for ``rows`` (from :func:`compare`) and the run's
    ``meta`` (``command``, ``date``, ``seeds``, ``wall_s``, ``machine``, ``note``,
    ``saturation``, ``programs``, ``duration``)."""
    shown = {r["config"] for r in rows}
    lines = [
        heading,
        "",
        "`benchmarks/agents.py` — today's agents (`coding`, `research`, `agents`; "
        "docs/simulator.md) on simulated engines at fractions of **direct's saturation**, "
        "the product defaults against a stock vLLM and peer-like configurations. "
        f"Run {meta['date']}, command: `{meta['command']}`; medians over seeds "
        f"{list(meta['seeds'])} with [min–max] ranges; "
        f"{meta['wall_s'] / 60:.1f} min of simulation"
        + (f" ({meta['cpu_s'] / 60:.1f} min of CPU)" if meta.get("cpu_s") else "")
        + f" on this machine ({meta['machine']}).",
        "",
    ]
    notes = meta.get("note") or []
    for index, note in enumerate([notes] if isinstance(notes, str) else notes):
        lines += [f"**{note}**" if index == 0 else note, ""]
    lines += [
        "Configurations (`agentrt_sim/peers.py`; each follows its paper's rule as written, "
        "with its authors' recommended settings):",
        "",
    ]
    lines += _report.table(
        ("config", "what", "flags", "what we could not model"),
        (
            [f"`{p.name}`", p.summary, f"`{p.flags}`", NOT_MODELLED.get(p.name, "—")]
            for p in [*PEERS.values(), *(EXTRA[c] for c in EXTRA if c in shown)]
        ),
    )
    lines += [
        "",
        "Saturation (programs/s; direct keeps up: median mean JCT ≤ 1.5 × its JCT at the "
        "first step, ≤ 1 % of the programs unfinished; `--calibrate` steps through "
        f"{', '.join(f'{s:g}' for s in CALIBRATION_STEPS)} × `agentrt_sim.rates` × engines and "
        "stops at the first rate direct does not keep up with): "
        + "; ".join(f"{w} {p} x{e}: {rate:.4g}" for (w, p, e), rate in meta["saturation"])
        + ".",
        "",
        "Arrival windows: "
        + (
            f"{meta['duration']:g} s"
            if meta.get("duration")
            else f"long enough for {meta['programs']} measured arrivals per run (≥ 300 s)"
        )
        + ", then a drain as long; the first 10 % are warm-up. JCT and token latency cover "
        "the programs that finished (`unfinished` = still running when the drain ended: "
        "where it is large, the means favour whoever left its long programs unfinished). "
        "Ratios `÷` are of medians (< 1: lower); the best peer-like is the lowest median mean "
        "JCT of `continuum`, `llm-d`, `thunderagent` at the point.",
        "",
    ]
    setups = list(dict.fromkeys((r["workload"], r["profile"], r["engines"]) for r in rows))
    for workload, profile, engines in setups:
        mine = [
            r
            for r in rows
            if (r["workload"], r["profile"], r["engines"]) == (workload, profile, engines)
        ]
        lines += [f"**{workload}**, `{PROFILES[profile]}` × {engines}:", ""]
        lines += _report.table(HEADER, table_rows(mine))
        lines += ["", spread(mine), ""]
    marks = goals(rows)
    if marks:
        lines += [
            "Goals (issue [agents]; `defaults` against `direct` and the best peer-like, on "
            "coding and agents; near saturation = load 1.0):",
            "",
        ]
        for goal in marks:
            verdict = {True: "met", False: "NOT met", None: "not measured"}[goal.met]
            measured = "" if goal.ratio is None else f": {_r(goal.ratio)}"
            lines.append(f"- {goal.point}: {goal.text}{measured} — {verdict}")
        lines.append("")
    if heading != "## Agents":
        lines += [
            "Reproduce: the commands above, each with its output saved (`… --json > a.json`), "
            "then `.venv/bin/python benchmarks/agents.py --from-json a.json,b.json,… "
            f"--heading '{heading}' --write-docs` (a point measured in two files: the later "
            "file's).",
            "",
        ]
        return "\n".join(lines)
    lines += [
        "Reproduce: `.venv/bin/python benchmarks/agents.py --subset ran --write-docs` (what "
        "is shown here; without `--subset` the issue's full grid, hours of CPU: run it in "
        "pieces, `--piece 1/3 --json > a.json` …, and render them together with "
        "`--from-json a.json,b.json,c.json --write-docs`; `--quick` for a smoke run, "
        "`--help` for the grid options).",
        "",
    ]
    return "\n".join(lines)
