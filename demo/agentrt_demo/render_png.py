"""The timeline as a PNG (matplotlib, Agg backend: no display needed). Same layout and colours
as the HTML page; one panel per section, sharing the time axis."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentrt_demo.render_html import COLORS
from agentrt_demo.timeline_layout import SectionLayout

__all__ = ["render_png"]

_ROW_IN = 0.09  # inches per lane
_MAX_PANEL_IN = 30.0
_MIN_PANEL_IN = 1.6


def render_png(path: Path, sections: Sequence[SectionLayout], title: str) -> None:
    """Draw ``sections`` into ``path`` (PNG, 100 dpi)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    heights = [
        min(_MAX_PANEL_IN, max(_MIN_PANEL_IN, s.rows * _ROW_IN + len(s.programs) * 0.03 + 0.6))
        for s in sections
    ] or [_MIN_PANEL_IN]
    figure = Figure(figsize=(14, sum(heights) + 1.2), dpi=100)
    axes = figure.subplots(
        max(1, len(sections)), 1, sharex=True, squeeze=False, height_ratios=heights
    )[:, 0]
    span = max([s.end_s for s in sections] + [1e-3])
    for ax, section in zip(axes, sections, strict=False):
        _draw(ax, section)
        ax.set_xlim(0, span * 1.01)
    axes[-1].set_xlabel("seconds since the first program started")
    figure.suptitle(title, fontsize=11)
    figure.legend(
        handles=[
            Patch(color=COLORS["llm"], label="LLM call (engine)"),
            Patch(color=COLORS["queue"], label="LLM call queued at the controller"),
            Patch(color=COLORS["tool"], label="tool call"),
            Patch(color="#e9e9ee", label="program end-to-end"),
        ],
        loc="upper right",
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")


def _draw(ax: object, section: SectionLayout) -> None:
    from matplotlib.axes import Axes

    assert isinstance(ax, Axes)
    bars: dict[str, tuple[list[float], list[float], list[float]]] = {}

    def add(color: str, row: float, start: float, width: float) -> None:
        ys, lefts, widths = bars.setdefault(color, ([], [], []))
        ys.append(row)
        lefts.append(start)
        widths.append(width)

    ticks: list[float] = []
    labels: list[str] = []
    row = 0.0
    for program in section.programs:
        lanes = len(program.lanes)
        ax.barh(
            row + (lanes - 1) / 2,
            program.end_s - program.start_s,
            height=lanes,
            left=program.start_s,
            color="#e9e9ee" if program.status == "ok" else "#f6d5d5",
            linewidth=0,
        )
        ticks.append(row)
        labels.append(program.name)
        for index, lane in enumerate(program.lanes):
            for bar in lane.bars:
                width = bar.end_s - bar.start_s
                add(COLORS.get(bar.kind, COLORS["other"]), row + index, bar.start_s, width)
                if bar.queue_s > 0:
                    add(COLORS["queue"], row + index, bar.start_s, min(width, bar.queue_s))
        row += lanes + 0.4
    for color in (COLORS["llm"], COLORS["tool"], COLORS["other"], COLORS["queue"]):
        if color in bars:
            ys, lefts, widths = bars[color]
            ax.barh(ys, widths, left=lefts, height=0.8, color=color, linewidth=0)
    size = 7 if len(labels) <= 60 else 5
    ax.set_yticks(ticks, labels, fontsize=size)
    ax.set_ylim(row, -1)
    ax.set_title(f"{section.title} — {len(section.programs)} programs", fontsize=10, loc="left")
    ax.grid(axis="x", color="#e4e4e4", linewidth=0.6)
    ax.set_axisbelow(True)
