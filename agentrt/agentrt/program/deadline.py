"""A program's deadline as seen by one LLM call: the budget it is sent with.

Deadlines are absolute times on the anyio clock (seconds, ``math.inf`` = none), as in anyio's
cancel scopes. The program's cancel scope (``Program``) is what enforces a deadline; a call's
HTTP timeout is set a little past it (``TIMEOUT_SLACK_S``) so that the scope fires first and
the call ends as ``DeadlineExceeded``, not as an HTTP timeout.
"""

from __future__ import annotations

import anyio

from agentrt.errors import DeadlineExceeded
from agentrt.program.model import ProgramGraph

__all__ = ["TIMEOUT_SLACK_S", "call_budget_s", "http_timeout_s"]

#: Seconds added to a call's HTTP timeout so that the program's cancel scope fires first.
TIMEOUT_SLACK_S = 0.05


def call_budget_s(graph: ProgramGraph, node_id: str) -> float:
    """Seconds left before ``graph``'s deadline for the call of ``node_id`` (``math.inf``
    without one). Raises ``DeadlineExceeded`` when none is left: the call must not be sent."""
    remaining = graph.deadline_s - anyio.current_time()
    if remaining <= 0:
        raise DeadlineExceeded(f"program {graph.id} has no time left for {node_id}")
    return remaining


def http_timeout_s(budget_s: float) -> float:
    """The HTTP timeout (seconds) of a call with ``budget_s`` seconds left."""
    return budget_s + TIMEOUT_SLACK_S
