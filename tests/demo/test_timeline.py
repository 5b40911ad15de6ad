"""Timeline layout (threads packed into lanes) and its HTML and PNG pictures."""

from __future__ import annotations

import re
from pathlib import Path
from xml.etree import ElementTree

import pytest

from agentrt.errors import ConfigError
from agentrt_demo.analysis import programs_from_spans
from agentrt_demo.timeline import TimelineSection, build_sections, write_timeline

from .spans import SpanFactory

pytestmark = pytest.mark.timeout(60)


def _fan_out() -> SpanFactory:
    f = SpanFactory()
    pid = f.program("mr-1", 1.0, 9.0)
    f.llm(pid, "main.0:0", 1.0, 3.0, queue_s=0.5)
    f.llm(pid, "main.1:0", 1.0, 4.0)
    f.llm(pid, "main.2:0", 3.5, 5.0)  # starts after main.0 ended: shares its lane
    f.tool(pid, "main:0", 5.0, 6.0)  # after every branch: lane 0 again
    f.llm(pid, "main:1", 6.0, 9.0, backend="e2")
    other = f.program("react-2", 2.0, 3.0)
    f.llm(other, "main:0", 2.0, 3.0)
    return f


def test_threads_that_do_not_overlap_share_a_lane() -> None:
    (section,) = build_sections([TimelineSection("phase", programs_from_spans(_fan_out().spans))])
    mr, react = section.programs
    assert mr.name == "mr-1" and react.name == "react-2"
    assert [lane.threads for lane in mr.lanes] == [["main.0", "main.2", "main"], ["main.1"]]
    assert (mr.start_s, mr.end_s) == (0.0, 8.0)  # relative to the first program start
    first = mr.lanes[0].bars[0]
    assert (first.kind, first.start_s, first.end_s, first.queue_s) == ("llm", 0.0, 2.0, 0.5)
    assert "queued at the controller 0.500 s" in first.label
    assert any("engine e2" in b.label for b in mr.lanes[0].bars)
    assert section.end_s == 8.0 and section.rows == 3


def test_html_is_self_contained_and_png_is_a_png(tmp_path: Path) -> None:
    sections = build_sections(
        [
            TimelineSection("controller", programs_from_spans(_fan_out().spans)),
            TimelineSection("direct <baseline>", []),
        ]
    )
    html_path, png_path = tmp_path / "t.html", tmp_path / "t.png"
    write_timeline(html_path, sections, "html", title="demo & test")
    write_timeline(png_path, sections, "png", title="demo & test")
    html = html_path.read_text()
    assert html.startswith("<!doctype html>") and html.count("<svg") >= 2
    assert "demo &amp; test" in html and "direct &lt;baseline&gt;" in html
    # Nothing fetched from elsewhere: no scripts, stylesheets or images by URL.
    assert not re.search(r"(src|href)=", html)
    assert re.findall(r"https?://[^\"' ]+", html) == ["http://www.w3.org/2000/svg"] * html.count(
        'xmlns="http://www.w3.org/2000/svg"'
    )
    assert "mr-1" in html and "<title>" in html
    # Every picture is well-formed SVG (XML) with a tooltip on each bar.
    pictures = re.findall(r"<svg xmlns=.*?</svg>", html, flags=re.DOTALL)
    assert len(pictures) == 2
    first = ElementTree.fromstring(pictures[0])
    bars = first.findall("{http://www.w3.org/2000/svg}g")
    assert len(bars) == 6 and all(
        b.find("{http://www.w3.org/2000/svg}title") is not None for b in bars
    )
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ConfigError):
        write_timeline(tmp_path / "t.svg", sections, "svg")
