"""Routing's seams: the :class:`Router` a driver's Dispatcher asks, and the routing pipeline's
one one-method protocol per stage (filter → scorer → picker).

A :class:`~agentrt_controller.routing.pipeline.PipelineRouter` runs, for each call:

0. the model constraint (:meth:`Router.eligible`): only backends serving the call's model are
   candidates at all — never skipped, a call no candidate serves waits;
1. every :class:`Filter` in order — each narrows the candidate backends (a filter that
   would leave none is skipped for that call, so routing never fails for a filter's sake);
2. every :class:`Scorer` — each gives every remaining backend a score; the pipeline clamps
   scores to ``[0, 1]`` and adds them up, each multiplied by its configured weight;
3. the :class:`Picker` — chooses one backend from the weighted totals.

Stages that keep state (the prefix index, program affinity) are told what happened through
:class:`RouteObserver`. Every stage is pure: ``now_s`` comes in, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallEntry

__all__ = [
    "Filter",
    "Picker",
    "RouteObserver",
    "Router",
    "Scored",
    "Scorer",
    "backend_load",
    "clamp_score",
]


class Router(Protocol):
    """Chooses the backend for a call among those that may take it now."""

    name: str

    def eligible(
        self, call: CallEntry, candidates: Sequence[BackendView], now_s: float
    ) -> Sequence[BackendView]:
        """The ``candidates`` the call may go to at all: those serving its model
        (:class:`~agentrt_controller.routing.filters.ModelFilter`, a constraint no router
        skips). ``candidates`` itself when every one qualifies; empty = the call must wait
        for a backend of its model (the Dispatcher puts it back)."""

    def route(self, call: CallEntry, candidates: Sequence[BackendView], now_s: float) -> str:
        """Return the ``backend_id`` of one of ``candidates`` (never empty; the
        :meth:`eligible` ones)."""

    def on_finish(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        """A call routed to ``backend_id`` finished (for affinity / index upkeep)."""

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        """Forget a program's affinity."""


def clamp_score(value: float) -> float:
    """``value`` clamped to ``[0, 1]``; NaN counts as 0 (how a pipeline router bounds every
    scorer's answer before weighting it)."""
    if value != value:  # NaN
        return 0.0
    return 0.0 if value < 0 else 1.0 if value > 1 else float(value)


def backend_load(view: BackendView) -> int:
    """Outstanding calls on a backend: the controller's in-flight count plus the scraped
    waiting queue (``num_waiting``; unknown counts as 0). Our in-flight count is always fresh;
    the scrape adds what other clients queued there."""
    return view.in_flight + (view.num_waiting or 0)


@dataclass(frozen=True, slots=True)
class Scored:
    """A candidate and its weighted total score (sum over scorers of weight × score)."""

    backend: BackendView
    total: float


class Filter(Protocol):
    """Narrows the candidate backends for a call."""

    def filter(
        self, call: CallEntry, backends: Sequence[BackendView], now_s: float
    ) -> list[BackendView]:
        """The backends that remain (a subset of ``backends``, in their order)."""
        ...


class Scorer(Protocol):
    """Scores every candidate backend for a call; higher is better."""

    def score(self, call: CallEntry, backends: Sequence[BackendView], now_s: float) -> list[float]:
        """One score per backend, aligned with ``backends``. The pipeline clamps each to
        ``[0, 1]`` (NaN counts as 0) before weighting."""
        ...


class Picker(Protocol):
    """Chooses one backend from the scored candidates (never empty)."""

    def pick(self, call: CallEntry, scored: Sequence[Scored], now_s: float) -> str:
        """The ``backend_id`` of one of ``scored``."""
        ...


@runtime_checkable
class RouteObserver(Protocol):
    """State a router keeps up to date (prefix index, program affinity)."""

    def on_routed(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        """``call`` was routed to ``backend_id``."""

    def on_finish(self, call: CallEntry, backend_id: str, now_s: float) -> None:
        """``call`` finished on ``backend_id``; its ``block_hashes`` may now cover its prompt
        and output (the driver may extend them), i.e. what the next call will extend."""

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        """Forget the program."""
