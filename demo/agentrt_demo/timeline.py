"""The program timeline: a Gantt chart of each program's nodes per thread, from spans.

The layout (pure) is :mod:`agentrt_demo.timeline_layout`: programs by start time, each
program's threads packed into lanes, LLM bars with their controller-queue part, tool bars and
a band for the program's end-to-end time, in seconds from the section's first program start.

Rendering: :mod:`agentrt_demo.render_html` (self-contained HTML with inline SVG, tooltips on
every bar) and :mod:`agentrt_demo.render_png` (matplotlib, Agg backend). The renderers import
the layout module only, never this one, so the modules form no import cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentrt.errors import ConfigError
from agentrt_demo.timeline_layout import (
    Bar,
    Lane,
    ProgramLane,
    SectionLayout,
    TimelineSection,
    build_sections,
)

__all__ = [
    "Bar",
    "Lane",
    "ProgramLane",
    "SectionLayout",
    "TimelineSection",
    "build_sections",
    "write_timeline",
]


def write_timeline(
    path: Path, sections: Sequence[SectionLayout], fmt: str, *, title: str = "agentrt timeline"
) -> None:
    """Write the timeline of ``sections`` to ``path`` as ``html`` or ``png``.

    Raises :class:`ConfigError` for another format."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "html":
        from agentrt_demo.render_html import render_html

        path.write_text(render_html(sections, title), encoding="utf-8")
    elif fmt == "png":
        from agentrt_demo.render_png import render_png

        render_png(path, sections, title)
    else:
        raise ConfigError(f"timeline format must be html or png, got {fmt!r}")
