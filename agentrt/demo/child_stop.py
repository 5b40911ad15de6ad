"""How the demo's child processes (engines, controller) know to stop."""

from __future__ import annotations

import os
import signal
import sys

import anyio
from anyio.abc import TaskGroup

__all__ = ["stop_group_on_signal_or_eof"]


def stop_group_on_signal_or_eof(group: TaskGroup) -> None:
    """Cancel ``group`` on SIGINT / SIGTERM or when stdin closes (the demo ended or died, so no
    orphan outlives it)."""

    async def stop_on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                group.cancel_scope.cancel()

    async def stop_on_stdin_eof() -> None:
        fd = sys.stdin.fileno()
        while True:
            await anyio.wait_readable(fd)
            if not os.read(fd, 4096):
                group.cancel_scope.cancel()
                return

    group.start_soon(stop_on_signal)
    group.start_soon(stop_on_stdin_eof)
