"""The README's Python snippets run as written against the servers the README starts.

The README starts an engine (``agentrt engine serve --port 8001 --scheduling-policy priority``
without a GPU) and a controller in front of it (``agentrt controller serve --port 8080
--backend http://127.0.0.1:8001,kind=vllm,priority=on``); its snippets talk to
``http://127.0.0.1:8080/v1``. Here both run on free loopback ports, and the only change made
to a snippet is that address. Each snippet runs as its own process (as a user pastes it into a
file), warnings as errors. The SDK snippet also runs straight against the engine, and the
journal it writes is the one ``agentrt journal list`` reads by default.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import EmulatorConfig, serve_engine

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

README = Path(__file__).resolve().parents[2] / "README.md"
#: The controller address the README's snippets use.
README_ADDRESS = "127.0.0.1:8080"
#: The ``agentrt`` command, run by this interpreter.
AGENTRT = [sys.executable, "-c", "import sys; from agentrt.cli import main; sys.exit(main())"]


def snippets() -> list[str]:
    """The README's ```python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


@dataclass
class Servers:
    engine: str
    controller: str


@contextlib.asynccontextmanager
async def readme_servers() -> AsyncIterator[Servers]:
    engine_config = EmulatorConfig(
        time_scale=400, engine=EngineConfig(scheduling_policy="priority")
    )
    async with serve_engine(engine_config) as engine:
        backend = BackendSpec(engine.base_url, kind="vllm", priority=True)
        async with serve_controller(ControllerConfig(port=0, backends=(backend,))) as url:
            yield Servers(engine.base_url, url)


async def run_snippet(code: str, server: str, cwd: Path) -> str:
    """Run ``code`` with the README's address replaced by ``server``'s; its standard output."""
    address = server.removeprefix("http://")
    script = cwd / "snippet.py"
    script.write_text(code.replace(README_ADDRESS, address))
    done = await anyio.run_process(
        [sys.executable, "-W", "error", str(script)], cwd=cwd, check=False
    )
    assert done.returncode == 0, f"{code}\n---\n{done.stderr.decode()[-3000:]}"
    return done.stdout.decode()


def test_the_readme_has_the_snippets_this_file_runs() -> None:
    found = snippets()
    assert len(found) == 4, len(found)
    assert all(README_ADDRESS in code for code in found)
    assert not any('model="M"' in code for code in found)


async def test_every_snippet_runs_against_the_controller(tmp_path: Path) -> None:
    outputs: dict[int, str] = {}
    async with readme_servers() as servers:

        async def one(index: int, code: str) -> None:
            cwd = tmp_path / f"snippet-{index}"
            cwd.mkdir()
            outputs[index] = await run_snippet(code, servers.controller, cwd)

        with anyio.fail_after(80):
            async with anyio.create_task_group() as group:
                for index, code in enumerate(snippets()):
                    group.start_soon(one, index, code)
    assert "flowchart" in outputs[0]  # the SDK snippet prints its program's DAG
    # LangChain, AutoGen and the Microsoft Agent Framework print their program's status first.
    assert all(outputs[index].startswith("ok ") for index in (1, 2, 3)), outputs


async def test_the_sdk_snippet_runs_against_the_engine_and_journals_where_the_cli_reads(
    tmp_path: Path,
) -> None:
    async with readme_servers() as servers:
        with anyio.fail_after(60):
            out = await run_snippet(snippets()[0], servers.engine, tmp_path)
    assert "flowchart" in out
    listing = await anyio.run_process(
        [*AGENTRT, "journal", "list", "--json"],
        cwd=tmp_path,
        check=False,
    )
    assert listing.returncode == 0, listing.stderr.decode()
    programs = json.loads(listing.stdout)
    assert len(programs) == 1, programs
