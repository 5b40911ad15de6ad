"""Shared by the peers benchmark's tests."""

from __future__ import annotations

import asyncio
from typing import Any


async def until_answering(load: Any, port: int) -> None:
    """Wait until a call to ``port`` succeeds (``load`` = ``benchmarks/_peers_load``): a
    process started a moment ago on a loaded machine may take seconds to listen. Raises
    ``AssertionError`` after 20 s."""
    for _ in range(400):
        try:
            await load.latencies(port, 1, warmup=0)
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"port {port} did not start")
