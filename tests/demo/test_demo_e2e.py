"""``agentrt demo --quick`` end to end: real engines (child processes), a real controller,
real SDK programs; the files it writes; nothing left behind, also after Ctrl-C."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import httpx
import pytest

from agentrt.cli import main
from agentrt_demo.app import run_demo
from agentrt_demo.settings import DemoSettings
from agentrt_demo.traces import read_trace

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _children(pid: int) -> set[int]:
    """Live processes whose parent is ``pid`` (Linux /proc)."""
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _port_open(url: str) -> bool:
    parsed = httpx.URL(url)
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((parsed.host, parsed.port or 80)) == 0


def test_quick_demo_runs_end_to_end_and_leaves_nothing_behind(tmp_path: Path) -> None:
    threads_before = threading.active_count()
    children_before = _children(os.getpid())
    settings = DemoSettings(out_dir=tmp_path / "out", progress="plain").quick_variant()
    out = io.StringIO()
    result = anyio.run(run_demo, settings, out)

    assert result.status == 0, out.getvalue()
    summary = out.getvalue()
    for needle in ("react", "map_reduce", "mcts", "coding", "all", "controller", "direct"):
        assert needle in summary
    assert "speed-up" in summary and "What the KV cache did, per kind:" in summary
    names = {p.name for p in result.files}
    assert {
        "trace-controller.jsonl",
        "trace-direct.jsonl",
        "timeline.html",
        "timeline.png",
    } <= names
    assert {"summary.txt", "summary.json"} <= names
    out_dir = settings.out_dir
    assert (out_dir / "summary.txt").read_text() == summary
    document = json.loads((out_dir / "summary.json").read_text())
    assert set(document["phases"]) == {"controller", "direct"}
    planned = len(document["phases"]["controller"]["programs"])
    assert all(status == "ok" for status in document["phases"]["controller"]["programs"].values())
    for phase in ("controller", "direct"):
        report = next(r for r in result.phases if r.label == phase)
        assert len(report.programs) == planned
        assert all(p.status == "ok" and p.llm_calls >= 1 for p in report.programs)
        assert report.engines.prefix_queries > 0
        # The coding agent reports its prompt usage; its repository context and history are
        # found in the prefix cache from its second call on.
        [coding] = [p for p in report.programs if p.kind == "coding"]
        assert coding.prompt_tokens and coding.cached_tokens
        assert coding.cached_tokens > coding.prompt_tokens / 3
    assert document["cache"]["coding"]["prompt_tokens"] > 0
    assert isinstance(document["retention_decisions"], dict)  # retention is on by default
    # The controller phase's trace holds the controller's own server spans too.
    controller_spans = read_trace(out_dir / "trace-controller.jsonl")
    assert any(s.kind == 2 and "agentrt.backend" in s.attributes for s in controller_spans)
    assert (out_dir / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in (out_dir / "timeline.html").read_text()

    # Nothing left: no child process, no extra thread, no listening port.
    assert _children(os.getpid()) == children_before
    deadline = time.monotonic() + 5
    while threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= threads_before
    assert len(result.endpoints) == 2 * settings.engines + 1
    assert not any(_port_open(url) for url in result.endpoints)

    # The trace file the demo wrote is drawn by `agentrt timeline` too.
    picture = tmp_path / "again.png"
    assert main(["timeline", str(out_dir / "trace-direct.jsonl"), "--out", str(picture)]) == 0
    assert picture.read_bytes()[:4] == b"\x89PNG"


def test_ctrl_c_stops_the_demo_and_every_process_it_started(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "agentrt.cli", "demo", "--quick", "--no-frameworks"]
    command += ["--out", str(tmp_path / "out"), "--progress", "plain", "--timeline", "html"]
    command += ["--programs", "6", "--time-scale", "1"]  # slow engines: still running at ^C
    with subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    ) as proc:
        try:
            assert proc.stderr is not None
            seen: list[str] = []
            for line in proc.stderr:
                seen.append(line)
                if line.startswith("controller: ") and "arriving" in line:
                    break
            else:
                pytest.fail("the demo never started its controller phase:\n" + "".join(seen))
            children = _children(proc.pid)
            assert len(children) >= 3, children  # two engines per phase and the controller
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in children)
