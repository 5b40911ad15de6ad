"""KV retention during tool waits (Continuum arXiv 2511.02230; docs/routing.md, "KV
retention"): a pure policy and the bookkeeping around it.

* :mod:`.api` — the :class:`RetentionPolicy` seam: what a policy is told (:class:`WaitInfo`,
  :class:`ToolWaitFacts`) and answers (:class:`RetentionDecision`);
* :mod:`.policy` — :class:`TtlRetentionPolicy`: the TTL from the tool's duration distribution,
  the return probability and the current cost of an eviction (reload or recompute, queueing)
  against the cost of holding the memory (the decision rule is in its docstring);
* :mod:`.durations`, :mod:`.returns` — what it learns from, per tenant (:mod:`.learned`:
  bounded tables, and the global prior fed only by tenants that opt in);
* :mod:`.recent` — the recent queueing delay per backend (the policy's eviction cost);
* :mod:`.tracker` — live retentions: release at TTL end, at the thread's next call, at
  program end; re-warm times;
* :mod:`.driver` — :class:`RetentionDriver`: the retention the controller service and the
  simulator both run (contexts, policy, tracker, windows, pin / re-warm / window, release
  points), returning the :class:`RetentionAction` values each carries out.

Nothing here awaits, does I/O or reads a clock. docs/routing.md ("KV retention") explains how
each backend realises a retention.
"""

from agentrt_controller.retention.api import (
    RetentionDecision,
    RetentionPolicy,
    ToolWaitFacts,
    WaitInfo,
)
from agentrt_controller.retention.driver import (
    BackendTraits,
    PinnedContext,
    RetentionAction,
    RetentionDriver,
    ThreadContext,
    ToolWait,
)
from agentrt_controller.retention.policy import RetentionConfig, TtlRetentionPolicy
from agentrt_controller.retention.tracker import Retention, RetentionTracker

__all__ = [
    "BackendTraits",
    "PinnedContext",
    "Retention",
    "RetentionAction",
    "RetentionConfig",
    "RetentionDecision",
    "RetentionDriver",
    "RetentionPolicy",
    "RetentionTracker",
    "ThreadContext",
    "ToolWait",
    "ToolWaitFacts",
    "TtlRetentionPolicy",
    "WaitInfo",
]
