"""When a call that a backend could not answer goes to another backend.

A failure before anything reached the client leaves the call retryable: the backend refused
the connection or timed out before answering (:class:`BackendUnavailable`), or it broke the
connection before the answer started (:class:`BackendDisconnected`), or it answered with a
server error status (:data:`RETRYABLE_STATUSES`: 500, 502, 503, 504 — an engine that died behind
its API server, an overloaded one, a gateway in front of a dead one). The call then keeps its
place in the queues and the dispatcher chooses again, at most ``max_retries`` times. Any other
:class:`BackendError` (a malformed answer, say) is final. A refused connection proves the
backend down; any other retryable failure is settled by one health probe (a dead server fails
it, a live one stays in routing: the call itself was the problem). docs/controller.md,
"Bad input and failures".
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrt_controller.backends.api import BackendDisconnected, BackendError, BackendUnavailable

__all__ = ["RETRYABLE_STATUSES", "RetryPolicy"]

#: Backend answer statuses that leave a call retryable on another backend while nothing of the
#: answer reached the client (501 and 505 are permanent: another backend of the same kind
#: would answer the same). A 5xx that is the last try is passed to the client as it came.
RETRYABLE_STATUSES = frozenset({500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Pure: which failures are retried, how often, and what they say about the backend."""

    #: Retries per call after the first attempt (``>= 0``).
    max_retries: int

    @staticmethod
    def retryable(failure: BackendError) -> bool:
        """Nothing reached the client: another backend may still answer."""
        return isinstance(failure, BackendUnavailable | BackendDisconnected)

    @staticmethod
    def retryable_status(status_code: int) -> bool:
        """A backend's answer with this HTTP status may be tried on another backend."""
        return status_code in RETRYABLE_STATUSES

    def may_retry(self, retries: int) -> bool:
        """``retries`` retries were made so far: is one more allowed?"""
        return retries < self.max_retries

    @staticmethod
    def proves_down(failure: BackendError) -> bool:
        """The failure alone shows the backend is down (its connection was refused); other
        retryable failures need a health probe to tell."""
        return isinstance(failure, BackendUnavailable) and failure.connect_failed
