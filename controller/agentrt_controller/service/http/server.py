"""Running the controller: embedded on a free loopback port, or as the CLI's server.

Both serve the :class:`ControllerApp` behind :class:`~agentrt_serving.hardening.HardenedApp`
(the hardened HTTP surface the controller shares with the engine emulator) on uvicorn's
httptools protocol with a request-head timeout, the header size limit and the connection limit
of the config (docs/security.md, "Hardened HTTP surface"), on uvloop as a process; every
answer the guard makes itself is in the controller's OpenAI error envelope.

The CLI's server binds its socket before anything is printed (a port in use is a
:class:`ConfigError`, and the start-up line never appears) and drains on SIGTERM or SIGINT
(docs/controller.md, "Lifecycle"): the listening socket is closed at once (new connections are
refused, and a replacement can bind the port), ``/readyz`` answers 503, a new call reaching the
draining app on a connection still open is answered 503 ``draining`` with ``Retry-After`` and
``Connection: close`` (nothing done: the SDK resends it, agentrt.runtime.transports.retry), calls
in flight get ``shutdown_grace_s`` to finish, the rest are then cancelled (which closes their
backend connections, so the engine frees them), and the process exits normally.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from types import FrameType

import uvicorn
from opentelemetry.trace import TracerProvider

from agentrt.errors import ConfigError
from agentrt_controller.backends.api import Backend
from agentrt_controller.cost_model import CostFunction
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.errors import error_body
from agentrt_controller.service.http.access_log import AccessLog
from agentrt_controller.service.http.app import ControllerApp
from agentrt_controller.service.http.direct import direct_routes
from agentrt_controller.service.telemetry.otel import ControllerTelemetry
from agentrt_serving.asgi import Receive, Scope, Send
from agentrt_serving.hardening import HardenedApp, HttpLimits
from agentrt_serving.logs import iso_time, server_log_config
from agentrt_serving.uvicorn_server import (
    EmbeddedServer,
    GuardedApp,
    WithDirectRoutes,
    listening_socket,
    running,
    uvicorn_config,
)

__all__ = ["run_controller", "serve_controller"]

# In-flight requests get this long when an embedded controller stops (seconds).
_EMBEDDED_GRACE_S = 1.0
# The guard's crash records keep the logger name they had when the guard lived here.
_HARDENING_LOG = logging.getLogger("agentrt_controller.service.http.hardening")
_log = logging.getLogger("agentrt.controller")


class _DrainingServer(uvicorn.Server):
    """uvicorn for the CLI: prints ``banner`` once serving; SIGTERM / SIGINT drain the app.

    uvicorn's own signal handling re-raises the signal after its shutdown, so the process
    would die of it; a drained controller exits normally instead.
    """

    def __init__(
        self, config: uvicorn.Config, app: ControllerApp, banner: Callable[[int], str]
    ) -> None:
        super().__init__(config)
        self._app = app
        self._banner = banner

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            freeze_startup_heap()
        line = self._banner(self.config.port) if self.started else ""
        if line:  # timed like every log line (agentrt_serving.logs)
            print(f"{iso_time(time.time())} {line}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        handled = (signal.SIGTERM, signal.SIGINT)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self._app.draining:
            _log.warning(
                "draining: %s received; calls in flight get %.0f s (shutdown_grace_s)",
                signal.Signals(sig).name, self._app.config.shutdown_grace_s,
            )  # fmt: skip
        self._app.draining = True  # /readyz answers 503 from now on
        super().handle_exit(sig, frame)


#: The young generation's collection threshold once the start-up heap is frozen (CPython's
#: default is 700): a collection per ~20 calls under load (~10 µs of CPU per call) walked the
#: objects of the calls in flight, which their reference counts free anyway; at 10,000 it is
#: one of ~1 ms per ~10,000 calls (docs/benchmarks.md, "Where the CPU goes (sampled)").
YOUNG_GC_THRESHOLD = 10_000


def freeze_startup_heap() -> None:
    """Collect the start-up's garbage, then move every object left (modules, code, the app:
    ~75 K) out of the cyclic garbage collector's reach (:func:`gc.freeze`), and raise the
    young generation's threshold to :data:`YOUNG_GC_THRESHOLD` (the older ones keep theirs).

    Without the freeze each full collection walks them all again (~48 ms each, about every
    2,400 calls under load: ~20 µs of CPU per call and a pause every call in flight waits out;
    docs/benchmarks.md, "Where the CPU goes (sampled)"). Frozen objects are never freed: a
    start-up object that later becomes cyclic garbage stays (once; nothing per call). Called
    once by the CLI's server when it serves; an embedded controller shares its process with
    its host and leaves the host's collector alone.
    """
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, middle, old)


#: Headers the controller forwards to backends or parses: their values must be ASCII.
_FORWARDED_OR_PARSED = frozenset(
    {"authorization", "x-request-id", "openai-organization", "openai-project", "traceparent",
     "tracestate", "baggage"}
)  # fmt: skip
_NUMERIC_HEADERS = frozenset({"x-agentrt-timeout-ms", "x-agentrt-attempt"})
_GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
_ERROR_TYPES = {400: "invalid_request_error", 408: "timeout"}


def _ascii_only(name: str) -> bool:
    return name in _FORWARDED_OR_PARSED or name.startswith("x-agentrt-")


def _error_body(status: int, message: str, param: str | None) -> bytes:
    if status >= 500:
        return error_body(message, "server_error", param, "internal_error")
    return error_body(message, _ERROR_TYPES.get(status, "invalid_request_error"), param)


def _route_of(scope: Scope) -> str:
    """A bounded route label: the matched route's template, a generation path, or
    ``unmatched``."""
    route = scope.get("route")
    template = getattr(route, "path", None)
    if isinstance(template, str):
        return template
    path = scope.get("path")
    return path if path in _GENERATION_PATHS else "unmatched"


class _DrainGate:
    """Answers new OpenAI API calls (``/v1/...``) 503 ``draining`` while ``app`` drains, with
    ``Retry-After`` (``retry_after_s``, at least 1) and ``Connection: close``, before reading
    their bodies or doing anything: safe for any client to send again, to the replacement.
    Probes, metrics, the admin API and program events pass (their answers say draining
    themselves, or are bookkeeping of calls still in flight)."""

    def __init__(self, app: ControllerApp) -> None:
        self.app = app
        self._retry_after = str(max(1, app.config.retry_after_s)).encode()
        self._body = error_body(
            "the controller is shutting down; send the call again (Retry-After)",
            "service_unavailable",
            None,
            "draining",
        )

    @staticmethod
    def drains(path: str) -> bool:
        """Whether calls on ``path`` (or under it, a path prefix) are answered 503 while the
        app drains."""
        return path.startswith("/v1/")

    def answer_for(self, path: str) -> tuple[list[tuple[bytes, bytes]], bytes] | None:
        """:meth:`answer` for calls on ``path`` (or under it) while the app drains, None when
        they pass (the fast path's routes: service/http/direct.py)."""
        return self.answer() if self.drains(path) else None

    def answer(self) -> tuple[list[tuple[bytes, bytes]], bytes]:
        """The 503's headers (without ``content-length``) and body."""
        headers = [
            (b"content-type", b"application/json"),
            (b"retry-after", self._retry_after),
            (b"connection", b"close"),
        ]
        return headers, self._body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self.app
        if not (app.draining and scope["type"] == "http" and self.drains(scope["path"])):
            await app(scope, receive, send)
            return
        headers, body = self.answer()
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def hardened(app: ControllerApp, gate: _DrainGate | None = None) -> HardenedApp:
    """``app`` (behind ``gate``, by default a new drain gate) behind the hardening middleware;
    crashes count in ``agentrt_controller_http_internal_errors_total{route}``."""
    crashes = app.metrics.registry.counter(
        "agentrt_controller_http_internal_errors_total",
        "Requests answered 500 because of an unhandled error, by route (see the log)",
        ("route",),
    )
    return HardenedApp(
        gate or _DrainGate(app),
        limits=HttpLimits.from_config(app.config),
        ascii_only=_ascii_only,
        numeric=_NUMERIC_HEADERS,
        error_body=_error_body,
        on_internal_error=lambda route: crashes.inc(1.0, route),
        route_of=_route_of,
        logger=_HARDENING_LOG,
    )


def served(app: ControllerApp) -> GuardedApp:
    """What uvicorn serves: :func:`hardened` ``app``, inside the access log unless
    ``access_log = "off"`` (outermost, so the guard's own refusals are logged too); with
    ``http_path = "direct"`` (the default), the fast path's routes beside it
    (service/http/direct.py), which the guard, the drain gate and the access log serve too."""
    gate = _DrainGate(app)
    guarded = hardened(app, gate)
    form = app.config.access_log
    outer: GuardedApp = guarded if form == "off" else AccessLog(guarded, form)
    if app.config.http_path == "asgi":
        return outer
    log = outer if isinstance(outer, AccessLog) else None
    return WithDirectRoutes(outer, *direct_routes(app, guarded, gate.answer_for, log))


def _flush_access_log(server: uvicorn.Server) -> None:
    """Write the access log's held lines (up to FLUSH_AFTER_S of them, whose timer went with
    the loop: a server stopped, or its loop crashed)."""
    served_app = server.config.app
    if isinstance(served_app, WithDirectRoutes):
        served_app = served_app.app
    if isinstance(served_app, AccessLog):
        served_app.flush()


def _uvicorn_config(
    app: ControllerApp, port: int, graceful_shutdown_s: float, *, process: bool = False
) -> uvicorn.Config:
    """``process``: the CLI's server, which sets up the process's logging (timestamps on
    every line, the access log on stdout: agentrt_serving.logs); embedded, the host program's
    logging stays as it is."""
    config = app.config
    return uvicorn_config(
        served(app),
        host=config.host,
        port=port,
        log_level=config.log_level,
        graceful_shutdown_s=graceful_shutdown_s,
        log_config=(
            server_log_config(config.log_level, access_log=config.access_log != "off")
            if process
            else None
        ),
    )


def _bound_socket(config: ControllerConfig) -> socket.socket:
    """A socket listening on the config's address; :class:`ConfigError` when it cannot be."""
    try:
        return listening_socket(config.host, config.port)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {config.host}:{config.port}: {exc}") from exc


@contextlib.asynccontextmanager
async def serve_controller(
    config: ControllerConfig,
    *,
    backends: Sequence[Backend] | None = None,
    tracer_provider: TracerProvider | None = None,
    cost: CostFunction | None = None,
    on_app: Callable[[ControllerApp], None] | None = None,
) -> AsyncIterator[str]:
    """Run a controller in this event loop; yields its base URL (``http://host:port``).

    ``config.port = 0`` picks a free port. The server stops when the block exits. ``on_app``
    receives the :class:`ControllerApp` (tests inspect its state).
    """
    app = ControllerApp(config, backends=backends, tracer_provider=tracer_provider, cost=cost)
    if on_app is not None:
        on_app(app)
    sock = _bound_socket(config)
    port = sock.getsockname()[1]
    server = EmbeddedServer(_uvicorn_config(app, port, _EMBEDDED_GRACE_S))

    def not_started() -> ConfigError:
        return ConfigError("the controller did not start (see its log)")

    try:
        async with running(server, sock, not_started=not_started):
            host = f"[{config.host}]" if ":" in config.host else config.host
            yield f"http://{host}:{port}"
    finally:
        _flush_access_log(server)


def run_controller(
    config: ControllerConfig,
    banner: str | Callable[[int], str] = "",
    *,
    telemetry: ControllerTelemetry | None = None,
) -> None:
    """Serve until SIGTERM / SIGINT, then drain (the ``agentrt controller serve`` command).

    ``banner`` (a line, or a function of the bound port) is printed to stderr once the socket
    is bound and the app has started. ``telemetry`` (service/telemetry/otel.py) exports spans and
    metrics; it is shut down (queued spans flushed) when the server has stopped. Raises
    :class:`ConfigError` for an invalid configuration or an address that cannot be bound.
    """
    try:
        _run(config, banner, telemetry)
    finally:
        if telemetry is not None:
            telemetry.shutdown()


def _run(
    config: ControllerConfig,
    banner: str | Callable[[int], str],
    telemetry: ControllerTelemetry | None,
) -> None:
    app = ControllerApp(
        config,
        tracer_provider=telemetry.tracer_provider if telemetry is not None else None,
        metrics_push=telemetry.metrics if telemetry is not None else None,
    )
    sock = _bound_socket(config)
    server: _DrainingServer | None = None
    try:
        server = _DrainingServer(
            _uvicorn_config(app, sock.getsockname()[1], config.shutdown_grace_s, process=True),
            app,
            banner if callable(banner) else lambda _port: banner,
        )
        server.run(sockets=[sock])
    finally:
        sock.close()
        if server is not None:
            _flush_access_log(server)
