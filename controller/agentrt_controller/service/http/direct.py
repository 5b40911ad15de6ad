"""The controller's fast path: ``POST /v1/chat/completions``, ``POST /v1/completions`` and the
program events (``POST /agentrt/v1/programs/{program_id}/{event}``, a route under a path
prefix: an id with an escape takes the ASGI way) answered as direct routes
(agentrt_serving.direct), not through the ASGI stack.

The same steps as the ASGI path, in the same order, each by the same code::

    the guard's checks (HardenedApp.check_head: 431 / 400; the body read under its limits:
        413 / 408, 100-continue; HardenedApp.checked_value: 400, one parse)
    → draining: 503 (the drain gate's answer; the generation paths only, as the gate's)
    → authentication (ControllerApp.credentials: 401)
    → the endpoint (its accept_direct; CompletionsEndpoint's: the admin token refused, parse,
        core.accept; then CompletionsEndpoint.handle: forward, the answer or its SSE stream
        written to the connection, settle; a client that leaves aborts it. ProgramEvents':
        events.program_event, the ASGI route's function, answered)
    → the access-log line (AccessLog.write)

with the guard's catch-all around it all (an unhandled error: logged once, counted by route,
answered 500 in the OpenAI envelope). What it leaves out is the ASGI machinery: the scope and
message dicts, four middlewares, uvicorn's per-message checks, an anyio cancel scope and a
watcher task per call. ``http_path = "asgi"`` (``--http-path asgi``) serves every route the
ASGI way instead (docs/controller.md, "Performance notes": the fast path).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from agentrt_controller.service.core.tenants import Tenant
from agentrt_controller.service.http.access_log import AccessFacts, AccessLog
from agentrt_controller.service.http.app import ControllerApp
from agentrt_controller.service.http.events import (
    PROGRAM_EVENT_PATH,
    PROGRAMS_PREFIX,
    ProgramEvents,
)
from agentrt_controller.service.http.proxy import DirectCall, answer_error
from agentrt_serving.direct import DirectExchange, DirectHandler, DirectPrefixRoutes, DirectRoutes
from agentrt_serving.hardening import INTERNAL_ERROR_MESSAGE, NOT_JSON, BadInput, HardenedApp

__all__ = ["DIRECT_PATHS", "DirectCalls", "DirectEndpoint", "direct_routes"]

#: The generation paths the fast path serves.
DIRECT_PATHS = ("/v1/chat/completions", "/v1/completions")

#: The drain gate's 503 (headers without ``content-length``, body).
DrainAnswer = tuple[list[tuple[bytes, bytes]], bytes]


class DirectEndpoint(Protocol):
    """What a direct route serves: the endpoint that takes a request the route read and
    authenticated (``caller`` None: the admin token) and answers it, or returns the accepted
    call the route then awaits (``call.endpoint.handle``: in the route's frame)."""

    @property
    def gone_status(self) -> int | None:
        """The status logged when the client leaves before its whole body (None: none), as
        the endpoint's ASGI route logs it."""

    async def accept_direct(
        self,
        connection: DirectExchange,
        headers: dict[str, str],
        raw: bytes,
        value: object,
        caller: Tenant | None,
        access: AccessFacts | None,
    ) -> DirectCall | None: ...


class DirectCalls:
    """A direct route: ``endpoint`` behind ``guard``'s checks, the drain gate's answer
    (``drain_answer``; None: the route's calls pass while draining) and ``app``'s
    authentication, logged by ``access_log`` (None: off); ``route`` names it for the count of
    crashes (the ASGI route's template)."""

    def __init__(
        self,
        route: str,
        endpoint: DirectEndpoint,
        app: ControllerApp,
        guard: HardenedApp,
        drain_answer: DrainAnswer | None,
        access_log: AccessLog | None,
    ) -> None:
        self.route = route
        self.app = app
        self.endpoint = endpoint
        self.guard = guard
        self.access_log = access_log
        self._drain = drain_answer
        self._limit = guard.limits.max_body_bytes
        self._timeout_s = guard.limits.body_timeout_s

    async def __call__(self, connection: DirectExchange) -> None:
        # One coroutine for the access log, the guard's catch-all and the guard's checks:
        # every frame of the chain is resumed at each wake-up of the call (three per call).
        self.app.direct_calls += 1
        log = self.access_log
        facts: AccessFacts | None = None
        tenant: list[str | None] | None = None
        started = 0.0
        if log is not None and log.logger.isEnabledFor(logging.INFO):
            started = time.perf_counter()
            facts = AccessFacts()
            tenant = [None]
        guard = self.guard
        try:
            try:
                guard.check_head(connection.headers)
                raw = await connection.read_body(self._limit, self._timeout_s)
                if raw is None:  # the client left before its whole body: nothing is sent
                    connection.status = self.endpoint.gone_status  # what the log says
                    return
                value = await guard.checked_value(raw) if raw else NOT_JSON
            except BadInput as bad:
                await self._refuse(connection, bad)
                return
            app = self.app
            if app.draining and self._drain is not None:
                drain_headers, drain_body = self._drain
                await connection.respond(503, list(drain_headers), drain_body)
                return
            headers: dict[str, str] = {}
            for key, text in connection.headers:  # a loop: no comprehension's frame
                headers[key.decode("latin-1")] = text.decode("latin-1")
            caller, _admin, refusal = app.credentials(headers.get("authorization"))
            if tenant is not None and caller is not None:
                tenant[0] = caller.name
            if refusal is not None:
                app.metrics.tenant_refusals.inc(1.0, "", "401")
                await answer_error(connection, refusal)
                return
            call = await self.endpoint.accept_direct(connection, headers, raw, value, caller, facts)
            if call is None:  # answered (refused, or a whole answer)
                return
            # The endpoint's call awaited here, not in a frame of the endpoint's own.
            try:
                await call.endpoint.handle(call.parsed, call.pending, connection, call)
            except asyncio.CancelledError:
                if not call.left:  # not the client's leaving: a cancellation from outside
                    raise
                call.task.uncancel()  # the client left: the call ends here
            finally:
                connection.on_disconnect = None
        except Exception as exc:  # the guard's catch-all (HardenedApp.__call__'s)
            guard.crashed(connection.method, self.route, exc)
            if not connection.response_started:
                await self._refuse(connection, BadInput(500, INTERNAL_ERROR_MESSAGE))
            else:
                connection.transport.close()
        finally:
            if log is not None and facts is not None and tenant is not None:
                latency_ms = (time.perf_counter() - started) * 1000.0
                log.write(
                    connection.method,
                    connection.path,
                    tenant[0],
                    connection.status,
                    latency_ms,
                    facts,
                )

    async def _refuse(self, connection: DirectExchange, bad: BadInput) -> None:
        headers, body = self.guard.refusal(bad)
        await connection.respond(bad.status, headers, body)


def direct_routes(
    app: ControllerApp,
    guard: HardenedApp,
    drain_answer: Callable[[str], DrainAnswer | None],
    access_log: AccessLog | None,
) -> tuple[DirectRoutes, DirectPrefixRoutes]:
    """The fast path's routes for a server of ``app`` (service/http/server.py): the exact
    paths' and those under a path prefix; ``drain_answer(path)`` is the drain gate's answer
    for a path (or a path prefix), None when its calls pass."""
    routes: DirectRoutes = {
        (b"POST", path.encode()): DirectCalls(
            path, app.endpoint(path), app, guard, drain_answer(path), access_log
        )
        for path in DIRECT_PATHS
    }
    events = DirectCalls(
        PROGRAM_EVENT_PATH,
        ProgramEvents(app.core),
        app,
        guard,
        drain_answer(PROGRAMS_PREFIX),
        access_log,
    )

    def program_event(rest: bytes) -> DirectHandler | None:
        return events if ProgramEvents.route(rest) else None

    return routes, {(b"POST", PROGRAMS_PREFIX.encode()): program_event}
