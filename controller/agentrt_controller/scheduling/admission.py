"""Adaptive admission: a per-backend in-flight window steered by the backend's waiting queue.

Lever (b) of docs/scheduling.md ("The two levers"): the controller holds calls in its own queues and
admits one to a backend only while that backend has room. A window that is too small starves the
engine's batch; one too large moves the queue into the engine, where our program-level order is
lost.

:class:`AdaptiveWindowAdmission` aims at a *small* waiting queue inside the engine —
``target_waiting`` requests (scraped ``vllm:num_requests_waiting``) — so the engine always has
work to pull into its batch while the ordering decisions stay at the controller. AIMD, once per
new metrics sample of a backend (``BackendView.metrics_at_s``, or at most once per
``update_interval_s`` when the driver gives no sample time):

* ``num_waiting > target_waiting``: shrink by the excess, but by at most the multiplicative
  factor — ``window = max(min_window, window * decrease_factor, window - excess)`` with
  ``excess = num_waiting - target_waiting``. A small overshoot costs one slot (no AIMD
  sawtooth that periodically starves the batch); a flooded engine (e.g. other clients) still
  halves the window per sample;
* ``num_waiting <= target_waiting`` and the window is what limits us
  (``in_flight >= floor(window)``): ``window = min(max_window, window + increase_step)``; when
  ``in_flight`` is above every window so far — only a call of many sequences admitted alone
  on an idle backend does that (below), and the engine held it without queueing — it grows
  from ``in_flight`` instead of ``window``, so a small call fits beside it;
* otherwise (we are not using the window, or no metrics): unchanged.

**Slow start** (``slow_start``, on by default). Until a sample of a backend first shows its
waiting queue above ``target_waiting``, the increase is multiplicative instead:
``window = min(bound, max(2 * window, window + increase_step))`` — TCP's slow start (RFC 5681,
§3.1), with the scraped waiting queue for the lost packet. In front of a stock vLLM, which
publishes no batch size (bound ``max_window``, 256), the additive ramp from 8 takes ~90 scrapes
(1 s each) to reach 100 calls in flight, while the engine has idle batch slots and the calls
wait at the controller; doubling takes 4. The first sample above target ends it for good on
that backend (the shrink rule applies to that sample as before; AIMD from then on): the window
has then found the engine's capacity and stays near it — it neither grows nor shrinks while
it does not limit us, so an idle spell does not shrink it and needs no second ramp, while a
second ramp after each congestion would overshoot the batch by up to the window each time
and hand those calls to the engine's FCFS queue. Its cost is that one overshoot: the doubling
that first exceeds the engine's batch leaves up to half the window waiting in the engine for a
scrape, after which the window falls back by the excess (at most halving). It may also end
early: at tens of calls per second a scrape counts the calls that arrived during the engine's
current step as waiting, so one sample of a few ends it below the batch (32 or 64 in
docs/benchmarks.md, "Admission window ramp") — after the part of the ramp that costs.

**Bounded by the batch.** When the backend reports its batch size (``BackendView.max_num_seqs``:
our emulator and the simulator's engines do; vLLM exposes no such metric), the window never
exceeds ``max_num_seqs + target_waiting``: a call beyond that could only wait in the engine's
own (FCFS) queue, where the controller's order and anti-starvation no longer apply. Without it
(a stock vLLM) the AIMD rule alone bounds the window, between ``min_window`` and
``max_window``: it grows only while the engine's waiting queue is at or below
``target_waiting`` and shrinks as soon as it is above.

``has_room``: the backend is healthy and ``in_flight < floor(window)``. Pure: no clock, no I/O.

**Sequences, not calls.** ``in_flight`` and the window count sequences: a call with ``n`` = 8
holds 8 (``CallFacts.sequences``), as it holds 8 slots of the engine's batch and vLLM counts
its 8 requests in ``num_requests_running`` / ``num_requests_waiting``. The Dispatcher admits
such a call where the window has room for all of them, or where the backend is idle.

**Several controllers** (``count_other_load``, off by default). Controller replicas sharing a
backend each steer their own window by the same waiting queue, and each counts only its own
calls against it. With ``count_other_load`` a replica reads the others' requests from each new
sample — ``other_load = max(0, num_running + num_waiting - in_flight)``, kept until the next
sample (calls we admit after a scrape are not in its gauges) — and the window bounds the
backend's *total* load: ``has_room`` is ``in_flight + other_load < floor(window)`` (or
``in_flight < floor(min_window)``: every replica may always have that many calls), and the
window grows when that total is what limits. The replicas' windows then add up to about the
batch plus ``target_waiting``, with or without a reported batch size. Alone on a backend,
``other_load`` is 0 and nothing changes — up to scrape staleness: a scrape that still counts
our calls that have finished since reads as other load until the next one. What it does not
restore is the order across replicas (docs/simulator.md, "Controller replicas": it bounds the
load, not which replica's call takes a free slot).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from agentrt.errors import ConfigError
from agentrt_controller.config_check import SECTION, check_fields, parse_section
from agentrt_controller.scheduling.api import BackendView

__all__ = ["AdaptiveWindowAdmission", "AdaptiveWindowConfig"]


@dataclass(frozen=True, slots=True)
class AdaptiveWindowConfig:
    """AIMD parameters (the ``admission`` section); validated on construction
    (:class:`ConfigError`)."""

    __pydantic_config__ = SECTION

    #: Window of a backend before its first sample (sequences, >= min_window).
    initial_window: float = 8.0
    #: Smallest window (sequences, >= 1).
    min_window: Annotated[float, Field(ge=1)] = 1.0
    #: Largest window (sequences, >= initial_window).
    max_window: Annotated[float, Field(allow_inf_nan=False)] = 256.0
    #: Engine-side waiting requests we aim for (>= 0).
    target_waiting: Annotated[int, Field(ge=0)] = 2
    #: Additive increase per sample (sequences, > 0).
    increase_step: Annotated[float, Field(gt=0)] = 1.0
    #: Largest decrease per sample, as a factor in (0, 1).
    decrease_factor: Annotated[float, Field(gt=0, lt=1)] = 0.5
    #: Without ``metrics_at_s``, react at most this often (seconds, > 0).
    update_interval_s: Annotated[float, Field(gt=0)] = 1.0
    #: Count other clients' requests (other controller replicas sharing the backend: the
    #: scraped ``num_running + num_waiting`` minus our ``in_flight``) against the window, which
    #: then bounds the backend's total load. See "Several controllers" above.
    count_other_load: bool = False
    #: Slow start: double the window (instead of adding ``increase_step``) until a sample first
    #: shows the backend's waiting queue above ``target_waiting``. See "Slow start" above.
    slow_start: bool = True

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.min_window <= self.initial_window <= self.max_window:
            raise ConfigError(
                "need min_window <= initial_window <= max_window, got "
                f"{self.min_window}, {self.initial_window}, {self.max_window}"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> AdaptiveWindowConfig:
        """From a config table; unknown keys raise :class:`ConfigError`."""
        return parse_section(cls, values, "admission")


@dataclass(slots=True)
class _BackendWindow:
    window: float
    #: The largest window so far (sequences): calls of one sequence never put more in flight.
    high_water: float
    #: Sample time of the last update (``metrics_at_s``) or decision time without one.
    last_sample_s: float = -math.inf
    #: Other clients' requests on the backend at the last sample (sequences, >= 0); always 0
    #: without ``count_other_load``.
    other_load: int = 0
    #: Slow start is over: a sample has shown the waiting queue above ``target_waiting``.
    congested: bool = False


class AdaptiveWindowAdmission:
    """Implements :class:`~agentrt_controller.scheduling.api.AdmissionPolicy`; see the module
    doc."""

    name = "adaptive"

    def __init__(self, config: AdaptiveWindowConfig | None = None) -> None:
        self.config = config if config is not None else AdaptiveWindowConfig()
        self._windows: dict[str, _BackendWindow] = {}

    def has_room(self, backend: BackendView, now_s: float) -> bool:
        state = self._observe(backend, now_s)
        if not backend.healthy:
            return False
        load = backend.in_flight + state.other_load
        # With other clients counted, min_window still lets us have calls of our own (the
        # window is never below it, so without them this is the window alone).
        return load < math.floor(state.window) or backend.in_flight < math.floor(
            self.config.min_window
        )

    def answer_fixed_by_view(self, backend: BackendView) -> bool:
        """For a view with a scrape time (the window reacts once per ``metrics_at_s``) or
        without a waiting count (it cannot react): the window changes only when asked about
        another view of the backend. Without a scrape time it reacts on the clock
        (``update_interval_s``)."""
        return backend.metrics_at_s is not None or backend.num_waiting is None

    def bound(self, backend: BackendView) -> float:
        """The largest window for ``backend`` (sequences): ``max_window``, or its batch size plus
        ``target_waiting`` when smaller and known."""
        cfg = self.config
        if backend.max_num_seqs is None or backend.max_num_seqs < 1:
            return cfg.max_window
        return max(cfg.min_window, min(cfg.max_window, backend.max_num_seqs + cfg.target_waiting))

    def window(self, backend_id: str) -> float:
        """The backend's current window (sequences); the initial one for an unseen backend."""
        state = self._windows.get(backend_id)
        return state.window if state is not None else self.config.initial_window

    def in_slow_start(self, backend_id: str) -> bool:
        """Whether the backend's window still doubles (``slow_start`` on and no sample of it
        has shown its waiting queue above ``target_waiting``); read-only, for the metrics."""
        state = self._windows.get(backend_id)
        return self.config.slow_start and (state is None or not state.congested)

    def snapshot(self) -> dict[str, Any]:
        """JSON-able windows by backend id."""
        return {"policy": self.name, "windows": {b: s.window for b, s in self._windows.items()}}

    def _observe(self, backend: BackendView, now_s: float) -> _BackendWindow:
        cfg = self.config
        state = self._windows.get(backend.backend_id)
        bound = self.bound(backend)
        if state is None:
            initial = min(cfg.initial_window, bound)
            state = self._windows[backend.backend_id] = _BackendWindow(initial, initial)
        state.window = min(state.window, bound)  # the batch size may appear after a scrape
        waiting = backend.num_waiting
        if waiting is None:
            return state
        if backend.metrics_at_s is not None:
            if backend.metrics_at_s <= state.last_sample_s:
                return state  # this sample was already acted on
            state.last_sample_s = backend.metrics_at_s
        else:
            if now_s - state.last_sample_s < cfg.update_interval_s:
                return state
            state.last_sample_s = now_s
        if cfg.count_other_load and backend.num_running is not None:
            state.other_load = max(0, backend.num_running + waiting - backend.in_flight)
        if waiting > cfg.target_waiting:
            state.congested = True
            excess = waiting - cfg.target_waiting
            shrunk = max(state.window * cfg.decrease_factor, state.window - excess)
            state.window = max(cfg.min_window, shrunk)
        elif backend.in_flight + state.other_load >= math.floor(state.window):
            base = state.window
            if backend.in_flight > state.high_water:
                # Only a call of many sequences admitted alone on an idle backend puts more of
                # ours in flight than the window ever was; the engine held them without
                # queueing: grow from there, so a small call fits beside it.
                base = max(base, backend.in_flight)
            grown = base + cfg.increase_step
            if cfg.slow_start and not state.congested:
                grown = max(grown, 2 * base)
            state.window = min(bound, grown)
        state.high_water = max(state.high_water, state.window)
        return state
