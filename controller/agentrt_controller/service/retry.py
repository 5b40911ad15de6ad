"""When a call that a backend could not answer goes to another backend.

A failure before anything reached the client leaves the call retryable: the backend refused
the connection or timed out before answering (:class:`BackendUnavailable`), or it broke the
connection before the answer started (:class:`BackendDisconnected`). The call then keeps its
place in the queues and the dispatcher chooses again, at most ``max_retries`` times. Any other
:class:`BackendError` (a malformed answer, say) is final. A refused connection proves the
backend down; any other retryable failure is settled by one health probe (a dead server fails
it, a live one stays in routing: the call itself was the problem). docs/controller.md,
"Bad input and failures".
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrt_controller.backends.api import BackendDisconnected, BackendError, BackendUnavailable

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Pure: which failures are retried, how often, and what they say about the backend."""

    #: Retries per call after the first attempt (``>= 0``).
    max_retries: int

    @staticmethod
    def retryable(failure: BackendError) -> bool:
        """Nothing reached the client: another backend may still answer."""
        return isinstance(failure, BackendUnavailable | BackendDisconnected)

    def may_retry(self, retries: int) -> bool:
        """``retries`` retries were made so far: is one more allowed?"""
        return retries < self.max_retries

    @staticmethod
    def proves_down(failure: BackendError) -> bool:
        """The failure alone shows the backend is down (its connection was refused); other
        retryable failures need a health probe to tell."""
        return isinstance(failure, BackendUnavailable) and failure.connect_failed
