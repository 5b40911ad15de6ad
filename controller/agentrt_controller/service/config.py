"""Controller configuration: defaults < config file (TOML or JSON) < environment < CLI flags.

Every key of :class:`ControllerConfig` can be set in a file (same names; ``backends`` is a list
of URL strings or tables ``{url, kind, id, priority, options}``), as an environment variable
``AGENTRT_CONTROLLER_<KEY>`` (``BACKENDS`` is whitespace-separated; ``SCHEDULING``, ``COST``,
``ADMISSION``, ``BREAKER``, ``ROUTING`` and ``RETENTION_OPTIONS`` are JSON objects), or on
the command line. Unknown keys in the file and unknown CLI options are errors. An
``AGENTRT_CONTROLLER_*`` variable that names no key is ignored with one warning naming all of
them (a container platform sets variables of its own under that prefix); Kubernetes'
service-link variables of a Service named ``agentrt-controller`` (``..._SERVICE_HOST``,
``..._SERVICE_PORT``, ``..._PORT=tcp://10.0.0.1:8000``, ``..._PORT_8000_TCP...``) are
recognised and ignored without one.
"""

from __future__ import annotations

import json
import logging
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from agentrt.errors import ConfigError
from agentrt_controller import defaults
from agentrt_controller.admission_window import AdmissionWindow
from agentrt_controller.backends.breaker import BreakerConfig
from agentrt_controller.backends.spec import BackendSpec

__all__ = ["ENV_PREFIX", "AdmissionWindow", "ControllerConfig", "load_config"]

