"""The controller's fast path: ``POST /v1/chat/completions`` and ``POST /v1/completions``
answered as direct routes (agentrt_serving.direct), not through the ASGI stack.

The same steps as the ASGI path, in the same order, each by the same code::

    the guard's checks (HardenedApp.check_head: 431 / 400; the body read under its limits:
        413 / 408, 100-continue; HardenedApp.checked_value: 400, one parse)
    → draining: 503 (the drain gate's answer)
    → authentication (ControllerApp.credentials: 401)
    → the endpoint (CompletionsEndpoint.accept_direct: parse, core.accept; then
        CompletionsEndpoint.handle: forward, the answer or its SSE stream written to the
        connection, settle; a client that leaves aborts it)
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

from agentrt_controller.service.errors import Unauthorized
from agentrt_controller.service.http.access_log import AccessFacts, AccessLog
from agentrt_controller.service.http.app import ControllerApp
from agentrt_controller.service.http.proxy import answer_error
from agentrt_serving.direct import DirectExchange, DirectRoutes
from agentrt_serving.hardening import INTERNAL_ERROR_MESSAGE, NOT_JSON, BadInput, HardenedApp

__all__ = ["DIRECT_PATHS", "DirectCalls", "direct_routes"]

#: The generation paths the fast path serves.
DIRECT_PATHS = ("/v1/chat/completions", "/v1/completions")


class DirectCalls:
    """The direct route of one generation path: ``app``'s endpoint for it behind ``guard``'s
    checks and the drain gate's answer, logged by ``access_log`` (None: off)."""

    def __init__(
        self,
        path: str,
        app: ControllerApp,
        guard: HardenedApp,
        drain_answer: tuple[list[tuple[bytes, bytes]], bytes],
        access_log: AccessLog | None,
    ) -> None:
        self.path = path
        self.app = app
        self.endpoint = app.endpoint(path)
        self.guard = guard
        self.access_log = access_log
        self._drain_headers, self._drain_body = drain_answer
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
                if raw is None:  # the client left before its whole body
                    return
                value = await guard.checked_value(raw) if raw else NOT_JSON
            except BadInput as bad:
                await self._refuse(connection, bad)
                return
            app = self.app
            if app.draining:
                await connection.respond(503, list(self._drain_headers), self._drain_body)
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
            if caller is None:  # the admin token is no tenant's key
                await answer_error(connection, Unauthorized("calls need a tenant's API key"))
                return
            endpoint = self.endpoint
            call = await endpoint.accept_direct(connection, headers, raw, value, caller, facts)
            if call is None:  # refused (answered)
                return
            # The endpoint's call awaited here, not in a frame of the endpoint's own.
            try:
                await endpoint.handle(call.parsed, call.pending, connection, call)
            except asyncio.CancelledError:
                if not call.left:  # not the client's leaving: a cancellation from outside
                    raise
                call.task.uncancel()  # the client left: the call ends here
            finally:
                connection.on_disconnect = None
        except Exception as exc:  # the guard's catch-all (HardenedApp.__call__'s)
            guard.crashed(connection.method, self.path, exc)
            if not connection.response_started:
                await self._refuse(connection, BadInput(500, INTERNAL_ERROR_MESSAGE))
            else:
                connection.transport.close()
        finally:
            if log is not None and facts is not None and tenant is not None:
                latency_ms = (time.perf_counter() - started) * 1000.0
                log.write(
                    connection.method, self.path, tenant[0], connection.status, latency_ms, facts
                )

    async def _refuse(self, connection: DirectExchange, bad: BadInput) -> None:
        headers, body = self.guard.refusal(bad)
        await connection.respond(bad.status, headers, body)


def direct_routes(
    app: ControllerApp,
    guard: HardenedApp,
    drain_answer: tuple[list[tuple[bytes, bytes]], bytes],
    access_log: AccessLog | None,
) -> DirectRoutes:
    """The fast path's routes for a server of ``app`` (service/http/server.py)."""
    return {
        (b"POST", path.encode()): DirectCalls(path, app, guard, drain_answer, access_log)
        for path in DIRECT_PATHS
    }
