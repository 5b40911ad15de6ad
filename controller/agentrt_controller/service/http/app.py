"""The controller service as one ASGI application object, built from explicit config.

::

    app = ControllerApp(config)                 # validates config, builds policies
    uvicorn.run(app, ...)                       # or: async with serve_controller(config)

No globals: the HTTP client, the :class:`~agentrt_controller.service.core.facade.ControllerCore`
(backends, dispatcher, retention, the clock), metrics and tracer provider belong to the
:class:`ControllerApp`. Its ASGI lifespan runs the core's loops in a task group and closes
everything on shutdown. The endpoints translate HTTP to calls of the core and back. The two OpenAI
generation paths bypass Starlette's router (a dict lookup) to keep per-call overhead small;
everything else is an ordinary Starlette app.
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator, Sequence

import anyio
from opentelemetry.trace import TracerProvider
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentrt import __version__
from agentrt.errors import ConfigError
from agentrt_controller.backends.api import Backend
from agentrt_controller.backends.factory import build_backend
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.backends.transport import HttpPool
from agentrt_controller.cost_model import CostFunction
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core.clock import Clock, clock_for
from agentrt_controller.service.core.facade import ControllerCore
from agentrt_controller.service.core.tenants import ADMIN_STATE, TENANT_STATE, Tenant
from agentrt_controller.service.errors import Forbidden, Unauthorized, error_body
from agentrt_controller.service.http.admin import BACKENDS_PATH, admin_routes, is_privileged
from agentrt_controller.service.http.events import CLIENT_GONE, event_routes
from agentrt_controller.service.http.hardening import internal_error_response
from agentrt_controller.service.http.incoming import Receive, Scope, Send
from agentrt_controller.service.http.limits import RequestLimits
from agentrt_controller.service.http.openapi import OPENAPI_PATH, controller_openapi
from agentrt_controller.service.http.passthrough import PASSTHROUGH_PATHS, PassthroughEndpoint
from agentrt_controller.service.http.proxy import CompletionsEndpoint, send_error
from agentrt_controller.service.telemetry.metrics import ServiceMetrics
from agentrt_controller.service.telemetry.otlp_metrics import MetricsPush
from agentrt_controller.service.telemetry.prometheus import CONTENT_TYPE
from agentrt_controller.service.telemetry.tracing import CallTracing
from agentrt_serving.openapi import OpenApiEndpoint

__all__ = ["ControllerApp"]

_GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
#: Paths that need a tenant's API key when keys are configured (the backend admin API has its
#: own token; the probes and /metrics have their own rules, see their endpoints).
_TENANT_PATHS = ("/v1/", "/agentrt/v1/", "/tokenize", "/detokenize")


def _client_gone_response(request: Request, exc: Exception) -> Response:
    """The client left before its request body arrived (e.g. an SDK that gave up on a
    tool-wait event): nobody reads an answer, so no traceback; 499 in the access log, as
    nginx names it."""
    return Response(status_code=CLIENT_GONE)


def _routing_error_response(request: Request, exc: Exception) -> Response:
    """Starlette's router errors (404: no such path, 405: not that method) in the OpenAI
    error envelope, like every other error of the controller; 405 keeps its ``Allow``."""
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    if status == 404:
        message = f"no endpoint {request.url.path} (docs/controller.md, 'Endpoints')"
    elif status == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    else:
        message = exc.detail
    headers = {"content-type": "application/json", **(exc.headers or {})}
    return Response(
        error_body(message, "invalid_request_error", None, _ROUTING_CODES.get(status)),
        status,
        headers=headers,
    )


_ROUTING_CODES = {404: "not_found", 405: "method_not_allowed"}


class ControllerApp:
    """The controller: an ASGI app. Raises :class:`~agentrt.errors.ConfigError` on bad config.

    ``backends`` replaces the ones named in ``config.backends`` (tests pass fakes);
    ``tracer_provider`` enables spans; ``metrics_push`` exports the metrics over OpenTelemetry
    while the app runs (service/telemetry/otel.py); ``cost`` replaces the configured cost model;
    ``clock`` is the monotonic clock in seconds that every policy decision uses (default: the
    wall clock, × ``config.time_scale`` in front of engine emulators run faster than real time).
    """

    def __init__(
        self,
        config: ControllerConfig,
        *,
        backends: Sequence[Backend] | None = None,
        tracer_provider: TracerProvider | None = None,
        metrics_push: MetricsPush | None = None,
        cost: CostFunction | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self._metrics_push = metrics_push
        self.metrics = ServiceMetrics()
        self.http = HttpPool.create(
            read_timeout_s=config.backend_timeout_s,
            stall_s=config.backend_stall_s,
            connect_timeout_s=config.connect_timeout_s,
            kind=config.http_transport,
            shards=config.http_pool_shards,
            max_connections=config.max_connections,
        )
        if backends is None:
            backends = [self._build_backend(spec) for spec in config.backends]
        if not backends:
            raise ConfigError("the controller needs at least one backend")
        #: The controller's core behind one facade; the endpoints only talk to it.
        self.core = ControllerCore(
            config,
            list(backends),
            metrics=self.metrics,
            cost=cost,
            clock=clock if clock is not None else clock_for(config.time_scale),
        )
        #: Set on SIGTERM (service/http/server.py): readiness answers 503 while calls drain.
        self.draining = False
        #: Requests the fast path took (service/http/direct.py; tests read it).
        self.direct_calls = 0
        self._admin_token = config.admin_token.encode() if config.admin_token else None
        tracing = CallTracing(tracer_provider)
        limits = RequestLimits(
            max_body_bytes=config.max_body_bytes,
            forward_client_authorization=config.forward_client_authorization,
        )
        self._generation: dict[str, CompletionsEndpoint | PassthroughEndpoint] = {
            path: CompletionsEndpoint(path, self.core, tracing, metrics=self.metrics, limits=limits)
            for path in _GENERATION_PATHS
        }
        # Routed but not scheduled (embeddings, vLLM's tokenizer endpoints).
        self._generation.update(
            (path, PassthroughEndpoint(path, self.core, metrics=self.metrics, limits=limits))
            for path in PASSTHROUGH_PATHS
        )
        self.metrics.on_collect(self.core.collect_metrics)
        self._starlette = Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/readyz", self._readiness, methods=["GET"]),
                Route("/livez", self._liveness, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route(OPENAPI_PATH, OpenApiEndpoint(controller_openapi()), methods=["GET"]),
                *event_routes(self.core, admin_token_set=config.admin_token is not None),
                *admin_routes(self.core, self._build_backend, config.admin_token),
            ],
            lifespan=self._lifespan,
            # The OpenAI-shaped 500 (docs/security.md); the server's guard logs it once. An
            # unknown path (404) or method (405) is answered in the same envelope.
            exception_handlers={
                Exception: internal_error_response,
                HTTPException: _routing_error_response,
                ClientDisconnect: _client_gone_response,
            },
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope["path"].startswith(_TENANT_PATHS) and not scope["path"].startswith(
                BACKENDS_PATH
            ):
                refusal = self._authenticate(scope)
                if refusal is not None:
                    self.metrics.tenant_refusals.inc(1.0, "", "401")
                    await send_error(send, refusal)
                    return
            endpoint = self._generation.get(scope["path"])
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await self._starlette(scope, receive, send)

    def endpoint(self, path: str) -> CompletionsEndpoint:
        """The generation endpoint of ``path`` (``/v1/chat/completions``, ...)."""
        endpoint = self._generation[path]
        assert isinstance(endpoint, CompletionsEndpoint)
        return endpoint

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: object) -> AsyncIterator[None]:
        async with self.http.client, anyio.create_task_group() as group:
            await group.start(self.core.run)
            if self._metrics_push is not None:
                await group.start(self._metrics_push.run, self.metrics.registry)
            yield
            group.cancel_scope.cancel()
        await self.core.aclose()

    def _authenticate(self, scope: Scope) -> Unauthorized | None:
        """Put the caller's tenant (or the admin mark) in ``scope["state"]``; the refusal when
        the ``Authorization`` header holds neither a tenant's key nor the admin token."""
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
                break
        tenant, admin, refusal = self.credentials(authorization)
        state = scope.setdefault("state", {})
        if admin:
            state[ADMIN_STATE] = True
        if tenant is not None:
            state[TENANT_STATE] = tenant
        return refusal

    def credentials(
        self, authorization: str | None
    ) -> tuple[Tenant | None, bool, Unauthorized | None]:
        """Who sends ``authorization`` (the ``Authorization`` header's value, ``None``: none):
        ``(tenant, admin, refusal)`` — the tenant whose key it holds, whether it holds the
        admin token, and the refusal when it holds neither."""
        admin = False
        if self._admin_token is not None and authorization is not None:
            scheme, _, token = authorization.strip().partition(" ")
            admin = scheme.lower() == "bearer" and hmac.compare_digest(
                token.strip().encode(), self._admin_token
            )
        tenant = self.core.authenticate(authorization)
        if tenant is not None or admin:
            return tenant, admin, None
        if authorization is None:
            return None, False, Unauthorized("missing API key: send Authorization: Bearer <key>")
        return None, False, Unauthorized("invalid API key")

    def _build_backend(self, spec: BackendSpec) -> Backend:
        """The backend of ``spec`` on the app's HTTP pool (start-up and the admin API's POST);
        its ``api_key`` option stays in the backend, which sends it itself."""
        return build_backend(spec, self.http)

    # --- plain endpoints ---------------------------------------------------------------------

    async def _liveness(self, request: Request) -> Response:
        """``/livez``: 200 while the process serves (no backend is asked); the status only."""
        return JSONResponse({"status": "ok"})

    def _ready(self) -> tuple[str, int]:
        """Readiness: ``(status, HTTP status)``, 503 without a healthy backend or draining."""
        if self.draining:
            return "draining", 503
        return ("ok", 200) if self.core.healthy() else ("degraded", 503)

    async def _health(self, request: Request) -> Response:
        """``/health``: readiness, the status only, for anyone."""
        status, code = self._ready()
        return JSONResponse({"status": status}, status_code=code)

    async def _readiness(self, request: Request) -> Response:
        """``/readyz``: readiness for anyone; the version and each backend's health (its
        ``host:port``) only for the admin token or a loopback caller."""
        status, code = self._ready()
        body: dict[str, object] = {"status": status}
        if is_privileged(request, self.config.admin_token):
            body.update(version=__version__, backends=self.core.backend_health())
        return JSONResponse(body, status_code=code)

    async def _metrics(self, request: Request) -> Response:
        """``/metrics``: backend ids (``host:port`` by default) and per-tenant counts, so only
        for the admin token or a loopback caller unless ``metrics_public`` (docs/security.md)."""
        if not self.config.metrics_public and not is_privileged(request, self.config.admin_token):
            error = Forbidden(
                "/metrics is served to loopback clients and the admin token only "
                "(metrics_public = true opens it)"
            )
            return Response(error.body(), error.status_code, media_type="application/json")
        return Response(self.metrics.render(), headers={"content-type": CONTENT_TYPE})

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": self.core.models()})
