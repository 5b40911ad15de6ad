"""The controller's one clock, and how its core waits on it.

Every time the service feeds a policy (arrivals, admissions, finishes, program events,
retention windows, circuit breakers, call deadlines) comes from one :data:`Clock` passed into
:class:`~agentrt_controller.service.core.facade.ControllerCore`, so a test can drive the whole
service on a fake clock and the pure policies never read one themselves (docs/architecture.md,
"Design rules", rule 1). Transport bookkeeping that decides nothing for a policy (the HTTP
pool's idle connections, the backends' probe intervals) keeps its own monotonic reads.

The core's loops that wait for a moment of this clock (a call's deadline, the next program
expiry round) wait with :func:`sleep_until`: a clock that implements :class:`WaitableClock`
(:data:`MONOTONIC`, :class:`ScaledClock`, :class:`FakeClock`) decides how; any other callable
is waited on in real time, re-read until it reaches the moment.

In front of engine emulators that run ``X`` times faster than the GPU they model (``agentrt
engine serve --time-scale X``), the core runs on :class:`ScaledClock` (``controller serve
--time-scale X``, :func:`clock_for`): every time a policy measures or sets — a tool wait, a
retention TTL sent to the engine, an idle reservation's release, the program idle timeout —
is then in the engines' model seconds, as in the simulator, which runs the same policies on
model time. On the wall clock they would be ``X`` times too long against the engines and the
replayed trace.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import anyio

__all__ = [
    "MONOTONIC",
    "Clock",
    "FakeClock",
    "MonotonicClock",
    "ScaledClock",
    "WaitableClock",
    "clock_for",
    "sleep_until",
]

#: Seconds on a monotonic scale (any origin); only differences and comparisons mean anything.
Clock = Callable[[], float]


@runtime_checkable
class WaitableClock(Protocol):
    """A :data:`Clock` that can also wait until it shows a given moment."""

    def __call__(self) -> float:
        """Now, in seconds."""

    async def sleep_until(self, deadline_s: float) -> None:
        """Return once the clock reads ``deadline_s`` or later (``math.inf``: never).
        Cancellable."""


class MonotonicClock:
    """The service's real clock: :func:`time.monotonic`, waited on with anyio's sleep (same
    scale as the event loop's)."""

    #: ``time.monotonic`` itself: the core reads its clock several times per call, and a
    #: method wrapping it would add a Python frame to each read.
    __call__ = staticmethod(time.monotonic)

    async def sleep_until(self, deadline_s: float) -> None:
        await _sleep_in_real_time(self, deadline_s)


class ScaledClock:
    """:func:`time.monotonic` × ``scale``: the model seconds of engines emulated ``scale``
    times faster than real time (module doc); waited on in real time, ``1 / scale`` wall
    seconds per second of it."""

    def __init__(self, scale: float) -> None:
        if not (scale > 0 and math.isfinite(scale)):
            raise ValueError(f"a clock's scale must be a number > 0, got {scale!r}")
        self.scale = scale

    def __call__(self) -> float:
        return time.monotonic() * self.scale

    async def sleep_until(self, deadline_s: float) -> None:
        await _sleep_in_real_time(self, deadline_s, self.scale)


class FakeClock:
    """A clock that moves only when told (tests): :meth:`set` or :meth:`advance` it, and every
    :meth:`sleep_until` whose moment came returns at the next checkpoint — no real time
    passes. Event loop thread only."""

    def __init__(self, start_s: float = 0.0) -> None:
        self.now_s = start_s
        self._moved: anyio.Event | None = None

    def __call__(self) -> float:
        return self.now_s

    def set(self, now_s: float) -> None:
        """Move to ``now_s`` (seconds); raises :class:`ValueError` backwards."""
        if now_s < self.now_s:
            raise ValueError(f"a clock does not go back: {now_s} < {self.now_s}")
        self.now_s = now_s
        moved, self._moved = self._moved, None
        if moved is not None:
            moved.set()

    def advance(self, seconds: float) -> None:
        """Move forward by ``seconds`` (>= 0)."""
        self.set(self.now_s + seconds)

    async def sleep_until(self, deadline_s: float) -> None:
        while self.now_s < deadline_s:
            if self._moved is None:
                self._moved = anyio.Event()
            await self._moved.wait()


async def _sleep_in_real_time(clock: Clock, deadline_s: float, scale: float = 1.0) -> None:
    """Sleep until ``clock``, which runs ``scale`` times faster than real time, reads
    ``deadline_s``."""
    if math.isinf(deadline_s):
        await anyio.sleep_forever()
    # A clock we cannot wait on: sleep the difference, read again (an anyio timer may fire a
    # hair before the clock shows the moment).
    while (left_s := deadline_s - clock()) > 0:  # noqa: ASYNC110
        await anyio.sleep(left_s / scale)


async def sleep_until(clock: Clock, deadline_s: float) -> None:
    """Wait until ``clock`` reads ``deadline_s`` or later (``math.inf``: forever)."""
    if isinstance(clock, WaitableClock):
        await clock.sleep_until(deadline_s)
    else:
        await _sleep_in_real_time(clock, deadline_s)


#: The service's default clock.
MONOTONIC: Clock = MonotonicClock()


def clock_for(time_scale: float) -> Clock:
    """The core's clock for engines that run ``time_scale`` times faster than real time:
    :data:`MONOTONIC` at 1 (real engines), else a :class:`ScaledClock`."""
    return MONOTONIC if time_scale == 1.0 else ScaledClock(time_scale)
