"""Clairvoyant SRPT at program level — a bound for the simulator, never for the service.

Shortest remaining processing time: the queued call whose program has the least remaining service
(:attr:`OracleFigures.program_remaining_s`, which includes the call itself) goes first; ties by
the call's own service (:attr:`OracleFigures.service_s`), then deadline, then submission order.
It needs the future, which only a simulator knows (Autellix arXiv 2502.13965, Fig. 18;
docs/scheduling.md): the figures come from an :data:`SrptOracle` the simulator gives
:func:`~agentrt_controller.scheduling.factory.build_scheduler`, which refuses to build SRPT
without one; :meth:`SrptScheduler.submit` rejects calls the oracle has no figures for. The
controller never has an oracle, so it never builds SRPT.

The backend priority is the queue index of the remaining service under the configured
boundaries (so a priority-aware engine agrees with the controller's order). Quanta do not demote.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from agentrt.errors import ConfigError
from agentrt_controller.process_table import ProcessTable, ProgramEntry
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.scheduling.multilevel import MultiLevelScheduler

__all__ = ["OracleBook", "OracleFigures", "SrptOracle", "SrptScheduler"]


@dataclass(frozen=True, slots=True)
class OracleFigures:
    """The true figures of one call, known only to a simulator."""

    #: The call's own service (seconds); ``None`` = unknown (ties as 0).
    service_s: float | None
    #: The remaining service of the call's program, this call included (seconds);
    #: ``None`` = unknown (refused at submission).
    program_remaining_s: float | None


#: Call id -> its true figures; ``None`` = the oracle knows nothing of that call. Asked when
#: a call is submitted and when it is requeued (a driver that preempts updates its answer to
#: get preemptive SRPT).
SrptOracle = Callable[[str], OracleFigures | None]


@dataclass(slots=True)
class OracleBook:
    """An :data:`SrptOracle` its driver fills: the figures per call id, written when the
    driver creates a call (and updated if it preempts), dropped when the call is done."""

    #: Call id -> its true figures.
    figures: dict[str, OracleFigures] = field(default_factory=dict)

    def __call__(self, call_id: str) -> OracleFigures | None:
        return self.figures.get(call_id)


class SrptScheduler(MultiLevelScheduler):
    """Program-level SRPT on oracle figures. A requeued call is re-keyed by the oracle's
    (possibly updated) ``program_remaining_s``, so drivers that preempt get preemptive SRPT."""

    name = "srpt"

    def __init__(
        self,
        oracle: SrptOracle,
        config: SchedulerConfig | None = None,
        table: ProcessTable | None = None,
    ) -> None:
        """``oracle``: the simulator's true figures per call id (module docstring)."""
        self.oracle = oracle
        super().__init__(config, table)

    def entry_priority_s(self, entry: ProgramEntry, call: CallEntry) -> float:
        remaining = self._figures(call)[1]
        if remaining is None or not math.isfinite(remaining) or remaining < 0:
            raise ConfigError(
                f"srpt needs the oracle's program_remaining_s for every call (simulator "
                f"only); call {call.facts.call_id!r} has {remaining!r}"
            )
        return remaining

    def requeue(self, call: CallEntry, now_s: float) -> None:
        call.priority_s = self._remaining(call)
        call.level = self.config.level_for(call.priority_s)
        super().requeue(call, now_s)

    def _queue_key(self, call: CallEntry) -> tuple[float, ...]:
        # Levels follow the remaining service, so ordering inside a level by it gives the
        # global SRPT order.
        own, remaining = self._figures(call)
        return (
            remaining if remaining is not None else math.inf,
            own if own is not None else 0.0,
            call.facts.deadline_s,
            call.seq,
        )

    #: A used-up quantum demotes no call (module docstring).
    _demotes: ClassVar[bool] = False

    def promote_starving(self, now_s: float) -> list[CallEntry]:
        """SRPT is the clairvoyant bound: no anti-starvation."""
        return []

    def _figures(self, call: CallEntry) -> tuple[float | None, float | None]:
        """The oracle's (own service, program remaining) for ``call``; ``None`` = unknown."""
        figures = self.oracle(call.facts.call_id)
        if figures is None:
            return None, None
        return figures.service_s, figures.program_remaining_s

    def _remaining(self, call: CallEntry) -> float:
        remaining = self._figures(call)[1]
        return remaining if remaining is not None else math.inf
