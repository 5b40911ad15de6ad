"""What ``benchmarks/peers.py`` does with its measurements: medians and ranges over
repetitions, ratios ours ÷ peer paired by repetition, and the "Peers" section of
docs/benchmarks.md. Nothing here starts a process; the tests feed it recorded points.

A *point* is one proxy's figures in one repetition (a dict with ``proxy``, ``rep`` and the
measures of :data:`OVERHEAD` or :data:`PROGRAM`). Every measure is lower-is-better except
``calls_per_s``; a ratio ours ÷ peer above 1 then means the peer is ahead, below 1 that we are
(for ``calls_per_s`` the other way round).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OURS = "agentrt"


@dataclass(frozen=True, slots=True)
class Measure:
    key: str
    #: Column title, with its unit.
    title: str
    #: Digits after the point in the table.
    digits: int
    higher_is_better: bool = False


#: The proxy-overhead measures (fixed-reply backend).
OVERHEAD = (
    Measure("added_p50_ms", "added p50 latency (ms)", 3),
    Measure("added_p99_ms", "added p99 latency (ms)", 3),
    Measure("calls_per_s", "calls/s", 0, higher_is_better=True),
    Measure("streamed_calls_per_s", "streamed calls/s", 0, higher_is_better=True),
    Measure("cpu_s_per_1k_calls", "proxy CPU s per 1,000 calls", 3),
    Measure("cpu_s_per_1k_chunks", "proxy CPU s per 1,000 streamed chunks", 4),
    Measure("cpu_s_per_1k_paced_chunks", "proxy CPU s per 1,000 paced chunks", 4),
)
#: Shown beside the overhead measures, not as a ratio (ours is ~0: a ratio says nothing).
IDLE = Measure("idle_cpu_ms_per_s", "CPU idle (ms per s)", 1)
#: The replayed-trace measures (model seconds; proxy CPU in seconds over the run).
PROGRAM = (
    Measure("e2e_mean_s", "program E2E mean (s)", 1),
    Measure("e2e_p95_s", "program E2E p95 (s)", 1),
    Measure("token_latency_mean_s", "token latency mean (s)", 3),
    Measure("prefix_hit_rate", "prefix cache hit rate", 3, higher_is_better=True),
    Measure("proxy_cpu_s", "proxy CPU over the run (s)", 1),
    # Means over finished programs flatter a proxy that leaves the long ones unfinished.
    Measure("programs_completed", "programs completed", 0, higher_is_better=True),
)


@dataclass(frozen=True, slots=True)
class Spread:
    """Median and range of one measure over repetitions (NaN: no repetition had it)."""

    median: float
    low: float
    high: float

    def text(self, digits: int, suffix: str = "") -> str:
        if math.isnan(self.median):
            return "–"
        cell = f"{self.median:,.{digits}f}{suffix}"
        if self.low != self.high:
            cell += f" [{self.low:,.{digits}f}–{self.high:,.{digits}f}]"
        return cell


def spread(values: Iterable[float]) -> Spread:
    """Median, minimum and maximum of the finite ``values``."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return Spread(math.nan, math.nan, math.nan)
    return Spread(statistics.median(finite), min(finite), max(finite))


