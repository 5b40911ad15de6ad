"""What the simulator benchmarks (``scheduling.py``, ``routing.py``, ``retention.py``) share
around their results.

The ``--cost`` and ``--date`` options and the cost function a ``--cost`` name means; medians
over seeds, markdown tables, the plot link and the closing lines of a docs section, the
output options (``--jobs --quick --from-json --json --write-docs --plot``) and what they do:
print the section or the JSON, replace the benchmark's own ``## …`` section of
docs/benchmarks.md. Nothing here runs a simulation.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrt_controller.cost_model import CostFunction
from agentrt_sim.costs import default_cost_model

#: Cost models a run may charge: the controller's default (``defaults.COST``) or the engine
#: profile's roofline (the simulator's own, what these benchmarks charged before).
COSTS = ("controller", "roofline")


def cost_function(name: str) -> CostFunction | None:
    """The simulator's cost function for a :data:`COSTS` name (``None``: the roofline)."""
    return None if name == "roofline" else default_cost_model().service_s


def add_cost_option(parser: argparse.ArgumentParser) -> None:
    """``--cost controller|roofline`` (default: the controller's)."""
    parser.add_argument(
        "--cost",
        choices=COSTS,
        default="controller",
        help="charged service: the controller's default cost model or the engine profile's "
        "roofline (default: %(default)s)",
    )


def add_date_option(parser: argparse.ArgumentParser) -> None:
    """``--date``: the run's date to quote (default: today, UTC)."""
    parser.add_argument(
        "--date",
        default=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        help="the run's date to quote (default: today, UTC)",
    )


def medians(points: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """Per key, the median over ``points`` (one per seed), then ``wall_s``: the points' total
    simulation wall time (seconds)."""
    summary: dict[str, Any] = {key: statistics.median(p[key] for p in points) for key in keys}
    summary["wall_s"] = sum(p["wall_s"] for p in points)
    return summary


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Markdown table lines: the header, the separator, one line per row of formatted cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines


def add_output_options(parser: argparse.ArgumentParser, saved: str) -> None:
    """The options every simulator benchmark has; ``saved`` names what ``--json`` prints."""
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny and fast")
    parser.add_argument("--from-json", metavar="FILE", help="render saved --json output")
    parser.add_argument("--json", action="store_true", help=f"print the {saved} as JSON")
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--plot", default=None, help="PNG path (default with --write-docs)")


def resolve_plot(args: argparse.Namespace, docs: Path, png_name: str) -> None:
    """Default ``args.plot`` to ``docs/img/<png_name>`` with ``--write-docs``; set
    ``args.plot_rel``, the image link of the section (relative to ``docs`` when the PNG lies
    below it, else absolute; None without a plot)."""
    if args.write_docs and args.plot is None:
        args.plot = str(docs / "img" / png_name)
    args.plot_rel = None
    if args.plot:
        plot_path = Path(args.plot).resolve()
        args.plot_rel = str(
            plot_path.relative_to(docs) if plot_path.is_relative_to(docs) else plot_path
        )


def closing_lines(args: argparse.Namespace, alt: str, script: str) -> list[str]:
    """A section's last lines: the plot (``alt`` its description), how to reproduce it."""
    lines = [f"![{alt}]({args.plot_rel})", ""] if args.plot else []
    lines += [
        f"Reproduce: `.venv/bin/python benchmarks/{script} --write-docs` "
        "(`--quick` for a smoke run).",
        "",
    ]
    return lines


def subplots(rows: int, columns: int, size_in: tuple[float, float]) -> tuple[Any, Any]:
    """A figure of ``rows`` × ``columns`` axes (``axes[row][column]``) on matplotlib's
    file-only Agg backend; ``size_in`` is (width, height) in inches. matplotlib is imported
    here, so that a benchmark without ``--plot`` never loads it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, columns, figsize=size_in, squeeze=False)


def save_figure(fig: Any, path: Path) -> None:
    """Lay out ``fig``, write it as a PNG (110 dpi) to ``path`` (parents made) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replace_section(path: Path, heading: str, section: str) -> None:
    """Replace (or append) the section under ``heading`` (``## Routing``) of the markdown file
    ``path`` — up to the next ``## `` heading — with ``section``."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def publish(
    args: argparse.Namespace, section: str, saved: Mapping[str, Any], docs: Path, heading: str
) -> int:
    """Print ``saved`` as JSON (``--json``) or the markdown ``section``; with ``--write-docs``
    put the section under ``heading`` in ``docs/benchmarks.md``. Returns exit status 0."""
    print(json.dumps(saved, indent=2) if args.json else section)
    if args.write_docs:
        replace_section(docs / "benchmarks.md", heading, section)
    return 0
