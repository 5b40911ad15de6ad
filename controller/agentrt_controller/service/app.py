"""The controller service as one ASGI application object, built from explicit config.

::

    app = ControllerApp(config)                 # validates config, builds policies
    uvicorn.run(app, ...)                       # or: async with serve_controller(config)

No globals: the HTTP client, backends, dispatcher, metrics and tracer provider belong to the
:class:`ControllerApp`. Its ASGI lifespan starts the dispatch and probe loops in a task group
and closes everything on shutdown. The two OpenAI generation paths bypass Starlette's router
(a dict lookup) to keep per-call overhead small; everything else is an ordinary Starlette app.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
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
from agentrt_controller.service.charging import Charger, CostFunction
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core import ControllerCore
from agentrt_controller.service.events import event_routes
from agentrt_controller.service.incoming import Receive, Scope, Send
from agentrt_controller.service.metrics import ServiceMetrics
from agentrt_controller.service.policies import build_cost, build_dispatcher, build_retention
from agentrt_controller.service.proxy import CompletionsEndpoint
from agentrt_controller.service.tracing import CallTracing

__all__ = ["ControllerApp"]

_GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions")
#: ``agentrt_controller_backend_circuit_state`` values by backend status.
_CIRCUIT_CODES = {"half_open": 1.0, "open": 2.0, "draining": 3.0}


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
        clock: Callable[[], float] = time.monotonic,
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
        self.core = ControllerCore(
            config, build_dispatcher(config), list(backends), self.metrics, clock
        )
        if config.retention == "on":
            self.core.retention = build_retention(config, self.core, self.metrics)
        charger = Charger(cost if cost is not None else build_cost(config))
        tracing = CallTracing(tracer_provider)
        self._generation = {
            path: CompletionsEndpoint(path, self.core, charger, tracing)
            for path in _GENERATION_PATHS
        }
        self.metrics.on_collect(self._collect)
        self._starlette = Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
                Route("/v1/models", self._models, methods=["GET"]),
                *event_routes(self.core),
                *admin_routes(self.core, self._build_backend, config.admin_token),
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
            await group.start(self.core.run)
            yield
            group.cancel_scope.cancel()
        for backend in self.core.pool.states.values():
            await backend.backend.aclose()

    def _build_backend(self, spec: BackendSpec) -> Backend:
        """A backend for the admin API's POST (shares the app's HTTP pool)."""
        return build_backend(spec, self.http)

    # --- plain endpoints ---------------------------------------------------------------------

    async def _health(self, request: Request) -> Response:
        healthy = self.core.pool.any_healthy()
        return JSONResponse(
            {
                "status": "ok" if healthy else "degraded",
                "version": __version__,
                "backends": {
                    backend_id: state.healthy for backend_id, state in self.core.pool.states.items()
                },
            },
            status_code=200 if healthy else 503,
        )

    async def _metrics(self, request: Request) -> Response:
        return Response(
            self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": self.core.pool.model_list()})

    def _collect(self) -> None:
        core = self.core
        now = core.clock()
        self.metrics.fill_queues(core.dispatcher.scheduler.snapshot(now))
        self.metrics.programs.set(float(len(core.dispatcher.table)))
        states = core.pool.states
        metrics = self.metrics
        # replace(): a removed backend's series disappear with it.
        metrics.in_flight.replace({(b,): float(s.in_flight) for b, s in states.items()})
        metrics.backend_up.replace({(b,): float(s.healthy) for b, s in states.items()})
        metrics.backend_circuit.replace(
            {(b,): _CIRCUIT_CODES.get(s.status(), 0.0) for b, s in states.items()}
        )
        metrics.backend_waiting.replace(
            {
                (b,): float(s.load.num_waiting)
                for b, s in states.items()
                if s.load.num_waiting is not None
            }
        )
