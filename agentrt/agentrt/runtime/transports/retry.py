"""``RetryTransport``: a request the server never took is sent again, for up to a time budget.

What it absorbs is a controller restarted in place (a rolling restart, a crash and its
supervisor's restart): for a few seconds its port refuses connections, and while it drains it
answers new calls 503 with ``Retry-After``. Only requests that are safe to send again are
resent — those the server provably did not act on:

* the connection could not be made (``httpx.ConnectError``: refused, unreachable;
  ``httpx.ConnectTimeout``): nothing was sent;
* the server answered 503 with a ``Retry-After`` header: it refused the request before doing
  anything (the controller's draining, ``no_backend`` and full-table answers carry it).

A request cut after it was sent (a reset, a server gone mid-answer) is not resent here: the
server may have acted on it. The openai client's own retries (``RuntimeConfig.max_retries``)
still apply above this layer, as before.

The budget (``RuntimeConfig.retry_budget_s``, seconds) is time-based and counted from the
first refused attempt of an LLM call, shared by the openai client's retries of the same call
(its node), so a restart of a few seconds costs a call a few seconds, never more than the
budget. Between attempts the layer waits with exponential backoff and jitter (so clients
cut off together do not come back in one burst), at least what ``Retry-After`` says. It never
waits past the program's deadline: when the next attempt could not start before it, the last
failure is returned as it is.
"""

from __future__ import annotations

import datetime
import math
import random
from contextvars import ContextVar
from email.utils import parsedate_to_datetime

import anyio
import httpx

from agentrt.program.model import Node
from agentrt.runtime.transports.target import target_of

__all__ = ["FIRST_BACKOFF_S", "MAX_BACKOFF_S", "RetryTransport", "retry_after_s"]

#: Backoff before the first resend (seconds); doubled after each refused attempt ...
FIRST_BACKOFF_S = 0.1
#: ... up to this (seconds). A restarted controller is back within a second or two; waiting
#: longer between attempts would only add to the calls' latency.
MAX_BACKOFF_S = 1.0

#: The LLM call whose retry window is open in this context, and the window's end (anyio clock,
#: seconds): the openai client's retries of the same call run in the same task, so they
#: share the window instead of each opening a new one.
_WINDOW: ContextVar[tuple[Node, float] | None] = ContextVar("agentrt_retry_window", default=None)


class RetryTransport(httpx.AsyncBaseTransport):
    """Resends refused requests to ``inner`` for up to ``budget_s`` seconds (0 = never)."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport, budget_s: float, rng: random.Random | None = None
    ) -> None:
        """``budget_s``: seconds a request may spend being resent, from its first refusal;
        ``rng``: the jitter's source (a seeded one in tests), default a fresh one."""
        self.inner = inner
        self.budget_s = budget_s
        self._rng = rng if rng is not None else random.Random()
        #: Requests sent again by this layer, since it was built (for tests and stats).
        self.resent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.budget_s <= 0 or not _replayable(request):
            return await self.inner.handle_async_request(request)
        window_end_s: float | None = None
        attempt = 0
        while True:
            refused: httpx.Response | None = None
            try:
                response = await self.inner.handle_async_request(request)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                failure: httpx.TransportError | None = exc
                wait_s = 0.0
            else:
                if response.status_code != 503:
                    return response
                wait = retry_after_s(response.headers.get("retry-after"))
                if wait is None:
                    return response  # a 503 without Retry-After may come after work began
                failure, wait_s, refused = None, wait, response
            if window_end_s is None:
                window_end_s = self._window_end(request)
            delay_s = max(wait_s, self._backoff_s(attempt))
            if anyio.current_time() + delay_s >= window_end_s:  # out of budget or deadline
                if refused is not None:
                    return refused
                assert failure is not None
                raise failure
            if refused is not None:
                await refused.aclose()
            attempt += 1
            self.resent += 1
            await anyio.sleep(delay_s)

    def _window_end(self, request: httpx.Request) -> float:
        """End of the request's retry window (anyio clock): the call's open window if this
        context holds one for the same node, else ``budget_s`` from now; never past the
        program's deadline."""
        now_s = anyio.current_time()
        target = target_of(request)
        if target is None:
            return now_s + self.budget_s
        held = _WINDOW.get()
        if held is not None and held[0] is target.node:
            end_s = held[1]
        else:
            end_s = now_s + self.budget_s
            _WINDOW.set((target.node, end_s))
        return min(end_s, target.graph.deadline_s)

    def _backoff_s(self, attempt: int) -> float:
        """Exponential backoff with jitter: between half and all of
        ``FIRST_BACKOFF_S * 2**attempt``, at most ``MAX_BACKOFF_S`` (seconds)."""
        ceiling_s = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2.0 ** min(attempt, 16))
        return ceiling_s * self._rng.uniform(0.5, 1.0)

    async def aclose(self) -> None:
        """No-op: the runtime owns and closes the connection pools."""


def retry_after_s(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta-seconds or an HTTP date, never
    negative); None without a header or with one that is neither."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        now = datetime.datetime.now(when.tzinfo or datetime.UTC)
        seconds = (when - now).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _replayable(request: httpx.Request) -> bool:
    """Whether the request's body is in memory, so it can be sent again as it is."""
    try:
        request.content  # noqa: B018 - raises for a streamed body that was not read
    except httpx.RequestNotRead:
        return False
    return True
