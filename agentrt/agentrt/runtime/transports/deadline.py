"""``DeadlineTransport``: an LLM call gets at most its program's remaining budget.

The one place a call's budget is derived. A program's deadline is one absolute time on the anyio
clock (seconds, ``math.inf`` = none), as in anyio's cancel scopes; at each send this layer turns
it into the call's remaining budget. A call with no time left is never sent
(``DeadlineExceeded``, which neither httpx nor openai wraps); otherwise its httpx timeouts are
capped a little past the deadline (``TIMEOUT_SLACK_S``) and the budget is handed to the tagging
layer, which sends it as ``X-Agentrt-Timeout-Ms``. Cancelling the call at the deadline is the
program's cancel scope's job: the slack lets the scope fire first, so the call ends as
``DeadlineExceeded``, not as an HTTP timeout; the scope closes the response stream and the
server aborts the request.
"""

from __future__ import annotations

import math

import anyio
import httpx

from agentrt.errors import DeadlineExceeded
from agentrt.program.model import ProgramGraph
from agentrt.runtime.transports.target import target_of

__all__ = ["TIMEOUT_SLACK_S", "DeadlineTransport", "call_budget_s"]

#: Seconds added to a call's HTTP timeout so that the program's cancel scope fires first.
TIMEOUT_SLACK_S = 0.05


class DeadlineTransport(httpx.AsyncBaseTransport):
    """Checks and caps each LLM call's budget; passes every request on to ``inner``."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = target_of(request)
        if target is not None and not math.isinf(target.graph.deadline_s):
            budget_s = call_budget_s(target.graph, target.node.id, anyio.current_time())
            target.timeout_ms = int(budget_s * 1000)
            _cap_timeout(request, budget_s + TIMEOUT_SLACK_S)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        """No-op: the runtime owns and closes the connection pools."""


def call_budget_s(graph: ProgramGraph, node_id: str, now_s: float) -> float:
    """Seconds left at ``now_s`` (the anyio clock) before ``graph``'s deadline for the call of
    ``node_id`` (``math.inf`` without one). Raises ``DeadlineExceeded`` when none is left: the
    call must not be sent."""
    remaining = graph.deadline_s - now_s
    if remaining <= 0:
        raise DeadlineExceeded(f"program {graph.id} has no time left for {node_id}")
    return remaining


def _cap_timeout(request: httpx.Request, limit_s: float) -> None:
    current = request.extensions.get("timeout") or {}
    capped = {}
    for key in ("connect", "read", "write", "pool"):
        value = current.get(key)
        capped[key] = limit_s if value is None else min(value, limit_s)
    request.extensions["timeout"] = capped
