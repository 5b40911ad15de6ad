"""What the live benchmarks do with the subprocesses they start: a free loopback port, a
process's CPU time, and stopping it (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import os
import socket
import subprocess
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