def by_proxy(points: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """``points`` grouped by proxy, in the order proxies first appear."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for point in points:
        groups.setdefault(str(point["proxy"]), []).append(point)
    return groups


def ratios(points: Sequence[Mapping[str, Any]], peer: str, key: str) -> Spread:
    """Ours ÷ ``peer`` of ``key``, one ratio per repetition both measured (interleaved runs
    pair by repetition), as median and range. A repetition where either value is not
    positive (an added latency that noise made negative) gives no ratio."""
    ours = {p["rep"]: p.get(key) for p in points if p["proxy"] == OURS}
    theirs = {p["rep"]: p.get(key) for p in points if p["proxy"] == peer}
    values = []
    for rep, mine in ours.items():
        other = theirs.get(rep)
        if (
            isinstance(mine, int | float)
            and isinstance(other, int | float)
            and min(mine, other) > 0
        ):
            values.append(mine / other)
    return spread(values)


def _cell(points: Sequence[Mapping[str, Any]], key: str, digits: int) -> str:
    values = [float(p[key]) for p in points if isinstance(p.get(key), int | float)]
    return spread(values).text(digits)


def absolute_table(points: Sequence[Mapping[str, Any]], measures: Sequence[Measure]) -> list[str]:
    """One row per proxy: median [range] of each measure."""
    header = ["proxy", *(m.title for m in measures)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for proxy, mine in by_proxy(points).items():
        cells = [f"`{proxy}`", *(_cell(mine, m.key, m.digits) for m in measures)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def ratio_table(points: Sequence[Mapping[str, Any]], measures: Sequence[Measure]) -> list[str]:
    """One row per measure, one column per peer: ours ÷ peer, median [range]."""
    peers = [p for p in by_proxy(points) if p != OURS]
    header = ["ours ÷ peer", *(f"vs `{p}`" for p in peers)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for measure in measures:
        cells = [ratios(points, peer, measure.key).text(2, "×") for peer in peers]
        lines.append("| " + " | ".join([measure.title, *cells]) + " |")
    return lines


def prompt_measures(words: Sequence[int]) -> list[Measure]:
    """CPU per call with each prompt size (``peers.py --prompt-words``)."""
    return [Measure(f"prompt_cpu_us_{w}", f"CPU µs per call, {w:,}-word prompt", 0) for w in words]


def growth(points: Sequence[Mapping[str, Any]], words: Sequence[int]) -> dict[str, Spread]:
    """Per proxy: its CPU per call with the largest prompt ÷ with the smallest, one ratio per
    repetition, as median and range."""
    small, large = f"prompt_cpu_us_{min(words)}", f"prompt_cpu_us_{max(words)}"
    out = {}
    for proxy, mine in by_proxy(points).items():
        values = [
            float(p[large]) / float(p[small])
            for p in mine
            if isinstance(p.get(large), int | float)
            and isinstance(p.get(small), int | float)
            and p[small] > 0
        ]
        out[proxy] = spread(values)
    return out


def prompt_lines(points: Sequence[Mapping[str, Any]], result: Mapping[str, Any]) -> list[str]:
    """The long-prompt table: CPU per call by prompt size, and its growth, per proxy."""
    words = list(result.get("prompt_words") or [])
    if not points or not words:
        return []
    measures = prompt_measures(words)
    lines = [
        "",
        f"**CPU per call against the prompt's length** (sequential calls for "
        f"{result.get('prompt_seconds', 2.0)} s per size, at least 5; each prompt a history of "
        "1,000-word turns that every call repeats, then a short new message, one output "
        "token, as an agent's next call repeats its last). Ours ÷ peer:",
        "",
        *ratio_table(points, measures),
        "",
        "Absolute, median [range]:",
        "",
    ]
    table = absolute_table(points, measures)
    if len(words) > 1:
        grown = growth(points, words)
        title = f"{max(words):,} ÷ {min(words):,} words"
        table[0] = table[0][:-1] + f"| {title} |"
        table[1] += "---|"
        for index, proxy in enumerate(by_proxy(points), start=2):
            table[index] += f" {grown[proxy].text(1, '×')} |"
    return lines + table


def verdicts(points: Sequence[Mapping[str, Any]], measures: Sequence[Measure]) -> list[str]:
    """Plain sentences: per peer, the measures where it is ahead of ours and where behind
    (by the median ratio; within ±5 % counts as even)."""
    lines = []
    for peer in (p for p in by_proxy(points) if p != OURS):
        ahead, behind = [], []
        for measure in measures:
            ratio = ratios(points, peer, measure.key).median
            if math.isnan(ratio):
                continue
            # how many times better the peer is (> 1: the peer is ahead)
            advantage = 1 / ratio if measure.higher_is_better else ratio
            if advantage > 1.05:
                ahead.append(f"{measure.title} ({advantage:.2f}× better)")
            elif advantage < 1 / 1.05:
                behind.append(f"{measure.title} ({1 / advantage:.2f}× worse)")
        parts = [f"**`{peer}` is ahead of ours** in " + "; ".join(ahead)] if ahead else []
        if behind:
            parts.append(("behind" if ahead else f"`{peer}` is behind ours") + " in "
                         + "; ".join(behind))  # fmt: skip
        if not parts:
            parts.append(f"`{peer}` is even with ours (within 5 %)")
        lines.append("- " + ", ".join(parts) + ".")
    return lines


#: The traces ``peers.py`` replays, in the order the section shows them.
TRACES = ("mixed", "coding")


def trace_key(trace: str, key: str) -> str:
    """Where a ``peers.py`` result keeps ``key`` of ``trace``: the mixed trace's under the key
    itself, another's after its name (``coding_rate``); the points under ``program`` and
    ``program_coding`` (the first results' names)."""
    if trace == "mixed":
        return key
    return f"program_{trace}" if key == "program" else f"{trace}_{key}"


def _engine_size(result: Mapping[str, Any], trace: str) -> str:
    """The emulators' batch slots and KV blocks, as the run set them (older results: none)."""
    if "max_num_seqs" not in result:
        return ""
    blocks = result.get(trace_key(trace, "num_gpu_blocks"))
    kv = f"{blocks:,} KV blocks of 16 tokens" if blocks else "the profile's KV blocks"
    return f" of {result['max_num_seqs']} batch slots and {kv} each"


def _trace_size(result: Mapping[str, Any], trace: str) -> str:
    """The trace's arrival rate and window, as the run set them (older results: none)."""
    rate, duration = (result.get(trace_key(trace, key)) for key in ("rate", "duration"))
    if rate is None or duration is None:
        return ""
    return f"; {rate:g} programs/s over {duration:g} model seconds of arrivals"


def _stream_interval(result: Mapping[str, Any]) -> str:
    """The emulators' stream interval when the run set one (older results: every step)."""
    interval = result.get("stream_interval_ms") or 0.0
    return f", streams written at most every {interval:g} wall ms" if interval > 0 else ""


def _ours_clock(result: Mapping[str, Any]) -> str:
    """Which clock our policies ran on (older results: the wall clock, unsaid)."""
    scale = result.get("ours_time_scale")
    if scale is None:
        return ""
    return f", at `--time-scale {scale:g}`: its policies on the emulators' model seconds"


def schedule_lines(points: Sequence[Mapping[str, Any]]) -> list[str]:
    """Whether the emulators kept their model-time schedule in each program run (older
    results: nothing said). A run whose emulators fell behind measured the shared cores as
    much as the proxy."""
    if not points or any("engines_kept_up" not in p for p in points):
        return []
    behind = [p for p in points if not p["engines_kept_up"]]
    if not behind:
        worst = max(p["engine_lag_mean_s"] for p in points)
        return [
            "",
            f"The emulators kept their schedule in every run (worst mean lag {worst:.4f} s).",
        ]
    runs = ", ".join(
        f"`{p['proxy']}` rep {p['rep']} (lag {p['engine_lag_mean_s']:.3f} s, "
        f"{p['engine_dropped_model_s']:.1f} model s given up)"
        for p in behind
    )
    return [
        "",
        f"**The emulators fell behind their schedule** in {len(behind)} of {len(points)} "
        f"runs: {runs}. These rows measured the shared cores as much as the proxies; a lower "
        "`--time-scale` gives the emulators the time they lacked.",
    ]


def markdown(result: Mapping[str, Any]) -> str:
    """The "Peers" section of docs/benchmarks.md from a ``peers.py --json`` result."""
    overhead = result.get("overhead", [])
    versions = ", ".join(f"`{name}` {version}" for name, version in result["versions"].items())
    lines = [
        "## Peers",
        "",
        "`benchmarks/peers.py` — the routers users would put in front of vLLM instead of ours, "
        f"each in front of the same backends, measured in one interleaved run: {versions}. "
        f"Command: `{result['command']}`. {result['machine']}; 1-minute load average of the "
        f"shared machine {result['load_average'][0]} before, {result['load_average'][1]} after "
        "(others' work: CPU-per-call figures hold up under load far better than latencies).",
        "",
    ]
    for peer, reason in result.get("skipped", {}).items():
        lines.append(f"Skipped `{peer}`: {reason}.")
    if overhead:
        lines += [
            "",
            f"**Proxy overhead** (a backend that answers at once; {result['reps']} repetitions, "
            "the proxies in rotating order; added latency = the proxy's percentile − direct's "
            f"in the same repetition over {result['calls']} sequential calls; calls/s with "
            f"{result['concurrency']} connections for {result['seconds']} s; CPU of the "
            "proxy's process tree from `/proc` over that run, and over a streaming run of "
            f"{result['chunks']}-chunk answers ÷ chunks; paced chunks: streams whose backend "
            f"sends each event {result.get('pace_ms', 1.0):g} ms after the one before, each a "
            "read of its own as from an engine at decode pace). Ours ÷ peer, median [range] "
            "over repetitions:",
            "",
            *ratio_table(overhead, OVERHEAD),
            "",
            "Absolute, median [range]:",
            "",
            *absolute_table(overhead, (*OVERHEAD, IDLE)),
            "",
            "CPU idle: the proxy's process tree with no calls for "
            f"{result.get('idle_seconds', 1.0)} s before each repetition; the per-call and "
            "per-chunk CPU above include whatever of it goes on under load.",
            *prompt_lines(overhead, result),
        ]
    traces = [(trace, result.get(trace_key(trace, "program"), [])) for trace in TRACES]
    for trace, points in traces:
        if not points:
            continue
        lines += [
            "",
            f"**Programs, `{trace}` trace** (replayed with `agentrt bench replay`'s code in "
            f"front of {result['engines']} fresh emulators per run{_engine_size(result, trace)}, "
            f"time scale {result['time_scale']}{_stream_interval(result)}"
            f"{_trace_size(result, trace)}; model seconds; "
            "vllm-router with "
            '`--enable-program-scheduling` and the SDK\'s `peer_hints=("vllm-router",)`, '
            "sglang-router `cache_aware`, ours its defaults "
            + (
                "without the SDK's program events: `--ours-events off`"
                if result.get("ours_events") == "off"
                else "with the SDK's program and tool-wait events"
            )
            + _ours_clock(result)
            + "). "
            + "Ours ÷ peer:",
            "",
            *ratio_table(points, PROGRAM),
            "",
            "Absolute, median [range]:",
            "",
            *absolute_table(points, PROGRAM),
            *schedule_lines(points),
        ]
    measures = [*OVERHEAD, *prompt_measures(result.get("prompt_words") or [])]
    lines += ["", "Where each peer stands:", "", *verdicts(overhead, measures)]
    for trace, points in traces:
        if points:
            lines += [f"{line[:-1]} (`{trace}` trace)." for line in verdicts(points, PROGRAM)]
    lines += [
        "",
        "How to read it: the CPU figures are the robust ones (they count the proxy's own "
        "work, whatever else runs); latencies and calls/s share 2 cores with the load "
        "generator, the backends and other people's jobs, so an added p99 can even come out "
        "negative. In the program runs the proxies share the cores with the emulators, which "
        "pace their engine steps in real time: a proxy that burns CPU slows the engines too, "
        "which is part of what a heavy proxy's row shows. Ours runs its defaults (`plas`, "
        "adaptive admission window, `prefix` router, retention on).",
    ]
    notes = result.get("notes", [])
    if notes:
        lines += ["", "Observed in this run:", "", *(f"- {note}" for note in notes)]
    lines += [
        "",
        "Reproduce: `.venv/bin/python benchmarks/peers.py --write-docs` (`--quick` for a "
        "smaller run; the peers install into `.peers-venv`).",
        "",
    ]
    return "\n".join(lines)


def parse_proxies(text: str, known: Sequence[str]) -> list[str]:
    """``--proxies`` (comma-separated): ours always first; ValueError naming an unknown one."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"--proxies: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    return [OURS, *(n for n in dict.fromkeys(names) if n != OURS)]
