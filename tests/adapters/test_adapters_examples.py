"""Must-show: the framework examples run with one command — against the embedded emulator
behind a controller, or a server given with ``--base-url`` — and their agent shows up in the
controller's process table as a program with its tool wait."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("langgraph")
pytest.importorskip("autogen_agentchat")

from adapters_stack import running_stack

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def check_embedded_run(script: str, node: str, tmp_path: Path) -> None:
    """``examples/<script>`` against its embedded emulator and controller: exits 0, its
    program ends ok with an answer, and the process table showed ``slow_search`` waiting as
    node ``node`` (in that node's thread) before the tool finished ok."""
    command = [sys.executable, "-W", "error", str(EXAMPLES / script), "--time-scale", "200"]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=80, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert ": ok," in out and "(answer)" in out, out
    assert "process table: program p-" in out, out
    thread = node.split(":")[0]
    assert f"  tool wait: slow_search (thread {thread}, node {node})" in out, out
    assert f"tool slow_search ({node}) ok" in out, out


@pytest.mark.timeout(90)
@pytest.mark.parametrize("script", ["langgraph_react.py", "autogen_assistant.py"])
def test_example_runs_against_the_embedded_controller(script: str, tmp_path: Path) -> None:
    check_embedded_run(script, "main:1", tmp_path)


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_example_runs_against_a_server_given_by_url(tmp_path: Path) -> None:
    async with running_stack() as stack:
        command = [sys.executable, "-W", "error", str(EXAMPLES / "langgraph_react.py")]
        command += ["--base-url", stack.url + "/v1", "--model", stack.runtime.config.model or ""]
        with anyio.fail_after(80):
            done = await anyio.run_process(command, cwd=tmp_path, check=False)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert "  tool wait: slow_search (thread main, node main:1)" in out, out
    assert "(embedded emulator" not in out


# The scripted model is deterministic: the Agents SDK example's first turn calls both of its
# tools at once (slow_search in a thread of its own), Pydantic AI's calls slow_search alone.
@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("script", "node"),
    [("openai_agents_assistant.py", "main.0:0"), ("pydantic_ai_assistant.py", "main:1")],
)
def test_agents_sdk_and_pydantic_ai_examples_show_their_tool_wait(
    script: str, node: str, tmp_path: Path
) -> None:
    pytest.importorskip("agents")
    pytest.importorskip("pydantic_ai")
    check_embedded_run(script, node, tmp_path)
