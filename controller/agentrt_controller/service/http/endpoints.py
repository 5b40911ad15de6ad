"""What the service's small JSON endpoints (program events, backend admin) share: a bounded
body read and one place that turns a :class:`ServiceError` into its OpenAI-style answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from agentrt_controller.service.errors import BodyTooLarge, ServiceError

__all__ = ["Handler", "guarded", "read_small_body"]

Handler = Callable[[Request], Awaitable[Response]]


def guarded(handler: Handler) -> Handler:
    """``handler`` answering a :class:`ServiceError` it raises as that error's JSON response."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except ServiceError as error:
            return Response(
                error.body(), error.status_code, error.headers(), media_type="application/json"
            )

    return endpoint


async def read_small_body(request: Request, limit: int, what: str) -> bytes:
    """The request body; :class:`BodyTooLarge` ("<what> over <limit> bytes") as soon as it
    passes ``limit`` bytes."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(f"{what} over {limit} bytes")
    return body
