"""Subprocesses for the ops tests: a free loopback port, ``agentrt controller serve`` started
and awaited until ready, and the one way every test takes a child process down."""

from __future__ import annotations

import contextlib
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import IO

import anyio
import httpx
from anyio.abc import Process

#: The CLI run by the interpreter of the tests (no installed script needed).
AGENTRT = (sys.executable, "-m", "agentrt.cli")


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def reap(process: Process) -> None:
    """Kill ``process`` if it is still running, wait for it (at most 5 s) and close its pipes."""
    if process.returncode is None:
        process.kill()
    with anyio.move_on_after(5):
        await process.wait()
    await process.aclose()


@contextlib.asynccontextmanager
async def controller_process(
    backends: Sequence[str],
    *options: str,
    env: Mapping[str, str] | None = None,
    kind: str | None = "emulator",
    port: int | None = None,
) -> AsyncIterator[tuple[Process, str]]:
    """``agentrt controller serve`` in front of ``backends`` (base URLs, each given
    ``kind=<kind>`` unless ``kind`` is None) on ``port`` (None: a free one), scraping every
    0.2 s unless ``options`` say otherwise (a later flag wins); ``env`` None inherits ours.
    Yields the process and its URL once it printed its start-up line and ``/readyz`` answers
    200 (within 60 s, a loaded machine starts Python slowly; else ``TimeoutError``); reaped
    on exit."""
    port = free_port() if port is None else port
    command = [*AGENTRT, "controller", "serve", "--port", str(port),
               "--scrape-interval-s", "0.2", *options]  # fmt: skip
    for url in backends:
        command += ["--backend", url if kind is None else f"{url},kind={kind}"]
    # stderr goes to a file, not a pipe: a child whose pipe fills (64 KiB of warnings nobody
    # reads) blocks on its next log line, and a blocked controller answers nothing.
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
    process = await anyio.open_process(command, env=env, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        with anyio.fail_after(60):
            while b"agentrt controller on" not in _read(log):
                if process.returncode is not None:
                    raise RuntimeError(f"controller exited: {_read(log)[-2000:]!r}")
                await anyio.sleep(0.05)
            async with httpx.AsyncClient() as http:
                while (await http.get(url + "/readyz")).status_code != 200:  # noqa: ASYNC110 - over HTTP, no event to await
                    await anyio.sleep(0.05)
        try:
            yield process, url
        except BaseException:  # pytest shows what a failing test printed
            print(f"--- stderr of {' '.join(command)} (last 8 KiB):")
            print(_read(log)[-8192:].decode(errors="replace"))
            raise
    finally:
        await reap(process)
        log.close()


def _read(log: IO[bytes]) -> bytes:
    """Everything written to ``log`` so far."""
    log.seek(0)
    return log.read()
