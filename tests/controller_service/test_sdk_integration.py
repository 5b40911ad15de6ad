"""Must-show: an SDK program runs through ``agentrt controller serve`` (a real subprocess) in
front of two emulated engines, and ``GET /agentrt/v1/programs`` shows it with its threads while
it runs."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import Process

import agentrt
from agentrt import Runtime, RuntimeConfig
from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from tests.ops.processes import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


async def _wait_healthy(url: str, proc: Process, log: Path) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(600):
            if proc.returncode is not None:
                raise AssertionError(f"controller exited: {await anyio.Path(log).read_text()}")
            try:
                if (await http.get(url + "/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await anyio.sleep(0.05)
    raise AssertionError("controller did not become healthy")


async def test_sdk_program_through_cli_controller_in_front_of_two_emulators(
    tmp_path: Path,
) -> None:
    engine = EngineConfig(scheduling_policy="priority", max_num_seqs=4)
    emulator = EmulatorConfig(engine=engine, time_scale=2.0)
    async with serve_engine(emulator) as first, serve_engine(emulator) as second:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_CONTROLLER_")}
        log = tmp_path / "controller.log"
        command = [sys.executable, "-m", "agentrt.cli", "controller", "serve"]
        command += ["--port", str(port), "--policy", "atlas", "--admission-window", "2"]
        # A 1 s probe limit: the engines share this test's event loop and may answer slowly.
        command += ["--scrape-interval-s", "1.0", "--router", "round_robin"]  # use both
        command += ["--backend", f"{first.base_url},priority=on"]
        command += ["--backend", f"{second.base_url},priority=on"]
        with log.open("wb") as log_file:
            proc = await anyio.open_process(command, stderr=log_file, env=env)
            try:
                await _wait_healthy(url, proc, log)
                seen = await _run_program_and_watch(url)
                async with httpx.AsyncClient() as http:
                    queues = (await http.get(url + "/agentrt/v1/queues")).json()
                    after = (await http.get(url + "/agentrt/v1/programs")).json()
            finally:
                proc.send_signal(signal.SIGINT)
                with anyio.fail_after(15):
                    await proc.wait()
    # While it ran, the process table showed the program with its parallel threads.
    assert seen["program"] is not None, "the program never showed up in the process table"
    threads = seen["program"]["threads"]
    assert len(threads) >= 3, threads  # main + two parallel branches at least
    assert seen["max_active"] >= 2
    # Both engines got work; at the end the table is empty and nothing is in flight.
    assert all(b["admitted_total"] > 0 for b in queues["backends"]), queues["backends"]
    assert all(b["in_flight"] == 0 for b in queues["backends"])
    assert after["programs"] == 0
    assert proc.returncode == 0


async def _run_program_and_watch(url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {"program": None, "max_active": 0}
    finished = anyio.Event()
    config = RuntimeConfig(base_url=url + "/v1", model=DEFAULT_MODEL_NAME, controller="required")

    async def program(rt: Runtime) -> str:
        async with rt.program("map-reduce", timeout_s=60) as prog:
            await agentrt.chat([{"role": "user", "content": "plan the work"}], max_tokens=16)

            async def branch(i: int) -> None:
                for step in range(2):
                    await agentrt.chat(
                        [{"role": "user", "content": f"chunk {i} step {step}"}], max_tokens=24
                    )

            async with agentrt.parallel() as par:
                for i in range(4):
                    par.start(branch, i)
            await agentrt.chat([{"role": "user", "content": "reduce"}], max_tokens=16)
            return prog.id

    async def watch() -> None:
        async with httpx.AsyncClient() as http:
            while not finished.is_set():
                table = (await http.get(url + "/agentrt/v1/programs")).json()
                for entry in table["entries"]:
                    active = len(entry["active_calls"])
                    if active >= seen["max_active"]:
                        seen["max_active"] = active
                        seen["program"] = entry
                await anyio.sleep(0.01)

    async with Runtime(config) as rt, anyio.create_task_group() as group:
        group.start_soon(watch)
        try:
            program_id = await program(rt)
        finally:
            finished.set()
    assert seen["program"] is None or seen["program"]["program_id"] == program_id
    return seen
