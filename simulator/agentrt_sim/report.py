"""Human-readable output of ``agentrt bench``: rich tables and a progress bar on stderr."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from agentrt_sim.runner import Progress

__all__ = [
    "print_fig2_table",
    "print_sim_table",
    "print_sweep_table",
    "print_tenant_table",
    "progress_bar",
    "queueing_note",
]


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _console() -> Any:
    """A rich console on stdout; wide when stdout is not a terminal (files, pipes)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=220)


def _window(value: Any) -> str:
    return "unlimited" if value is None else str(value)


def _replicas(result: Mapping[str, Any]) -> str:
    """`` x4 by program`` (split window: ``, split``) for several controller replicas."""
    count = int(result.get("replicas", 1))
    if count <= 1:
        return ""
    split = ", split" if result.get("replica_window") == "split" else ""
    return f" x{count} by {result.get('shard', 'program')}{split}"


def print_sim_table(results: Sequence[Mapping[str, Any]], title: str) -> None:
    """One row per configuration."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for name in (
        "policy",
        "router",
        "retention",
        "window",
        "programs",
        "thr/s",
        "tok lat mean",
        "tok lat p95",
        "e2e mean",
        "e2e p95",
        "wait",
        "exec",
        "tool",
        "think",
        "hit %",
        "recomputed",
        "preempt",
    ):
        table.add_column(name, justify="left" if name in ("policy", "router") else "right")
    for r in results:
        table.add_row(
            r["policy"] + ("+tenancy" if r.get("tenancy") else "") + _replicas(r),
            r["router"],
            r["retention"],
            _window(r["admission_window"]),
            _num(r["programs_completed"]),
            _num(r["throughput_programs_per_s"]),
            _num(r["token_latency_s"]["mean"]),
            _num(r["token_latency_s"]["p95"]),
            _num(r["e2e_latency_s"]["mean"]),
            _num(r["e2e_latency_s"]["p95"]),
            _num(r["wait_s_mean"]),
            _num(r["exec_s_mean"]),
            _num(r["tool_s_mean"]),
            _num(r["think_s_mean"]),
            _num(100 * r["prefix_hit_rate"]),
            _num(r["recomputed_prompt_tokens"]),
            _num(r["preemptions"]),
        )
    _console().print(table)
    print(
        "times in seconds; wait/exec/tool/think = means along each program's critical path; "
        "tok lat = E2E / generated tokens"
    )
    note = queueing_note(results)
    if note:
        print(note)
    if any("tenants" in r for r in results):
        print_tenant_table(results)


#: A run "hardly queued" when its programs spent less than this share of their E2E waiting.
QUIET_WAIT_SHARE = 0.02


def queueing_note(results: Sequence[Mapping[str, Any]]) -> str | None:
    """A warning when scheduling policies are compared where nothing queues: with every
    program's critical-path wait under :data:`QUIET_WAIT_SHARE` of its E2E, there is no queue
    for a policy to order, so their rows agree whatever the policies (``None`` otherwise, or
    when only one policy ran)."""
    if len({r["policy"] for r in results}) < 2:
        return None
    shares = []
    for r in results:
        e2e = r["e2e_latency_s"]["mean"]
        if not e2e or r["programs_completed"] == 0:
            return None
        shares.append(r["wait_s_mean"] / e2e)
    worst = max(shares)
    if worst >= QUIET_WAIT_SHARE:
        return None
    return (
        f"note: calls hardly queued (waiting is at most {100 * worst:.1f} % of the mean E2E in "
        "every run): the engines keep up, so there is no queue for the policies to order and "
        "their rows agree. Program-level scheduling pays where calls wait: a higher --rate, "
        "fewer batch slots (--max-num-seqs) or fewer engines."
    )


def print_tenant_table(results: Sequence[Mapping[str, Any]]) -> None:
    """One row per (configuration, tenant): programs, latency, charged service and share."""
    from rich.table import Table

    table = Table(title="per tenant", title_justify="left")
    for name in (
        "policy",
        "tenancy",
        "tenant",
        "programs",
        "unfinished",
        "e2e mean",
        "e2e p95",
        "tok lat mean",
        "service s",
        "share %",
    ):
        table.add_column(name, justify="left" if name in ("policy", "tenant") else "right")
    for r in results:
        for tenant, t in r.get("tenants", {}).items():
            table.add_row(
                r["policy"],
                str(r.get("tenancy_mode", "on")) if r.get("tenancy") else "off",
                tenant or "-",
                _num(t["programs_completed"]),
                _num(t["programs_unfinished"]),
                _num(t["e2e_latency_s"]["mean"]),
                _num(t["e2e_latency_s"]["p95"]),
                _num(t["token_latency_s"]["mean"]),
                _num(t["charged_service_s"]),
                _num(100 * t["service_share"]),
            )
    _console().print(table)
    print(
        "service s = the cost model's charged service of calls finishing in the measurement "
        "window; share = of all tenants' charged service"
    )


def print_sweep_table(
    results: Sequence[Mapping[str, Any]], saturation: Mapping[str, float | None]
) -> None:
    """One row per (rate, configuration), then the saturation rate per policy."""
    from rich.table import Table

    table = Table(title="rate sweep", title_justify="left")
    for name in ("rate", "policy", "thr/s", "tok lat mean", "tok lat p95", "e2e p50", "unfinished"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for r in results:
        table.add_row(
            _num(r["rate"]),
            r["policy"],
            _num(r["throughput_programs_per_s"]),
            _num(r["token_latency_s"]["mean"]),
            _num(r["token_latency_s"]["p95"]),
            _num(r["e2e_latency_s"]["p50"]),
            _num(r["programs_unfinished"]),
        )
    console = _console()
    console.print(table)
    for policy, rate in saturation.items():
        console.print(f"{policy}: keeps up to {_num(rate)} programs/s among the rates tried")


def print_fig2_table(results: Mapping[str, Mapping[str, Any]]) -> None:
    """Total waiting time per policy for Autellix Fig. 2."""
    from rich.table import Table

    table = Table(title="Autellix Fig. 2 (durations in decode steps)", title_justify="left")
    for name in ("policy", "total wait", "A", "B", "C", "D", "mean E2E", "makespan"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for policy, r in results.items():
        waits = r["program_wait"]
        table.add_row(
            policy,
            _num(r["total_wait"]),
            *(_num(waits.get(p)) for p in "ABCD"),
            _num(r["mean_e2e"]),
            _num(r["makespan"]),
        )
    _console().print(table)


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Progress | None]:
    """A rich progress bar on stderr (one task per configuration) when ``enabled`` and stderr
    is a terminal; otherwise ``None``."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    tasks: dict[str, Any] = {}
    with RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f} sim s"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:

        def update(label: str, sim_s: float, end_s: float) -> None:
            task = tasks.get(label)
            if task is None:
                task = tasks[label] = bar.add_task(label, total=end_s)
            bar.update(task, completed=min(sim_s, end_s))

        yield update
