"""Map-reduce: fan out over items in parallel threads (bounded), then reduce.

As Parrot deduces for such programs, the map calls form one group whose completion time is
what matters (each call tagged ``objective=throughput``), while the reduce call is on the
critical path (``objective=latency``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from agentrt.runtime.flow import Parallel
from agentrt.runtime.frame import CURRENT_FRAME, Frame
from agentrt.runtime.runtime import current_runtime

__all__ = ["map_reduce"]

T = TypeVar("T")
M = TypeVar("M")
R = TypeVar("R")


async def map_reduce(
    items: Sequence[T],
    map_fn: Callable[[T], Awaitable[M]],
    reduce_fn: Callable[[list[M]], Awaitable[R]],
    *,
    limit: int | None = 8,
) -> R:
    """``reduce_fn([map_fn(item) for item in items])`` with the maps run concurrently.

    Each ``map_fn`` call runs in its own thread (ids ``{thread}.0``, ``{thread}.1``, ... in
    item order), at most ``limit`` at once (None = all), its LLM calls tagged ``throughput``.
    ``reduce_fn`` then runs in the calling thread, after all maps (its calls' parents are the
    maps' last nodes), tagged ``latency``. Runs in the current program or a new
    ``map_reduce`` program. A failing map cancels the others and its error propagates.
    """
    frame = CURRENT_FRAME.get()
    if frame is None:
        async with current_runtime().program("map_reduce"):
            return await map_reduce(items, map_fn, reduce_fn, limit=limit)
    async with Parallel(limit=limit, objective="throughput") as par:
        branches = [par.start(map_fn, item) for item in items]
    mapped = [b.value for b in branches]
    latency = Frame(frame.run, frame.graph, frame.thread, frame.chain, "latency")
    token = CURRENT_FRAME.set(latency)
    try:
        return await reduce_fn(mapped)
    finally:
        CURRENT_FRAME.reset(token)
