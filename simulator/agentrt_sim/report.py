"""Human-readable output of ``agentrt bench``: rich tables and a progress bar on stderr."""

from __future__ import annotations

import math
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from agentrt_sim.runner import Progress

__all__ = [
    "SIM_COLUMNS",
    "SWEEP_COLUMNS",
    "TEXT_WIDTH",
    "Column",
    "print_fig2_table",
    "print_sim_table",
    "print_sweep_table",
    "print_tenant_table",
    "progress_bar",
    "queueing_note",
    "seeds_note",
]


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _console(width: int = 220) -> Any:
    """A rich console on stdout; ``width`` columns when stdout is not a terminal (files,
    pipes), else the terminal's."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=width)


def _window(value: Any) -> str:
    return "unlimited" if value is None else str(value)


def _replicas(result: Mapping[str, Any]) -> str:
    """`` x4 by program`` (split window: ``, split``) for several controller replicas."""
    count = int(result.get("replicas", 1))
    if count <= 1:
        return ""
    split = ", split" if result.get("replica_window") == "split" else ""
    return f" x{count} by {result.get('shard', 'program')}{split}"


@dataclass(frozen=True, slots=True)
class Column:
    """One numeric column of a results table."""

    header: str
    #: Keys leading to the value in a run's summary (``("e2e_latency_s", "p95")``).
    path: tuple[str, ...]
    #: Shown only with ``--wide``.
    wide_only: bool = False
    #: The value is multiplied by this (fractions shown as percent).
    scale: float = 1.0


#: ``bench sim``'s columns; without ``--wide`` the table fits 100 columns of text.
SIM_COLUMNS = (
    Column("programs", ("programs_completed",)),
    Column("thr/s", ("throughput_programs_per_s",)),
    Column("tok lat", ("token_latency_s", "mean")),
    Column("tok lat p95", ("token_latency_s", "p95"), wide_only=True),
    Column("e2e", ("e2e_latency_s", "mean")),
    Column("e2e p95", ("e2e_latency_s", "p95")),
    Column("wait", ("wait_s_mean",)),
    Column("exec", ("exec_s_mean",), wide_only=True),
    Column("tool", ("tool_s_mean",), wide_only=True),
    Column("think", ("think_s_mean",), wide_only=True),
    Column("hit %", ("prefix_hit_rate",), scale=100.0),
    Column("recomputed", ("recomputed_prompt_tokens",), wide_only=True),
    Column("preempt", ("preemptions",), wide_only=True),
)
#: ``bench sweep``'s columns.
SWEEP_COLUMNS = (
    Column("thr/s", ("throughput_programs_per_s",)),
    Column("tok lat", ("token_latency_s", "mean")),
    Column("tok lat p95", ("token_latency_s", "p95")),
    Column("e2e p50", ("e2e_latency_s", "p50")),
    Column("e2e p95", ("e2e_latency_s", "p95"), wide_only=True),
    Column("wait", ("wait_s_mean",), wide_only=True),
    Column("hit %", ("prefix_hit_rate",), wide_only=True, scale=100.0),
    Column("unfinished", ("programs_unfinished",)),
)
#: Widest configuration cell (characters) without --wide; longer ones wrap.
_CONFIG_WIDTH = 28
#: The configuration's parts besides the policy, as (header, summary key).
_SETTINGS = (("router", "router"), ("retention", "retention"), ("window", "admission_window"))


def _lookup(result: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = result
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _scaled(value: Any, scale: float) -> Any:
    return value * scale if scale != 1.0 and isinstance(value, int | float) else value


def _cell(result: Mapping[str, Any], column: Column) -> str:
    return _num(_scaled(_lookup(result, column.path), column.scale))


def _range_cell(result: Mapping[str, Any], column: Column) -> str:
    """``min-max`` over the seeds (``seed_range``, agentrt_sim/seeds.py), two significant
    digits; ``-`` when unknown."""
    spread = _lookup(result.get("seed_range", {}), column.path)
    if not isinstance(spread, list) or len(spread) != 2:
        return "-"
    low, high = (_scaled(v, column.scale) for v in spread)
    return f"{_short(low)}-{_short(high)}"


def _short(value: Any) -> str:
    """A range end: whole numbers from 10 up (``129``, ``7,803``), two significant digits
    below (``0.037``); ``-`` for none."""
    if not isinstance(value, int | float) or math.isnan(value):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 10 else f"{value:.2g}"


def _setting_text(result: Mapping[str, Any], key: str) -> str:
    return _window(result.get(key)) if key == "admission_window" else str(result.get(key, "-"))


def _config_label(result: Mapping[str, Any], varying: Sequence[str]) -> str:
    policy = str(result["policy"]) + ("+tenancy" if result.get("tenancy") else "")
    return " ".join([policy + _replicas(result), *(_setting_text(result, k) for k in varying)])


def _results_table(
    results: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    *,
    title: str,
    wide: bool,
    lead: Sequence[tuple[str, Any]] = (),
) -> tuple[Any, list[str]]:
    """A rich table (``lead`` columns: header and a function of the result, then the
    configuration, then ``columns``), one row per result and, for results over several seeds,
    a dim row of ranges under it; and the notes naming the settings all rows share."""
    from rich import box
    from rich.table import Table

    shared = [
        (name, key) for name, key in _SETTINGS
        if len({_setting_text(r, key) for r in results}) <= 1
    ]  # fmt: skip
    varying = [key for name, key in _SETTINGS if (name, key) not in shared]
    shown = [c for c in columns if wide or not c.wide_only]
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for header, _ in lead:
        table.add_column(header, justify="right")
    config_header = " ".join(["policy", *(n for n, k in _SETTINGS if k in varying)])
    # A long configuration (tenancy, replicas, several settings) wraps inside its cell.
    table.add_column(config_header, justify="left", max_width=None if wide else _CONFIG_WIDTH)
    for column in shown:
        table.add_column(column.header, justify="right")
    for r in results:
        table.add_row(
            *(str(value(r)) for _, value in lead),
            _config_label(r, varying),
            *(_cell(r, c) for c in shown),
        )
        if "seed_range" in r:
            table.add_row(
                *("" for _ in lead), "  range", *(_range_cell(r, c) for c in shown), style="dim"
            )
    notes = []
    if results and shared:
        settings = ", ".join(f"{name} {_setting_text(results[0], key)}" for name, key in shared)
        notes.append(f"every row: {settings}")
    return table, notes


#: Text width the tables (without --wide) and their notes fit in.
TEXT_WIDTH = 100


def _print_notes(lines: Sequence[str | None]) -> None:
    """The lines under a table, each wrapped to :data:`TEXT_WIDTH`."""
    for line in lines:
        if line:
            print(textwrap.fill(line, TEXT_WIDTH, subsequent_indent="  "))


def seeds_note(results: Sequence[Mapping[str, Any]]) -> str | None:
    """How the cells of a several-seed table read; ``None`` for one seed."""
    seeds = results[0].get("seeds") if results else None
    if not seeds or len(seeds) < 2:
        return None
    listed = ",".join(str(s) for s in seeds)
    return f"cells: median over seeds {listed}; the dim row under each: its range (min-max)"


def print_sim_table(
    results: Sequence[Mapping[str, Any]],
    title: str,
    *,
    wide: bool = False,
    notes: Sequence[str] = (),
) -> None:
    """One row per configuration (over several seeds: medians, ranges below). Without
    ``wide`` a few columns, so that the table fits 100 columns of text; ``notes`` are printed
    under it (the warm-up exclusion, the seeds)."""
    table, shared = _results_table(results, SIM_COLUMNS, title=title, wide=wide)
    _console(220 if wide else TEXT_WIDTH).print(table)
    legend = (
        "times in seconds; tok lat = E2E / generated tokens; e2e and wait = means (wait along "
        "each program's critical path)"
    )
    if wide:
        legend += "; exec/tool/think = means along the critical path"
    else:
        legend += "; --wide for every column"
    _print_notes(
        [
            *notes,
            *shared,
            legend,
            seeds_note(results),
            queueing_note(results),
            unfinished_note(results),
        ]
    )
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


def unfinished_note(results: Sequence[Mapping[str, Any]]) -> str | None:
    """A warning when programs were still running when the simulation stopped (its
    ``--drain`` past the arrivals): the table's means leave the measured ones among them out,
    which flatters a run that leaves its long programs unfinished, where a live replay (which
    waits for every program) would not (``None`` when every program finished)."""
    counts = [r.get("programs_unfinished") or 0 for r in results]
    if not any(counts):
        return None
    per_row = ", ".join(f"{count:g}" for count in counts)
    ends = [r["sim_end_s"] for r in results if r.get("sim_end_s") is not None]
    stopped = f" at {max(ends):,.0f} s" if ends else ""
    return (
        f"note: programs were still running when the run stopped{stopped} (per row: "
        f"{per_row}); the measured ones among them are in no mean above. A longer --drain "
        "finishes them (a live replay waits for every program)."
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
    results: Sequence[Mapping[str, Any]],
    saturation: Mapping[str, float | None],
    *,
    wide: bool = False,
    notes: Sequence[str] = (),
) -> None:
    """One row per (rate, configuration), then the saturation rate per policy; ``wide`` adds
    columns, ``notes`` are printed under the table."""
    table, shared = _results_table(
        results,
        SWEEP_COLUMNS,
        title="rate sweep",
        wide=wide,
        lead=[("rate", lambda r: _num(r["rate"]))],
    )
    console = _console(220 if wide else TEXT_WIDTH)
    console.print(table)
    _print_notes([*notes, *shared, seeds_note(results)])
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
