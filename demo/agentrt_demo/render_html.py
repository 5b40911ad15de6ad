"""The timeline as one self-contained HTML page: inline SVG, inline CSS, no script, no network.

Every section shares one time axis (so phases compare at a glance); hovering a bar or a
program band shows its details (SVG ``<title>`` tooltips).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

from agentrt_demo.timeline_layout import ProgramLane, SectionLayout

__all__ = ["COLORS", "render_html"]

#: Fill colours: LLM execution, LLM time queued at the controller, tool, anything else.
COLORS = {"llm": "#3b6ea8", "queue": "#a9c7e8", "tool": "#e8891c", "other": "#8c8c8c"}
_LABEL_W = 190
_PLOT_W = 1100
_ROW_H = 10
_BAR_H = 8
_GAP = 4
_AXIS_H = 26
_PAD_R = 20


def _nice_step(span_s: float) -> float:
    raw = span_s / 10 if span_s > 0 else 1.0
    for step in (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600):
        if step >= raw:
            return float(step)
    return float(10 ** math.ceil(math.log10(raw)))


def render_html(sections: Sequence[SectionLayout], title: str) -> str:
    """The whole page."""
    span = max([s.end_s for s in sections] + [1e-3])
    body = [_section_svg(section, span) for section in sections]
    legend = "".join(
        f'<span class="key"><svg width="14" height="10"><rect width="14" height="10" '
        f'fill="{color}"/></svg> {escape(text)}</span>'
        for color, text in (
            (COLORS["llm"], "LLM call (engine: queue + prefill + decode)"),
            (COLORS["queue"], "LLM call held in the controller's queues"),
            (COLORS["tool"], "tool call"),
            ("#e9e9ee", "program end-to-end (band)"),
        )
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1>"
        f'<p class="legend">{legend}</p>'
        '<p class="help">One block of lanes per program (by start time); each lane holds '
        "threads of the program that do not overlap in time. Hover a bar for its node, a "
        "band for its program. All sections share one time axis (seconds).</p>"
        + "".join(body)
        + "</body></html>\n"
    )


_CSS = (
    "body{font:13px system-ui,sans-serif;margin:16px;color:#222}"
    "h1{font-size:18px}h2{font-size:15px;margin:18px 0 4px}"
    ".legend .key{margin-right:16px;white-space:nowrap}.help{color:#555;max-width:70em}"
    "svg text{font:10px system-ui,sans-serif;fill:#333}"
    "svg .axis{stroke:#999;stroke-width:1}svg .grid{stroke:#e4e4e4;stroke-width:1}"
)


def _section_svg(section: SectionLayout, span_s: float) -> str:
    rows = section.rows
    height = _AXIS_H + rows * _ROW_H + len(section.programs) * _GAP + 10
    width = _LABEL_W + _PLOT_W + _PAD_R
    scale = _PLOT_W / span_s

    def x(t: float) -> float:
        return _LABEL_W + max(0.0, t) * scale

    parts = [
        f"<h2>{escape(section.title)} — {len(section.programs)} programs, "
        f"last ends at {section.end_s:.2f} s</h2>",
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
    ]
    step = _nice_step(span_s)
    tick = 0.0
    while tick <= span_s + 1e-9:
        px = x(tick)
        parts.append(
            f'<line class="grid" x1="{px:.1f}" y1="{_AXIS_H - 4}" x2="{px:.1f}" y2="{height}"/>'
        )
        parts.append(f'<text x="{px:.1f}" y="{_AXIS_H - 8}" text-anchor="middle">{tick:g}</text>')
        tick += step
    axis_y, right = _AXIS_H - 4, _LABEL_W + _PLOT_W
    parts.append(f'<line class="axis" x1="{_LABEL_W}" y1="{axis_y}" x2="{right}" y2="{axis_y}"/>')
    y = float(_AXIS_H)
    for program in section.programs:
        parts.append(_program_svg(program, y, x))
        y += len(program.lanes) * _ROW_H + _GAP
    parts.append("</svg>")
    return "\n".join(parts)


def _program_svg(program: ProgramLane, y: float, x: Callable[[float], float]) -> str:
    height = len(program.lanes) * _ROW_H
    band_fill = "#e9e9ee" if program.status == "ok" else "#f6d5d5"
    out = [
        f'<text x="{_LABEL_W - 6}" y="{y + min(height, _ROW_H) - 1:.1f}" text-anchor="end">'
        f"{escape(program.name)}</text>",
        f'<rect x="{x(program.start_s):.1f}" y="{y:.1f}" '
        f'width="{max(0.5, x(program.end_s) - x(program.start_s)):.1f}" height="{height}" '
        f'fill="{band_fill}"><title>{escape(program.label)}</title></rect>',
    ]
    for index, lane in enumerate(program.lanes):
        top = y + index * _ROW_H + (_ROW_H - _BAR_H) / 2
        for bar in lane.bars:
            x0, x1 = x(bar.start_s), x(bar.end_s)
            width = max(0.6, x1 - x0)
            color = COLORS.get(bar.kind, COLORS["other"])
            stroke = ' stroke="#c0392b" stroke-width="1"' if bar.failed else ""
            out.append(f"<g><title>{escape(bar.label)}</title>")
            out.append(
                f'<rect x="{x0:.1f}" y="{top:.1f}" width="{width:.1f}" height="{_BAR_H}" '
                f'fill="{color}"{stroke}/>'
            )
            if bar.queue_s > 0:
                qw = min(width, x(bar.start_s + bar.queue_s) - x0)
                out.append(
                    f'<rect x="{x0:.1f}" y="{top:.1f}" width="{max(0.3, qw):.1f}" '
                    f'height="{_BAR_H}" fill="{COLORS["queue"]}"/>'
                )
            out.append("</g>")
    return "\n".join(out)
