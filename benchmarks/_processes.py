"""What the live benchmarks do with the subprocesses they start: a free loopback port, a
process's CPU time, stopping it (SIGTERM, then SIGKILL), and a server process started with its
output in a log and awaited until ready."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM ``proc`` if it still runs; SIGKILL it when it has not exited after ``grace_s``
    seconds. Returns once it exited."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_until(
    check: Callable[[], bool], what: str, proc: subprocess.Popen[bytes], timeout_s: float
) -> None:
    """Poll ``check()`` (an ``OSError`` counting as not yet) every 0.2 s until it is true;
    ``RuntimeError`` naming ``what`` if ``proc`` exits first or ``timeout_s`` pass."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what}: exited with status {proc.returncode}")
        with contextlib.suppress(OSError):
            if check():
                return
        time.sleep(0.2)
    raise RuntimeError(f"{what}: not ready after {timeout_s:.0f} s")


@contextlib.contextmanager
def server(
    argv: Sequence[str], ready: Callable[[], bool], what: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """A subprocess, its stdout and stderr into ``log``, yielded once ``ready()`` (within
    60 s); SIGTERM (then SIGKILL) on exit."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until(ready, what, proc, 60.0)
            yield proc
        finally:
            stop(proc)
