"""``agentrt engine serve`` logs as the controller does: every stderr line starts with its ISO
8601 time (one logging setup, agentrt_serving/logs.py)."""

from __future__ import annotations

import re
import signal
import sys

import anyio
import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


async def test_every_stderr_line_of_the_served_emulator_is_timed() -> None:
    command = [sys.executable, "-m", "agentrt.cli", "engine", "serve", "--port", "0",
               "--log-level", "info"]  # fmt: skip
    process = await anyio.open_process(command)
    err = b""
    try:
        assert process.stderr is not None
        with anyio.fail_after(30):
            while b"Application startup complete" not in err:
                err += await process.stderr.receive()
            process.send_signal(signal.SIGTERM)
            async for chunk in process.stderr:
                err += chunk
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.move_on_after(5):
            await process.wait()
        await process.aclose()
    lines = err.decode().splitlines()
    assert any("agentrt engine emulator: http://" in line for line in lines), lines
    assert any("INFO uvicorn.error: Shutting down" in line for line in lines), lines
    assert all(_ISO.match(line.split(" ", 1)[0]) for line in lines), lines
