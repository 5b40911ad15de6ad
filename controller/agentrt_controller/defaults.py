"""The one table of defaults that ``agentrt controller serve`` and ``agentrt bench sim`` share.

:class:`~agentrt_controller.service.config.ControllerConfig` takes its policy fields from here,
and so do the simulator's command line and its ``PolicySpec`` (``agentrt_sim.registry``), so
what a user gets with no flags is what the simulated benchmarks measured (a test asserts the
two parse to the same values). Why each value is the default, with the figures, is in
docs/controller.md ("Configuration", "Why these defaults").

* **Program-level scheduling on**: :data:`POLICY` orders calls by program (Autellix,
  arXiv 2502.13965, §4).
* **The waiting is held in the controller's queues**: the adaptive admission window
  (:mod:`agentrt_controller.scheduling.admission`) keeps a backend's own waiting queue near
  :data:`ADMISSION` ``target_waiting`` and never lets the window exceed the backend's batch
  size (when the backend reports it) plus that target. A fixed window larger than the batch
  hands the ordering back to the engine's FCFS queue; ``unlimited`` does so entirely. It
  starts in slow start (``AdaptiveWindowConfig.slow_start``): doubling per scrape until the
  backend first queues more than the target, so a burst in front of a stock vLLM (no batch
  size published: bound 256) is let in within seconds, not minutes.
* **One charge**: the simulator charges a call's service with the controller's default cost
  model (:data:`COST`), so a program's attained service, and hence its PLAS queue, is the same
  number in both.
* **Safe against a stock vLLM**: :data:`PRIORITY` is ``off`` — vLLM runs FCFS and rejects a
  request ``priority`` unless started with ``--scheduling-policy priority`` (pass
  ``priority=auto`` or ``on`` per backend for such a server). The simulator's default engine
  queue order (:data:`ENGINE_POLICY`) is the FCFS of such a server.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal

from agentrt_controller.admission_window import AdmissionWindow, window_label

__all__ = [
    "ADMISSION",
    "ADMISSION_WINDOW",
    "COST",
    "ENGINE_POLICY",
    "POLICY",
    "PRIORITY",
    "RETENTION",
    "ROUTER",
    "SCHEDULING",
    "describe",
]

#: Scheduling policy (``agentrt_controller.scheduling.factory.build_scheduler``).
POLICY: Final = "plas"
#: Scheduler parameters over :class:`~agentrt_controller.scheduling.config.SchedulerConfig`'s
#: own defaults (queue boundaries 0.5, 2, 8, 32 s; quanta 16 ... 256 tokens).
SCHEDULING: Final[Mapping[str, Any]] = MappingProxyType({})
#: Per-backend admission window: ``"adaptive"`` (sized from the backend), ``N`` calls or
#: ``None`` (unlimited).
ADMISSION_WINDOW: Final[AdmissionWindow] = "adaptive"
#: Parameters of the adaptive window over
#: :class:`~agentrt_controller.scheduling.admission.AdaptiveWindowConfig`'s own defaults.
ADMISSION: Final[Mapping[str, Any]] = MappingProxyType({})
#: Router (``agentrt_controller.routing.factory.build_router``).
ROUTER: Final = "prefix"
#: KV retention during tool waits (Continuum, arXiv 2511.02230): ``on`` or ``off``.
RETENTION: Final = "on"
#: Cost model parameters over :class:`~agentrt_controller.cost_model.CostModel`'s own defaults
#: (1e-4 s per prefilled prompt token, 1e-2 s per generated token): the service a call is
#: charged, which orders programs under PLAS / ATLAS. ``agentrt bench sim`` charges the same
#: unless told otherwise (``--cost``).
COST: Final[Mapping[str, Any]] = MappingProxyType({})
#: Send the scheduler's priority to backends (``on`` / ``off`` / ``auto`` per backend).
PRIORITY: Final[bool | Literal["auto"]] = False
#: The simulated engines' queue order matching :data:`PRIORITY`: a stock (FCFS) server.
ENGINE_POLICY: Final = "fcfs"


def describe(
    *,
    policy: str,
    admission_window: AdmissionWindow,
    router: str,
    retention: str,
    priority: str,
) -> str:
    """The one-line summary the controller's start-up line and the benchmarks print."""
    window = window_label(admission_window)
    return (
        f"policy={policy} window={window} router={router} retention={retention} priority={priority}"
    )
