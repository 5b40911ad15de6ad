"""The engine loop: drives the pure :class:`EngineCore` in (scaled) real time.

One task (:meth:`EngineDriver.run`, started in the app's lifespan task group) repeats:
step the core at model time ``start``, sleep until the step's modelled end has come on the
scaled wall clock, then deliver each request's new tokens to its group's stream. HTTP
handlers submit request groups (one engine request per choice) and read their events.

Model time: ``model_now = (monotonic() - start) · time_scale``, never moving backwards. The
core never reads a clock; only this module does.

**An absolute schedule.** While the engine has work, a step starts at the model time the
previous one *ended*, not at the wall clock's "now" after it: the loop's own CPU time (the
core's step, delivering tokens, the HTTP handlers and streams sharing the event loop) and the
timer's overshoot are absorbed as long as the process keeps up, instead of each adding
``time_scale`` × its wall time of idle GPU to every step. Were each step started at "now", a
millisecond of overhead per step would cost 10 ms of model time per step at ``--time-scale
10`` — on decode steps of ~10 ms, latencies doubled. A step only starts at "now" after the
engine was idle (no work, or blocked by pins), or when the loop has fallen more than
``max_lag_wall_s`` behind its schedule (CPU starvation): it then gives up the missed time
(counted in ``agentrt_engine_schedule_resets_total`` and
``agentrt_engine_dropped_model_seconds_total``) rather than replaying it in a burst. The lag
with which each step's tokens are delivered (wall time past the step's modelled end, in model
seconds) is observed in ``agentrt_engine_delivery_lag_seconds``: near zero means the emulator
kept up and its latencies are the model's.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agentrt.errors import EngineError, InvalidRequest
from agentrt_emulator.core.engine import EngineCore
from agentrt_emulator.core.types import EngineRequest, StepResult
from agentrt_emulator.server.metrics import ServerMetrics

__all__ = ["ChoiceEvent", "EngineDriver", "RequestGroup"]

_log = logging.getLogger(__name__)

# Fused decode iterations per core.step() call, at most.
_MAX_FUSED_STEPS = 256
# Wall time to wait before retrying when the core had nothing it could schedule (seconds).
_STALL_WAIT_S = 0.001


@dataclass(frozen=True, slots=True)
class ChoiceEvent:
    """Progress of one choice of a request group."""

    #: Index of the engine request inside its group.
    index: int
    #: Output tokens generated so far (cumulative).
    num_tokens: int
    #: Prompt tokens served from the prefix cache.
    num_cached_tokens: int
    finished: bool
    #: Set when the engine failed the request; the group is then over.
    error: str | None = None


@dataclass(slots=True)
class _Tracked:
    group: RequestGroup
    index: int
    arrival_s: float
    finish_reason: str
    num_tokens: int = 0
    scheduled: bool = False
    finished: bool = False
    #: Model time its first output token was delivered (``None`` before).
    first_token_s: float | None = None


class RequestGroup:
    """The engine requests of one HTTP request (``n`` choices × prompts) and their events."""

    def __init__(self, request_ids: Sequence[str]) -> None:
        self.request_ids = tuple(request_ids)
        send, receive = anyio.create_memory_object_stream[ChoiceEvent](math.inf)
        self._send: MemoryObjectSendStream[ChoiceEvent] = send
        #: Events in delivery order; ends when the group is closed.
        self.events: MemoryObjectReceiveStream[ChoiceEvent] = receive

    def _push(self, event: ChoiceEvent) -> None:
        # A reader that left closed the stream; the driver aborts the rest of the group.
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._send.send_nowait(event)

    def _close(self) -> None:
        self._send.close()
        self.events.close()


class EngineDriver:
    """Owns the core's clock and delivers its progress. One per server."""

    def __init__(
        self,
        core: EngineCore,
        metrics: ServerMetrics,
        *,
        time_scale: float,
        fuse_window_wall_s: float = 0.002,
        max_lag_wall_s: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = core
        self.metrics = metrics
        self._time_scale = time_scale
        self._fuse_window_s = fuse_window_wall_s * time_scale
        self._max_lag_s = max_lag_wall_s * time_scale
        self._clock = clock
        self._start = clock()
        self._last_now = 0.0
        # Model time the last step ended while the engine stayed busy; None after idling.
        self._busy_until: float | None = None
        self._tracked: dict[str, _Tracked] = {}
        self._wake = anyio.Event()
        self._next_id = 0

    # -- clock --------------------------------------------------------------------------------

    def now_s(self) -> float:
        """Current model time (seconds since the server started, scaled; monotonic)."""
        now = (self._clock() - self._start) * self._time_scale
        self._last_now = max(self._last_now, now)
        return self._last_now

    def _wall_until(self, model_s: float) -> float:
        return max(0.0, (model_s - self.now_s()) / self._time_scale)

    # -- submission ---------------------------------------------------------------------------

    def new_request_id(self, prefix: str) -> str:
        self._next_id += 1
        return f"{prefix}-{self._next_id}"

    @contextmanager
    def submit(
        self, requests: Sequence[EngineRequest], finish_reasons: Sequence[str]
    ) -> Iterator[RequestGroup]:
        """Add ``requests`` to the core; on exit abort whichever have not finished.

        Raises :class:`InvalidRequest` (nothing stays submitted) when the core refuses one.
        """
        group = RequestGroup([r.request_id for r in requests])
        added: list[str] = []
        try:
            for index, (request, reason) in enumerate(zip(requests, finish_reasons, strict=True)):
                self.core.add_request(request)
                added.append(request.request_id)
                self._tracked[request.request_id] = _Tracked(
                    group, index, request.arrival_s, reason
                )
            self.wake()
            yield group
        finally:
            for request_id in added:
                tracked = self._tracked.pop(request_id, None)
                if tracked is not None and not tracked.finished:
                    self.core.abort_request(request_id)
                    self.metrics.aborted += 1
                    self.wake()
            group._close()

    # -- the loop -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Step the core forever (cancel the task to stop)."""
        while True:
            if not self.core.has_unfinished():
                self._busy_until = None
                await self._wait_for_work(math.inf)
                continue
            now = self._step_start()
            try:
                self.core.expire_pins(now)
                result = self.core.step(
                    now, max_steps=_MAX_FUSED_STEPS, horizon_s=self._fuse_window_s
                )
            except (InvalidRequest, EngineError, ArithmeticError, LookupError, ValueError) as exc:
                _log.exception("engine step failed; failing the requests in flight")
                self._fail_all(f"engine step failed: {exc}")
                await anyio.lowlevel.checkpoint()
                continue
            if result is None:
                # Waiting requests are blocked by pinned memory: nothing changes before the
                # next pin expiry, an unpin, an abort or a new request.
                self._busy_until = None
                await self._wait_for_work(self.core.next_pin_expiry_s)
                continue
            end = now + result.duration_s
            await anyio.sleep(self._wall_until(end))
            self.metrics.delivery_lag.observe(max(0.0, self.now_s() - end))
            self.metrics.busy_model_s += result.duration_s
            self._busy_until = end
            self._deliver(result, start_s=now, end_s=end)

    def _step_start(self) -> float:
        """Model time the next step starts: where the previous one ended while the engine
        stayed busy (the absolute schedule), else now; a lag beyond ``max_lag_wall_s`` is
        given up (see the module docstring)."""
        now = self.now_s()
        if self._busy_until is None:
            return now
        lag = now - self._busy_until
        if lag <= self._max_lag_s:
            return self._busy_until
        self.metrics.schedule_resets += 1
        self.metrics.dropped_model_s += lag
        return now

    def wake(self) -> None:
        """Tell the loop that the core changed (new request, abort, unpin)."""
        self._wake.set()

    async def _wait_for_work(self, until_model_s: float) -> None:
        self._wake = anyio.Event()
        timeout = self._wall_until(until_model_s) if until_model_s < math.inf else math.inf
        with anyio.move_on_after(max(timeout, _STALL_WAIT_S)):
            await self._wake.wait()

    def _deliver(self, result: StepResult, *, start_s: float, end_s: float) -> None:
        # Latencies end when the tokens are handed over: the step's modelled end, or later when
        # the loop lags (a request that arrived during the lag joined a step whose modelled
        # start is before its arrival; counting from the step's end would hide the lag).
        delivered_s = max(end_s, self.now_s())
        if result.num_steps:
            computed = sum(p.num_computed_tokens for p in result.progress)
            self.metrics.iteration_tokens.observe(computed / result.num_steps)
        for progress in result.progress:
            tracked = self._tracked.get(progress.request_id)
            if tracked is None:
                continue  # aborted while the step ran
            if not tracked.scheduled:
                tracked.scheduled = True
                self.metrics.queue_time.observe(max(0.0, start_s - tracked.arrival_s))
            if progress.first_token:
                tracked.first_token_s = delivered_s
                self.metrics.ttft.observe(delivered_s - tracked.arrival_s)
            tracked.num_tokens += progress.new_tokens
            if progress.finished:
                tracked.finished = True
                self.metrics.e2e.observe(delivered_s - tracked.arrival_s)
                if tracked.first_token_s is not None and tracked.num_tokens > 1:
                    decode_s = delivered_s - tracked.first_token_s
                    self.metrics.tpot.observe(decode_s / (tracked.num_tokens - 1))
                reason = tracked.finish_reason
                self.metrics.success[reason] = self.metrics.success.get(reason, 0) + 1
            if progress.new_tokens or progress.finished:
                tracked.group._push(
                    ChoiceEvent(
                        tracked.index,
                        tracked.num_tokens,
                        progress.num_cached_tokens,
                        progress.finished,
                    )
                )

    def _fail_all(self, message: str) -> None:
        for request_id, tracked in list(self._tracked.items()):
            if tracked.finished:
                continue
            tracked.finished = True
            try:
                self.core.abort_request(request_id)
            except (EngineError, LookupError, ValueError):
                _log.exception("abort after a failed step failed too")
            tracked.group._push(
                ChoiceEvent(tracked.index, tracked.num_tokens, 0, True, error=message)
            )