ENV_PREFIX = "AGENTRT_CONTROLLER_"


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Everything the controller service needs; validated on construction."""

    #: Listen address.
    host: str = "127.0.0.1"
    #: Listen port; 0 = any free port (embedding and tests).
    port: int = 8080
    #: The model servers behind the controller (at least one).
    backends: tuple[BackendSpec, ...] = ()
    # The policy fields' defaults come from agentrt_controller.defaults, which the simulator's
    # `agentrt bench sim` reads too: what runs with no flags is what the benchmarks measured.

    #: Scheduling policy name for ``build_scheduler`` (``fcfs``, ``mlfq``, ``plas``, ``atlas``).
    policy: str = defaults.POLICY
    #: Policy parameters (queue boundaries in seconds, quanta in tokens, beta...), passed to
    #: the scheduler factory unchanged (over ``agentrt_controller.defaults.SCHEDULING``); it
    #: rejects unknown keys.
    scheduling: Mapping[str, Any] = field(default_factory=dict)
    #: Cost-model parameters (seconds per uncached prompt token, per output token...).
    cost: Mapping[str, Any] = field(default_factory=dict)
    #: Router name: ``prefix`` (prefix-cache aware, the default), ``round_robin``,
    #: ``least_loaded``, ``autellix`` or ``pipeline`` (docs/routing.md).
    router: str = defaults.ROUTER
    #: Router parameters (``agentrt_controller.routing.factory.build_router``), e.g.
    #: ``{"queued_tokens_per_call": 256}``; unknown keys are errors.
    routing: Mapping[str, Any] = field(default_factory=dict)
    #: KV retention during tool waits: ``on`` or ``off`` (docs/routing.md, "KV retention").
    retention: str = defaults.RETENTION
    #: Retention policy parameters (``agentrt_controller.retention.RetentionConfig`` fields).
    retention_options: Mapping[str, Any] = field(default_factory=dict)
    #: Per-backend in-flight window (calls), ``None`` = unlimited, ``"adaptive"`` (the
    #: default) = sized from the backend: steered by its scraped ``vllm:num_requests_waiting``
    #: and never above its batch size (when it reports one) plus ``target_waiting``.
    admission_window: AdmissionWindow = defaults.ADMISSION_WINDOW
    #: Parameters of the adaptive window (``AdaptiveWindowConfig`` fields: ``initial_window``,
    #: ``min_window``, ``max_window``, ``target_waiting``...); only with ``"adaptive"``.
    admission: Mapping[str, Any] = field(default_factory=lambda: dict(defaults.ADMISSION))
    #: Calls the controller holds in its queues at most; more arrivals get HTTP 503 with
    #: ``Retry-After`` (a bound on memory under a flood).
    max_queued_calls: int = 100_000
    #: Largest accepted request body (bytes); larger bodies get HTTP 413 while being read.
    #: No larger than what the backends accept (the emulator's and vLLM's default: 16 MiB).
    max_body_bytes: int = 16 * 1024 * 1024
    #: Period of each backend's health probe and metric scrape, and the probe's time limit
    #: (seconds): a dead backend leaves routing within one interval.
    scrape_interval_s: float = 1.0
    #: Circuit-breaker thresholds (``BreakerConfig`` fields: ``failure_threshold``,
    #: ``error_rate``, ``window``, ``min_calls``, ``cooldown_s``, ``success_threshold``,
    #: ``backoff``, ``max_cooldown_s``); unknown keys are errors.
    breaker: Mapping[str, Any] = field(default_factory=dict)
    #: Bearer token the admin endpoints (adding / removing backends) require; ``None`` = they
    #: accept requests from loopback clients only.
    admin_token: str | None = None
    #: Longest wait for a backend's answer to start or continue (seconds); ``None`` = forever.
    backend_timeout_s: float | None = 600.0
    #: A backend that sends no byte of a started stream for this long is stalled (seconds;
    #: ``None`` = only ``backend_timeout_s``): its call is aborted, and retried elsewhere when
    #: nothing reached the client yet, else failed with an error event (docs/controller.md,
    #: "Lifecycle").
    backend_stall_s: float | None = 30.0
    #: On SIGTERM, how long calls in flight may take to finish after the controller stopped
    #: accepting connections (seconds); the rest are then aborted upstream.
    shutdown_grace_s: float = 30.0
    #: Longest wait to connect to a backend (seconds).
    connect_timeout_s: float = 5.0
    #: Attempts on other backends after a backend could not be reached (before streaming).
    max_retries: int = 2
    #: ``Retry-After`` seconds sent with HTTP 503 when no backend is available.
    retry_after_s: int = 1
    #: A program with no call and no event for this long leaves the process table (seconds).
    program_idle_timeout_s: float = 600.0
    #: Connection pool size towards all backends together.
    max_connections: int = 1024
    #: HTTP transport towards backends: ``fast`` (HTTP/1.1 keep-alive on httptools; https
    #: falls back to httpx) or ``httpx`` (httpx's own, in ``http_pool_shards`` pools).
    http_transport: str = "fast"
    #: Independent connection pools used in turn with ``http_transport = "httpx"``
    #: (per-request pool overhead grows with the number of connections in a pool).
    http_pool_shards: int = 8
    #: uvicorn log level (``critical``, ``error``, ``warning``, ``info``, ``debug``).
    log_level: str = "warning"
    #: Largest request head (request line + headers, bytes); larger ones are refused.
    max_header_bytes: int = 64 * 1024
    #: A connection must deliver a complete request head within this many seconds of its
    #: first byte (and an idle keep-alive connection is closed after it): slow clients are cut.
    header_timeout_s: float = 10.0
    #: Connections and requests served at once; more get HTTP 503 (uvicorn's
    #: ``limit_concurrency``).
    max_concurrency: int = 4096
    # --- tenants (docs/security.md; service/core/tenants.py) ---------------------------------
    #: vLLM's ``--api-key``: one key for the one tenant ``default`` (never shown in a repr).
    api_key: str | None = field(default=None, repr=False)
    #: ``tenant=key,tenant=key`` (plain keys or ``sha256:<hex>`` hashes), e.g. from
    #: ``AGENTRT_CONTROLLER_API_KEYS``; every tenant gets the default quotas.
    api_keys: str | None = field(default=None, repr=False)
    #: A TOML key file: tenants with key hashes, weights, cache groups and quotas.
    api_key_file: str | None = None
    #: Secret the per-tenant ``cache_salt`` values are derived from; ``None`` = random at
    #: start (salts then change on restart; replicas sharing backends should share one).
    cache_salt_secret: str | None = field(default=None, repr=False)
    #: Forward the client's ``Authorization`` header to the backends (single-tenant setups
    #: whose backends check the same key); off = the backend's own ``api_key`` or none.
    forward_client_authorization: bool = False
    #: Programs the process table holds at most (all tenants); at the cap, the least recently
    #: active idle program is evicted, else a new program gets HTTP 503.
    max_programs: int = 100_000
    #: Longest predicted tool / human wait a ``tool-start`` event may announce (seconds);
    #: longer ones are clamped. ``None`` = ``program_idle_timeout_s``.
    max_predicted_wait_s: float | None = None
    #: Fair-share scheduling between tenants: ``auto`` (on when more than one tenant is
    #: configured), ``on`` or ``off``.
    fair_share: str = "auto"
    #: Per-tenant caps on calls in flight under fair shares (docs/tenancy.md, "Isolation of
    #: the batch"): empty = off (the default); a table of ``IsolationConfig`` fields = on.
    tenant_isolation: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in [0, 65535], got {self.port}")
        window = self.admission_window
        if (
            window is not None
            and window != "adaptive"
            and (isinstance(window, bool) or not isinstance(window, int) or window < 1)
        ):
            raise ConfigError(
                f"admission_window must be >= 1, 'adaptive' or unlimited, got {window!r}"
            )
        for name in ("max_body_bytes", "max_connections", "http_pool_shards", "max_queued_calls",
                     "max_header_bytes", "max_concurrency"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        for name in ("scrape_interval_s", "connect_timeout_s", "program_idle_timeout_s",
                     "header_timeout_s"):  # fmt: skip
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds")
        if self.backend_timeout_s is not None and not self.backend_timeout_s > 0:
            raise ConfigError("backend_timeout_s must be > 0 seconds or unset")
        if self.backend_stall_s is not None and not self.backend_stall_s > 0:
            raise ConfigError("backend_stall_s must be > 0 seconds or unset")
        if not self.shutdown_grace_s >= 0:
            raise ConfigError("shutdown_grace_s must be >= 0 seconds")
        if self.max_retries < 0 or self.retry_after_s < 0:
            raise ConfigError("max_retries and retry_after_s must be >= 0")
        ids = [b.backend_id for b in self.backends]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"backend ids must be unique, got {ids}")
        if self.http_transport not in ("fast", "httpx"):
            raise ConfigError(f"http_transport must be fast or httpx, got {self.http_transport!r}")
        if self.retention not in ("on", "off"):
            raise ConfigError(f"retention must be on or off, got {self.retention!r}")
        if self.log_level not in ("critical", "error", "warning", "info", "debug", "trace"):
            raise ConfigError(f"unknown log_level {self.log_level!r}")
        BreakerConfig.from_mapping(dict(self.breaker))  # raises ConfigError when invalid
        if self.max_programs < 1:
            raise ConfigError("max_programs must be >= 1")
        wait = self.max_predicted_wait_s
        if wait is not None and not wait > 0:
            raise ConfigError("max_predicted_wait_s must be > 0 seconds or unset")
        if self.fair_share not in ("auto", "on", "off"):
            raise ConfigError(f"fair_share must be auto, on or off, got {self.fair_share!r}")
        if self.admin_token is not None and len(self.admin_token) < 8:
            raise ConfigError("admin_token must have at least 8 characters")


_FIELDS = {f.name: f for f in fields(ControllerConfig)}

_log = logging.getLogger(__name__)

#: The value Kubernetes gives ``<SERVICE>_PORT`` for a Service: ``tcp://10.0.0.1:8000``.
_SERVICE_LINK_URL = re.compile(r"(tcp|udp|sctp)://[^\s]+:\d+")


def _is_service_link(key: str, value: str) -> bool:
    """Whether ``AGENTRT_CONTROLLER_<KEY>=value`` is one of the variables Kubernetes injects
    for a Service named ``agentrt-controller`` (no config key starts with ``service_`` or
    ``port_``)."""
    if key == "port":
        return _SERVICE_LINK_URL.fullmatch(value.strip()) is not None
    return key.startswith(("service_", "port_"))


_OPTIONAL_STRINGS = ("admin_token", "api_key", "api_keys", "api_key_file", "cache_salt_secret")
_BOOLS = {"true": True, "on": True, "1": True, "yes": True,
          "false": False, "off": False, "0": False, "no": False}  # fmt: skip

_WINDOW_ERROR = "admission_window must be N, adaptive or unlimited, got {!r}"


def _parse_window(value: Any) -> AdmissionWindow:
    if value is None or value == "adaptive":
        return value  # type: ignore[no-any-return]
    if isinstance(value, str):
        if value.lower() in ("unlimited", "none", "inf"):
            return None
        try:
            return int(value)
        except ValueError as exc:
            raise ConfigError(_WINDOW_ERROR.format(value)) from exc
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(_WINDOW_ERROR.format(value))


def _parse_backends(value: Any) -> tuple[BackendSpec, ...]:
    if isinstance(value, str):
        value = value.split()
    if not isinstance(value, list | tuple):
        raise ConfigError("backends must be a list")
    specs: list[BackendSpec] = []
    for item in value:
        if isinstance(item, BackendSpec):
            specs.append(item)
        elif isinstance(item, str):
            specs.append(BackendSpec.parse(item))
        elif isinstance(item, dict):
            specs.append(BackendSpec.from_mapping(item))
        else:
            raise ConfigError(f"a backend must be a URL string or a table, got {item!r}")
    return tuple(specs)


def _coerce(name: str, value: Any) -> Any:
    """Turn a file, environment or CLI value into the field's type."""
    if name == "backends":
        return _parse_backends(value)
    if name == "admission_window":
        return _parse_window(value)
    if name in _OPTIONAL_STRINGS and (value is None or value == ""):
        return None
    if name == "forward_client_authorization":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _BOOLS:
            return _BOOLS[value.lower()]
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    if name == "max_predicted_wait_s" and (value is None or value in ("", "none")):
        return None
    if name in ("scheduling", "cost", "admission", "breaker", "routing", "retention_options",
                "tenant_isolation"):  # fmt: skip
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ConfigError(f"{name} must be a JSON object: {exc}") from exc
        if not isinstance(value, dict):
            raise ConfigError(f"{name} must be a table / JSON object")
        return value
    optional_seconds = name in ("backend_timeout_s", "backend_stall_s")
    if optional_seconds and (value is None or value in ("", "none")):
        return None
    kind = _FIELDS[name].type
    try:
        if kind in ("int",):
            return int(value)
        if kind in ("float", "float | None"):
            return float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name} must be a number, got {value!r}") from exc
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a string, got {value!r}")
    return value


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read controller config {path}: {exc}") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except ValueError as exc:
        raise ConfigError(f"controller config {path} is not valid: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"controller config {path} must hold a table / object")
    section = data.get("controller", data)  # a [controller] table or top-level keys
    if not isinstance(section, dict):
        raise ConfigError(f"[controller] in {path} must be a table")
    return section


def load_config(
    file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ControllerConfig:
    """Merge defaults, ``file``, ``env`` (``AGENTRT_CONTROLLER_*``; ``..._CONFIG`` names a file
    when ``file`` is None) and ``overrides`` (CLI flags; ``None`` values are skipped).

    Raises :class:`ConfigError` for unknown file keys and options and for invalid values;
    unknown ``AGENTRT_CONTROLLER_*`` variables are logged once and ignored.
    """
    env = env or {}
    values: dict[str, Any] = {}
    path = file if file is not None else env.get(ENV_PREFIX + "CONFIG")
    if path:
        for key, value in _read_file(Path(path)).items():
            if key not in _FIELDS:
                raise ConfigError(f"unknown controller config key {key!r} in {path}")
            values[key] = _coerce(key, value)
    unknown: list[str] = []
    for var, value in env.items():
        if not var.startswith(ENV_PREFIX) or var == ENV_PREFIX + "CONFIG":
            continue
        key = var[len(ENV_PREFIX) :].lower()
        if _is_service_link(key, value):
            continue
        if key not in _FIELDS:
            unknown.append(var)
            continue
        values[key] = _coerce(key, value)
    if unknown:
        _log.warning(
            "ignoring environment variables that name no controller setting: %s",
            ", ".join(sorted(unknown)),
        )
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in _FIELDS:
            raise ConfigError(f"unknown controller option {key!r}")
        values[key] = _coerce(key, value)
    return replace(ControllerConfig(), **values)
