"""How long the test's event loop was held up, for tests that time a server in the same loop.

A shared CI machine stalls a test process now and then (a second or so without a core, or
stopped outright). A server embedded in the test's event loop cannot run its timers then
either: a timeout of 0.5 s whose moment falls in a stall of 0.8 s fires 1.3 s after it was
set, and a test asserting "closed within 1 s" fails although the server did everything right.
:class:`LoopStalls` measures those hold-ups, so that such a test bounds the time the loop
*could run* (:meth:`LoopStalls.clock`) as tightly as it bounded wall time before, and a
timeout that fires late, or never, still fails it. A lower bound ("not closed before the
timeout") stays on wall time: a stall only lengthens that.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class LoopStalls:
    """The time the running event loop was held up, from construction to the ``with`` block's
    end: a callback every ``tick_s`` seconds notes how late the loop ran it, and lateness over
    ``min_stall_s`` (a stall, not the loop's usual jitter) adds up in :attr:`stalled_s`. A
    stalled process, a starved core or code blocking the loop delay every other timer of the
    loop — a server's timeouts among them — as they delay this one.
    """

    def __init__(self, tick_s: float = 0.005, min_stall_s: float = 0.01) -> None:
        self._loop = asyncio.get_running_loop()
        self._tick_s = tick_s
        self._min_stall_s = min_stall_s
        self.stalled_s = 0.0
        self._due = self._loop.time() + tick_s
        self._handle = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        now = self._loop.time()
        if now - self._due > self._min_stall_s:
            self.stalled_s += now - self._due
        self._due = now + self._tick_s
        self._handle = self._loop.call_at(self._due, self._tick)

    def clock(self) -> float:
        """The loop's clock (``time.monotonic``) less the stalls so far: a clock that stands
        still while the loop is held up."""
        return self._loop.time() - self.stalled_s

    def __enter__(self) -> LoopStalls:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._handle.cancel()
