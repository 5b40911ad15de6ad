"""Clairvoyant SRPT at program level — a bound for the simulator, never for the service.

Shortest remaining processing time: the queued call whose program has the least remaining service
(``Call.oracle_program_remaining_s``, which includes the call itself) goes first; ties by the call's
own service (``oracle_service_s``), then deadline, then submission order. It needs the future, which
only a simulator knows (Autellix arXiv 2502.13965, Fig. 18; docs/scheduling.md), so
:func:`~agentrt_controller.scheduling.factory.build_scheduler` refuses to build it without
``oracle=True`` and :meth:`SrptScheduler.submit` rejects calls without oracle data.

The backend priority is the queue index of the remaining service under the configured
boundaries (so a priority-aware engine agrees with the controller's order). Quanta do not demote.
"""

from __future__ import annotations

import math

from agentrt.errors import ConfigError
from agentrt_controller.process_table import ProgramEntry
from agentrt_controller.scheduling.api import Call
from agentrt_controller.scheduling.multilevel import MultiLevelScheduler

__all__ = ["SrptScheduler"]


class SrptScheduler(MultiLevelScheduler):
    """Program-level SRPT on oracle data. A requeued call is re-keyed by its (possibly
    updated) ``oracle_program_remaining_s``, so drivers that preempt get preemptive SRPT."""

    name = "srpt"

    def entry_priority_s(self, entry: ProgramEntry, call: Call) -> float:
        remaining = call.oracle_program_remaining_s
        if remaining is None or not math.isfinite(remaining) or remaining < 0:
            raise ConfigError(
                f"srpt needs oracle_program_remaining_s on every call (simulator only); "
                f"call {call.call_id!r} has {remaining!r}"
            )
        return remaining

    def requeue(self, call: Call, now_s: float) -> None:
        call.priority_s = self._remaining(call)
        call.level = self.config.level_for(call.priority_s)
        super().requeue(call, now_s)

    def _queue_key(self, call: Call) -> tuple[float, ...]:
        # Levels follow the remaining service, so ordering inside a level by it gives the
        # global SRPT order.
        own = call.oracle_service_s if call.oracle_service_s is not None else 0.0
        return (self._remaining(call), own, call.deadline_s, call.seq)

    def _demotes(self) -> bool:
        return False

    def promote_starving(self, now_s: float) -> list[Call]:
        """SRPT is the clairvoyant bound: no anti-starvation."""
        return []

    @staticmethod
    def _remaining(call: Call) -> float:
        remaining = call.oracle_program_remaining_s
        return remaining if remaining is not None else math.inf
