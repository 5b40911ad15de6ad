"""Must-show: every example runs with only ``--base-url`` — no ``--model`` — against a real
server, and every LLM call it makes carries its program, thread and node tags.

A small recording proxy (a real HTTP server on loopback) sits in front of the engine emulator
(and, in a second variant, in front of a controller in front of it); each example in
``examples/`` runs as a subprocess pointed at ``<proxy>/v1``, and the proxy keeps the method,
path and headers of every request it forwarded.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt.protocol import HEADER_NODE_ID, HEADER_PROGRAM_ID, HEADER_THREAD_ID
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_emulator.server import EmulatorConfig, serve_engine
from tests.backends.servers import request_body, serve_app
from tests.ops.processes import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: Each example and the arguments that keep it short (never ``--model``).
RUNS: dict[str, list[str]] = {
    "react_agent.py": ["--max-steps", "3"],
    "map_reduce_summarize.py": ["--chunk-chars", "4000"],
    "mcts_puzzle.py": ["--iterations", "2", "--n", "2", "--depth", "2"],
    "plan_and_verify.py": ["--steps", "2"],
    "langgraph_react.py": ["--max-llm-calls", "3"],
    "autogen_assistant.py": ["--max-tool-iterations", "1"],
    "openai_agents_assistant.py": ["--max-turns", "3"],
    "pydantic_ai_assistant.py": ["--max-requests", "3"],
    "agent_framework_assistant.py": ["--max-tool-iterations", "1"],
}

#: Paths of LLM calls (chat completions, completions, the Responses API).
LLM_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class RecordingProxy:
    """An ASGI app forwarding every request to ``upstream`` (streamed both ways) and keeping
    what it forwarded in ``records``."""

    upstream: str
    records: list[Recorded] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await request_body(receive)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.records.append(Recorded(scope["method"], scope["path"], headers))
        forwarded = {k: v for k, v in headers.items() if k not in ("host", "content-length")}
        url = self.upstream + scope["path"]
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        async with httpx.AsyncClient(timeout=60) as http:
            request = http.build_request(scope["method"], url, headers=forwarded, content=body)
            response = await http.send(request, stream=True)
            try:
                await send(
                    {
                        "type": "http.response.start",
                        "status": response.status_code,
                        "headers": [
                            (k.encode("latin-1"), v.encode("latin-1"))
                            for k, v in response.headers.items()
                            if k.lower() not in ("content-length", "transfer-encoding")
                        ],
                    }
                )
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            finally:
                await response.aclose()

    def llm_calls(self) -> list[Recorded]:
        return [r for r in self.records if r.method == "POST" and r.path.endswith(LLM_PATHS)]


@contextlib.asynccontextmanager
async def upstream(kind: str) -> AsyncIterator[str]:
    """The server the proxies forward to: an emulator, or a controller in front of one."""
    async with serve_engine(EmulatorConfig(time_scale=400)) as engine:
        if kind == "emulator":
            yield engine.base_url
            return
        config = ControllerConfig(port=0, backends=(BackendSpec(engine.base_url),))
        async with serve_controller(config) as url:
            yield url


async def run_example(script: str, base_url: str, cwd: Path) -> tuple[int, str, str]:
    command = [sys.executable, "-W", "error", str(EXAMPLES / script), "--base-url", base_url]
    command += RUNS[script]
    done = await anyio.run_process(command, cwd=cwd, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.mark.parametrize("kind", ["emulator", "controller"])
async def test_every_example_runs_with_only_a_base_url(kind: str, tmp_path: Path) -> None:
    assert sorted(RUNS) == sorted(p.name for p in EXAMPLES.glob("[!_]*.py")), "an example unrun"
    results: dict[str, tuple[int, str, str]] = {}
    proxies = {script: RecordingProxy("") for script in RUNS}
    async with upstream(kind) as target, contextlib.AsyncExitStack() as stack:
        urls = {}
        for script, proxy in proxies.items():
            proxy.upstream = target
            urls[script] = await stack.enter_async_context(serve_app(proxy))

        async def one(script: str) -> None:
            cwd = tmp_path / script.removesuffix(".py")
            cwd.mkdir()
            results[script] = await run_example(script, urls[script] + "/v1", cwd)

        with anyio.fail_after(80):
            async with anyio.create_task_group() as group:
                for script in RUNS:
                    group.start_soon(one, script)
    for script, (status, out, err) in results.items():
        assert status == 0, f"{script} exited {status}:\n{err[-3000:]}"
        assert "model: agentrt/emulated-llama-3.1-8b" in err, f"{script}: {err[-1000:]}"
        calls = proxies[script].llm_calls()
        assert calls, f"{script} made no LLM call through the proxy"
        models = [r for r in proxies[script].records if r.path == "/v1/models"]
        assert models, f"{script} did not ask the server for its model"
        for call in calls:
            for header in (HEADER_PROGRAM_ID, HEADER_THREAD_ID, HEADER_NODE_ID):
                assert call.headers.get(header.lower()), (script, call.path, header, call.headers)
        programs = {c.headers[HEADER_PROGRAM_ID.lower()] for c in calls}
        assert all(p.startswith("p-") for p in programs), (script, programs)
        assert "(embedded emulator" not in out, script


async def test_every_example_says_in_its_help_where_the_model_comes_from() -> None:
    helps: dict[str, str] = {}

    async def one(script: str) -> None:
        done = await anyio.run_process([sys.executable, str(EXAMPLES / script), "--help"])
        helps[script] = " ".join(done.stdout.decode().split())

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            for script in RUNS:
                group.start_soon(one, script)
    for script, text in helps.items():
        assert "default: the one the server serves, from GET <base-url>/models" in text, script
        assert "--base-url URL OpenAI-compatible endpoint ending in /v1" in text, script


async def test_an_example_pointed_at_nothing_says_where_and_what_to_check() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [sys.executable, str(EXAMPLES / "react_agent.py"), "--base-url", url], check=False
        )
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert f"error: cannot connect to {url}: is the server running?" in err
    assert "Traceback" not in err, err
