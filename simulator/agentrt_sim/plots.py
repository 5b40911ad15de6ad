"""PNG charts for ``agentrt bench sim --plot DIR`` and ``agentrt bench sweep --plot DIR``.

matplotlib with the Agg backend (no display needed); imported only when plotting.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrt_sim.runner import RunOutcome

__all__ = ["label_of", "plot_comparison", "plot_sweep"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _name(summary: dict[str, Any]) -> str:
    window = summary["admission_window"]
    parts = [summary["policy"]]
    if summary["router"] != "round_robin" or summary["engines"] > 1:
        parts.append(summary["router"])
    if summary["retention"] != "off":
        parts.append(f"ret={summary['retention']}")
    if window is not None:
        parts.append(f"w={window}")
    return " ".join(parts)


def plot_comparison(outcomes: Sequence[RunOutcome], directory: str | Path) -> list[Path]:
    """Token-latency bars, E2E CDFs and the wait/exec/tool/think breakdown; returns the files."""
    plt = _pyplot()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    names = [_name(o.summary) for o in outcomes]
    first = outcomes[0].summary
    title = f"{first['workload']} @ {first['rate']:g} programs/s, {first['engines']} engine(s)"
    files: list[Path] = []

    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(names) + 2), 4))
    xs = range(len(names))
    means = [o.summary["token_latency_s"]["mean"] for o in outcomes]
    p95s = [o.summary["token_latency_s"]["p95"] for o in outcomes]
    ax.bar([x - 0.2 for x in xs], means, width=0.4, label="mean")
    ax.bar([x + 0.2 for x in xs], p95s, width=0.4, label="p95")
    ax.set_xticks(list(xs), names, rotation=20, ha="right")
    ax.set_ylabel("program token latency (s / token)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    files.append(out / "token_latency.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, outcome in zip(names, outcomes, strict=True):
        e2e = sorted(p.e2e_s for p in outcome.record.programs if p.measured)
        if e2e:
            ax.step(e2e, [(i + 1) / len(e2e) for i in range(len(e2e))], where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("program E2E latency (s)")
    ax.set_ylabel("fraction of programs")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    files.append(out / "e2e_cdf.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(names) + 2), 4))
    bottom = [0.0] * len(names)
    for part in ("wait", "exec", "tool", "think"):
        values = [o.summary[f"{part}_s_mean"] for o in outcomes]
        ax.bar(list(xs), values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_xticks(list(xs), names, rotation=20, ha="right")
    ax.set_ylabel("mean seconds on the critical path")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    files.append(out / "breakdown.png")
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)
    return files


def plot_sweep(outcomes: Sequence[RunOutcome], directory: str | Path) -> list[Path]:
    """Token latency (mean, p95) and throughput against the offered rate, one line per
    configuration; returns the files written."""
    plt = _pyplot()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    series: dict[str, list[dict[str, Any]]] = {}
    for outcome in outcomes:
        series.setdefault(label_of(outcome), []).append(outcome.summary)
    workload = outcomes[0].summary["workload"]
    files: list[Path] = []
    for key, ylabel, name in (
        (("token_latency_s", "mean"), "mean program token latency (s / token)", "sweep_mean.png"),
        (("token_latency_s", "p95"), "p95 program token latency (s / token)", "sweep_p95.png"),
        (("throughput_programs_per_s", None), "completed programs / s", "sweep_throughput.png"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        for series_name, rows in series.items():
            rows = sorted(rows, key=lambda r: r["rate"])
            values = [r[key[0]][key[1]] if key[1] else r[key[0]] for r in rows]
            ax.plot([r["rate"] for r in rows], values, marker="o", label=series_name)
        if key[1] is None:
            rates = sorted({o.summary["rate"] for o in outcomes})
            ax.plot(rates, rates, linestyle=":", color="grey", label="offered")
        else:
            ax.set_yscale("log")
        ax.set_xlabel("arrival rate (programs / s)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{workload}: latency against load")
        ax.legend()
        fig.tight_layout()
        files.append(out / name)
        fig.savefig(files[-1], dpi=120)
        plt.close(fig)
    return files


def label_of(outcome: RunOutcome) -> str:
    """Series name of a run in a sweep (its configuration without the rate)."""
    return _name(outcome.summary)
