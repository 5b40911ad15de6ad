"""The controller service as one ASGI application object, built from explicit config.

::

    app = ControllerApp(config)                 # validates config, builds policies
    uvicorn.run(app, ...)                       # or: async with serve_controller(config)

No globals: the HTTP client, the :class:`~agentrt_controller.service.engine.ControllerEngine`
(backends, dispatcher, retention, the clock), metrics and tracer provider belong to the
:class:`ControllerApp`. Its ASGI lifespan runs the engine's loops in a task group and closes
everything on shutdown. The endpoints translate HTTP to engine calls and back. The two OpenAI
generation paths bypass Starlette's router (a dict lookup) to keep per-call overhead small;
everything else is an ordinary Starlette app.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
from opentelemetry.trace import TracerProvider
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentrt import __version__
from agentrt.errors import ConfigError
from agentrt_controller.backends.api import Backend
from agentrt_controller.backends.factory import build_backend
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.backends.transport import HttpPool
from agentrt_controller.service.admin import admin_routes
from agentrt_controller.service.charging import CostFunction
from agentrt_controller.service.clock import MONOTONIC, Clock
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.engine import ControllerEngine
from agentrt_controller.service.events import event_routes
from agentrt_controller.service.incoming import Receive, Scope, Send
from agentrt_controller.service.metrics import ServiceMetrics
from agentrt_controller.service.proxy import CompletionsEndpoint
from agentrt_controller.service.tracing import CallTracing

__all__ = ["ControllerApp"]

_GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions")


class ControllerApp:
    """The controller: an ASGI app. Raises :class:`~agentrt.errors.ConfigError` on bad config.

    ``backends`` replaces the ones named in ``config.backends`` (tests pass fakes);
    ``tracer_provider`` enables spans; ``cost`` replaces the configured cost model;
    ``clock`` is the monotonic clock in seconds that every policy decision uses.
    """

    def __init__(
        self,
        config: ControllerConfig,
        *,
        backends: Sequence[Backend] | None = None,
        tracer_provider: TracerProvider | None = None,
        cost: CostFunction | None = None,
        clock: Clock = MONOTONIC,
    ) -> None:
        self.config = config
        self.metrics = ServiceMetrics()
        self.http = HttpPool.create(
            read_timeout_s=config.backend_timeout_s,
            connect_timeout_s=config.connect_timeout_s,
            kind=config.http_transport,
            shards=config.http_pool_shards,
            max_connections=config.max_connections,
        )
        if backends is None:
            backends = [build_backend(spec, self.http) for spec in config.backends]
        if not backends:
            raise ConfigError("the controller needs at least one backend")
        #: The controller's core behind one facade; the endpoints only talk to it.
        self.engine = ControllerEngine(
            config, list(backends), metrics=self.metrics, cost=cost, clock=clock
        )
        tracing = CallTracing(tracer_provider)
        self._generation = {
            path: CompletionsEndpoint(path, self.engine, tracing) for path in _GENERATION_PATHS
        }
        self.metrics.on_collect(self.engine.collect_metrics)
        self._starlette = Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
                Route("/v1/models", self._models, methods=["GET"]),
                *event_routes(self.engine),
                *admin_routes(self.engine, self._build_backend, config.admin_token),
            ],
            lifespan=self._lifespan,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            endpoint = self._generation.get(scope["path"])
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await self._starlette(scope, receive, send)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Any) -> AsyncIterator[None]:
        async with self.http.client, anyio.create_task_group() as group:
            await group.start(self.engine.run)
            yield
            group.cancel_scope.cancel()
        await self.engine.aclose()

    def _build_backend(self, spec: BackendSpec) -> Backend:
        """A backend for the admin API's POST (shares the app's HTTP pool)."""
        return build_backend(spec, self.http)

    # --- plain endpoints ---------------------------------------------------------------------

    async def _health(self, request: Request) -> Response:
        healthy = self.engine.healthy()
        return JSONResponse(
            {
                "status": "ok" if healthy else "degraded",
                "version": __version__,
                "backends": self.engine.backend_health(),
            },
            status_code=200 if healthy else 503,
        )

    async def _metrics(self, request: Request) -> Response:
        return Response(
            self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": self.engine.models()})
