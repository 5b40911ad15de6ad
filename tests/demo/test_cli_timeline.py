"""``agentrt timeline TRACE_FILE``: draws a trace file; a bad one is a clear error (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.cli import main
from agentrt_demo.traces import write_trace

from .spans import SpanFactory

pytestmark = pytest.mark.timeout(60)


def _trace(tmp_path: Path) -> Path:
    f = SpanFactory()
    pid = f.program("react-01", 0.0, 3.0)
    f.llm(pid, "main:0", 0.0, 1.0, queue_s=0.2)
    f.tool(pid, "main:1", 1.0, 2.0)
    f.llm(pid, "main:2", 2.0, 3.0)
    path = tmp_path / "trace.jsonl"
    write_trace(path, f.spans)
    return path


def test_timeline_draws_html_by_default_and_png_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _trace(tmp_path)
    assert main(["timeline", str(trace)]) == 0
    html = tmp_path / "trace.html"
    assert "react-01" in html.read_text()
    assert f"wrote {html} (1 programs, 3 nodes)" in capsys.readouterr().out

    out = tmp_path / "pictures" / "t.png"
    assert main(["timeline", str(trace), "--out", str(out)]) == 0  # format from the suffix
    assert out.read_bytes()[:4] == b"\x89PNG"
    explicit = tmp_path / "t.picture"
    assert main(["timeline", str(trace), "--out", str(explicit), "--format", "html"]) == 0
    assert explicit.read_text().startswith("<!doctype html>")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("hello\n", "line 1: not JSON"),
        ('{"resourceSpans": []}\n', "holds no spans"),
    ],
)
def test_a_bad_trace_file_exits_2_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert main(["timeline", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentrt timeline: ") and message in err
    assert not (tmp_path / "bad.html").exists()


def test_spans_without_programs_and_missing_files_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = SpanFactory()
    f.llm("p-x", "main:0", 0.0, 1.0)  # a call, but no program span
    path = tmp_path / "calls.jsonl"
    write_trace(path, f.spans)
    assert main(["timeline", str(path)]) == 2
    assert "no agentrt program spans" in capsys.readouterr().err
    assert main(["timeline", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read trace file" in capsys.readouterr().err
