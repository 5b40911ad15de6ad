"""A backend's answer, read until the client can be answered.

Nothing goes to the client before :meth:`BackendAnswer.start` returns, so a backend that dies
before that point (:class:`~agentrt_controller.backends.api.BackendDisconnected`) leaves the call
retryable on another backend (:mod:`agentrt_controller.service.core.retry`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio

from agentrt_controller.backends.api import BackendResponse

__all__ = ["BackendAnswer"]


class BackendAnswer:
    """The whole body of a non-streamed (or failed) answer, or the first chunk of a stream."""

    __slots__ = ("_first", "_rest", "arrived", "body", "closed", "relay", "response")

    def __init__(self, response: BackendResponse) -> None:
        self.response = response
        #: The whole answer; ``None`` for a stream (read :meth:`chunks`).
        self.body: bytes | None = None
        #: The response is closed (its connection released): :meth:`aclose` has nothing to do.
        self.closed = False
        self._first = b""
        self._rest: AsyncIterator[bytes] | None = None
        #: Whether the stream's last byte arrived and was handed on (its iterator ends without
        #: waiting): a response that can tell offers ``body_arrived`` (the fast transport's
        #: :class:`~agentrt.fasthttp.FastResponse`); others never say so.
        self.arrived: Callable[[], bool] = getattr(response, "body_arrived", _never)
        #: Hands the stream's reads to a callback in the connection's own read (``relay(take)``,
        #: ``relay(None)`` to stop), without waking the task that iterates the stream: offered
        #: by a response that can (the fast transport's ``FastResponse.relay``); ``None``
        #: otherwise.
        self.relay: Callable[[Callable[[bytes], bool] | None], None] | None = getattr(
            response, "relay", None
        )

    @classmethod
    async def start(cls, stream: bool, response: BackendResponse) -> BackendAnswer:
        """Read until the client can be answered. Closes ``response`` when this raises."""
        answer = cls(response)
        try:
            if stream and response.status_code == 200:
                answer._rest = aiter(response.aiter_bytes())
                answer._first = await anext(answer._rest, b"")
            else:
                answer.body = await response.aread()
                await answer.aclose()  # read whole: the connection goes back at once
        except BaseException:
            with anyio.CancelScope(shield=True):
                await answer.aclose()
            raise
        return answer

    def parts(self) -> tuple[bytes, AsyncIterator[bytes] | None]:
        """The stream: its first chunk (``b""``: none) and the rest as it arrives (``None``:
        nothing more). Two parts, not one async generator over both: a generator is one more
        frame resumed for every chunk of the stream."""
        return self._first, self._rest

    async def aclose(self) -> None:
        if self.closed:
            return
        rest, self._rest = self._rest, None
        aclose = getattr(rest, "aclose", None)
        if aclose is not None:
            await aclose()
        await self.response.aclose()
        self.closed = True


def _never() -> bool:
    return False
