"""How the demo's child processes (engines, controller) run, fail and know to stop."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from agentrt.errors import AgentrtError

__all__ = ["child_main", "stop_group_on_signal_or_eof"]


def child_main(
    label: str, serve: Callable[[dict[str, Any]], Awaitable[None]], argv: list[str] | None
) -> int:
    """Run ``serve`` on the child's JSON options (the first argument); exit status 0 when it
    stops, 2 with ``agentrt demo <label>: <message>`` on stderr for bad options or errors."""
    args = sys.argv[1:] if argv is None else argv
    try:
        anyio.run(serve, json.loads(args[0]))
    except (AgentrtError, LookupError, ValueError, TypeError) as exc:
        print(f"agentrt demo {label}: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


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
