"""The simulator's retention policies: the controller's seam, and the ``off`` baseline.

The seam is the controller's own (:mod:`agentrt_controller.retention.api`): when a program
thread starts waiting (a tool, or a human between chat turns), the simulator hands the
:class:`~agentrt_controller.retention.api.RetentionPolicy` a
:class:`~agentrt_controller.retention.api.ToolWaitFacts` built the way the controller service
builds it, and gets back a :class:`~agentrt_controller.retention.api.RetentionDecision`. A
positive TTL is realised by the controller's own retention driver
(:class:`~agentrt_controller.retention.driver.RetentionDriver`, carried out by
:mod:`agentrt_sim.waits`): a native pin of the thread's context on the engine that served its
last call when the decision says ``pin``, released when the thread's next call is admitted,
when the TTL runs out, or at program end; while a program is retained its calls carry
the retained backend they are submitted with (the engine holding their KV).

``ttl`` is :class:`agentrt_controller.retention.TtlRetentionPolicy` itself — the same object the
controller service drives (docs/architecture.md, "Design rules"). Policies are pure: no clock,
no I/O; ``now_s`` comes in.
"""

from __future__ import annotations

from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention.api import RetentionDecision, WaitInfo

__all__ = ["NoRetention"]


class NoRetention:
    """Never retains (the baseline; the engine's LRU decides what stays cached)."""

    name = "off"

    def on_wait_start(self, facts: WaitInfo, now_s: float) -> RetentionDecision:
        return RetentionDecision(ttl_s=0.0)

    def on_wait_end(
        self, program: ProgramKey, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        return None

    def on_call_arrived(self, program: ProgramKey, thread_id: str, now_s: float) -> None:
        return None

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        return None
