"""A server-sent-events response that notices a client leaving and stops its producer.

Starlette's own ``StreamingResponse`` wraps an async iterator; here the producer is a plain
coroutine that owns the engine requests (``with driver.submit(...)``), so cancelling it on
``http.disconnect`` aborts them in the engine at once, whether or not a token was due.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import anyio
from anyio import CancelScope
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["EventStreamResponse", "watch_disconnect"]

Emit = Callable[[bytes], Awaitable[None]]


async def watch_disconnect(receive: Receive, scope: CancelScope) -> None:
    """Cancel ``scope`` when the client disconnects (the request body was already read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


class EventStreamResponse(Response):
    """``text/event-stream`` whose body is written by ``produce(emit)``; ``on_close()`` runs last,
    always (it releases what the producer used, e.g. aborts unfinished engine requests)."""

    media_type = "text/event-stream"

    def __init__(
        self,
        produce: Callable[[Emit], Awaitable[None]],
        *,
        on_close: Callable[[], object],
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._produce = produce
        self._on_close = on_close
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def emit(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_disconnect, receive, tg.cancel_scope)
                try:
                    await send(
                        {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
                    )
                    await self._produce(emit)
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except OSError:
                    pass  # the client went away while we were sending
                tg.cancel_scope.cancel()
        finally:
            # Runs on success, on disconnect (cancellation) and on error alike.
            self._on_close()
