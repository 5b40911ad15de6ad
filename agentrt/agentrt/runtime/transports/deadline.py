"""``DeadlineTransport``: an LLM call gets at most its program's remaining budget.

A call with no time left is never sent (``DeadlineExceeded``); otherwise its httpx timeouts
are capped just past the deadline (``agentrt.program.deadline``) and the budget is handed to
the tagging layer, which sends it as ``X-Agentrt-Timeout-Ms``. Cancelling the call at the
deadline is the program's cancel scope's job: it closes the response stream, so the server
aborts the request.
"""

from __future__ import annotations

import math

import httpx

from agentrt.program.deadline import call_budget_s, http_timeout_s
from agentrt.runtime.transports.target import target_of

__all__ = ["DeadlineTransport"]


class DeadlineTransport(httpx.AsyncBaseTransport):
    """Checks and caps each LLM call's budget; passes every request on to ``inner``."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = target_of(request)
        if target is not None and not math.isinf(target.graph.deadline_s):
            budget_s = call_budget_s(target.graph, target.node.id)  # raises DeadlineExceeded
            target.timeout_ms = int(budget_s * 1000)
            _cap_timeout(request, http_timeout_s(budget_s))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        """No-op: the runtime owns and closes the connection pools."""


def _cap_timeout(request: httpx.Request, limit_s: float) -> None:
    current = request.extensions.get("timeout") or {}
    capped = {}
    for key in ("connect", "read", "write", "pool"):
        value = current.get(key)
        capped[key] = limit_s if value is None else min(value, limit_s)
    request.extensions["timeout"] = capped
