"""Controller configuration: defaults < config file (TOML or JSON) < environment < CLI flags.

Every key of :class:`ControllerConfig` can be set in a file (same names; ``backends`` is a list
of URL strings or tables ``{url, kind, id, priority, options}``), as an environment variable
``AGENTRT_CONTROLLER_<KEY>`` (``BACKENDS`` is whitespace-separated; ``SCHEDULING``, ``COST``,
``ADMISSION``, ``BREAKER``, ``ROUTING``, ``RETENTION_OPTIONS`` and ``TENANT_ISOLATION`` are JSON
objects), or on the command line. Unknown keys in the file and unknown CLI options are errors;
every value is validated by :class:`ControllerConfig` and its typed sections
(:mod:`agentrt_controller.config_check`), each problem reported with its key's path and its
source (``controller.scheduling.betta: unknown key (file controller.toml)``). An
``AGENTRT_CONTROLLER_*`` variable that names no key is ignored with one warning naming all of
them (a container platform sets variables of its own under that prefix); Kubernetes'
service-link variables of a Service named ``agentrt-controller`` (``..._SERVICE_HOST``,
``..._SERVICE_PORT``, ``..._PORT=tcp://10.0.0.1:8000``, ``..._PORT_8000_TCP...``) are
recognised and ignored without one. ``MODEL_ALIASES`` takes ``NAME=MODEL`` items and
``MODEL_FALLBACKS`` ``MODEL=A,B`` items, separated by whitespace, or a JSON object.
"""

from __future__ import annotations

import json
import logging
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from agentrt.errors import ConfigError
from agentrt_controller import defaults
from agentrt_controller.admission_window import AdmissionWindow, parse_admission_window
from agentrt_controller.backends.breaker import BreakerConfig
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.config_check import SectionError, check_fields, from_table, parse_section
from agentrt_controller.cost_model import CostModel
from agentrt_controller.retention.policy import RetentionConfig
from agentrt_controller.routing.factory import build_router
from agentrt_controller.scheduling.admission import AdaptiveWindowConfig
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.scheduling.isolation import IsolationConfig
from agentrt_controller.scheduling.memory import MemoryAdmissionConfig

__all__ = [
    "ENV_PREFIX",
    "AdmissionWindow",
    "ControllerConfig",
    "LogLevel",
    "PolicyName",
    "RouterName",
    "load_config",
]

ENV_PREFIX = "AGENTRT_CONTROLLER_"

#: The scheduling policies the controller runs (``srpt`` needs the simulator's oracle).
PolicyName = Literal["fcfs", "mlfq", "plas", "atlas", "gittins"]
#: The routers :func:`agentrt_controller.routing.factory.build_router` builds.
RouterName = Literal["prefix", "round_robin", "least_loaded", "autellix", "pipeline"]
#: uvicorn's log levels.
LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]

_WINDOW_ERROR = "must be N >= 1, adaptive or unlimited, got {!r}"


def _parse_window(value: object) -> AdmissionWindow:
    """A window from a file, the environment or code: ``N``, ``"adaptive"``, ``None`` /
    ``"unlimited"``."""
    try:
        window = parse_admission_window(value)
    except ConfigError:
        raise ConfigError(_WINDOW_ERROR.format(value)) from None
    if isinstance(window, int) and window < 1:
        raise ConfigError(_WINDOW_ERROR.format(value))
    return window


def _parse_backends(value: object) -> tuple[BackendSpec, ...]:
    """Backends from a list of URL strings / tables / specs, or one whitespace-separated
    string (the environment)."""
    if isinstance(value, str):
        value = value.split()
    if not isinstance(value, list | tuple):
        raise ConfigError("must be a list")
    specs: list[BackendSpec] = []
    for index, item in enumerate(value):
        if isinstance(item, BackendSpec):
            specs.append(item)
        elif isinstance(item, str):
            try:
                specs.append(BackendSpec.parse(item))
            except SectionError as exc:
                raise SectionError(str(index), exc.problems) from None
        elif isinstance(item, Mapping):
            specs.append(BackendSpec.from_mapping(item, str(index)))
        else:
            raise ConfigError(f"a backend must be a URL string or a table, got {item!r}")
    return tuple(specs)


def _blank_is_none(value: object) -> object:
    return None if value == "" else value


def _none_word_is_none(value: object) -> object:
    return None if value in ("", "none") else value


def _cost_table(value: object) -> object:
    """A ``cost`` table in either form (:meth:`CostModel.from_mapping`)."""
    return CostModel.from_mapping(value, "") if isinstance(value, Mapping) else value


def _isolation_table(value: object) -> object:
    """A ``tenant_isolation`` table; an empty one means off."""
    if isinstance(value, Mapping):
        if not value:
            return IsolationConfig(enabled=False)
        return parse_section(IsolationConfig, value, "")
    return value


def _pairs(value: object, what: str) -> list[tuple[str, str]]:
    """``NAME=VALUE`` items from a list of strings (repeated flags) or one string (the
    environment: items separated by whitespace)."""
    items = value.split() if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ConfigError(f"must be a table or a list of {what} strings")
    out = []
    for item in items:
        name, sep, text = str(item).partition("=")
        if not sep or not name.strip() or not text.strip():
            raise ConfigError(f"each entry must be {what}, got {item!r}")
        out.append((name.strip(), text.strip()))
    return out


def _parse_aliases(value: object) -> object:
    """Model aliases: a table ``{NAME = "MODEL"}``, a JSON object, or ``NAME=MODEL`` items
    (``--model-alias``, repeatable; the environment: separated by whitespace or commas)."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        value = json.loads(value)
    if isinstance(value, str):
        value = value.replace(",", " ")
    if isinstance(value, Mapping):
        return dict(value)
    return dict(_pairs(value, "NAME=MODEL"))


def _parse_fallbacks(value: object) -> object:
    """Fallback lists: a table ``{MODEL = ["A", "B"]}``, a JSON object, or ``MODEL=A,B`` items
    (``--model-fallback``, repeatable; the environment: separated by whitespace)."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        value = json.loads(value)
    if isinstance(value, Mapping):
        return {k: (v.split(",") if isinstance(v, str) else v) for k, v in value.items()}
    return {m: [c.strip() for c in text.split(",")] for m, text in _pairs(value, "MODEL=A,B")}


def _model_problems(
    aliases: Mapping[str, str], fallbacks: Mapping[str, tuple[str, ...]]
) -> list[tuple[tuple[str | int, ...], str]]:
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for alias, model in aliases.items():
        if not alias or not model:
            problems.append((("model_aliases",), f"empty name in {alias!r} = {model!r}"))
        elif alias == model:
            problems.append((("model_aliases", alias), "an alias cannot name itself"))
        elif model in aliases:
            problems.append(
                (("model_aliases", alias), f"names {model!r}, itself an alias: name the model")
            )
    for model, chain in fallbacks.items():
        if not chain or not all(chain):
            problems.append((("model_fallbacks", model), "needs one or more model names"))
        elif model in chain:
            problems.append((("model_fallbacks", model), "a model cannot fall back to itself"))
        elif len(set(chain)) != len(chain):
            problems.append((("model_fallbacks", model), f"names a model twice: {list(chain)}"))
        elif model in aliases:
            problems.append((("model_fallbacks", model), "is an alias: give the model's name"))
    return problems


_Seconds = Annotated[float, Field(gt=0)]
_OptionalSeconds = Annotated[_Seconds | None, BeforeValidator(_none_word_is_none)]
_Count = Annotated[int, Field(ge=1)]
_Secret = Annotated[str | None, BeforeValidator(_blank_is_none)]


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Everything the controller service needs; validated on construction
    (:mod:`agentrt_controller.config_check`): each field's annotation says what it accepts.

    A section (``scheduling``, ``cost``, ``admission``, ``breaker``, ``retention_options``,
    ``tenant_isolation``) may be given as its typed config or as a table of its fields
    (validated into that type); ``backends`` as specs, URL strings or tables. Raises
    :class:`~agentrt.errors.ConfigError` naming each bad key's path.
    """

    #: Listen address.
    host: str = "127.0.0.1"
    #: Listen port; 0 = any free port (embedding and tests).
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    #: The model servers behind the controller (at least one).
    backends: Annotated[tuple[BackendSpec, ...], BeforeValidator(_parse_backends)] = ()
    #: Model aliases, ``NAME -> MODEL``: a call naming ``NAME`` runs on ``MODEL`` (the body
    #: sent to the backend names ``MODEL``); ``/v1/models`` lists the alias too
    #: (docs/routing.md, "Several models").
    model_aliases: Annotated[dict[str, str], BeforeValidator(_parse_aliases)] = field(
        default_factory=dict
    )
    #: Fallbacks, ``MODEL -> [A, B...]``: when every backend of ``MODEL`` is out, a call for
    #: it runs on the first of these with a healthy backend.
    model_fallbacks: Annotated[dict[str, tuple[str, ...]], BeforeValidator(_parse_fallbacks)] = (
        field(default_factory=dict)
    )
    # The policy fields' defaults come from agentrt_controller.defaults, which the simulator's
    # `agentrt bench sim` reads too: what runs with no flags is what the benchmarks measured.

    #: Scheduling policy name for ``build_scheduler`` (``fcfs``, ``mlfq``, ``plas``, ``atlas``).
    policy: PolicyName = defaults.POLICY
    #: Policy parameters (queue boundaries in seconds, quanta in tokens, beta...); ``fcfs``
    #: takes none.
    scheduling: Annotated[SchedulerConfig, from_table(SchedulerConfig)] = field(
        default_factory=SchedulerConfig
    )
    #: Cost model (seconds per uncached prompt token, per output token...; a table may name a
    #: hardware ``profile`` instead: :meth:`CostModel.from_mapping`).
    cost: Annotated[CostModel, BeforeValidator(_cost_table)] = field(default_factory=CostModel)
    #: Router name: ``prefix`` (prefix-cache aware, the default), ``round_robin``,
    #: ``least_loaded``, ``autellix`` or ``pipeline`` (docs/routing.md).
    router: RouterName = defaults.ROUTER
    #: Router parameters (``agentrt_controller.routing.factory.build_router``), e.g.
    #: ``{"queued_tokens_per_call": 256}``; their shape depends on :attr:`router`, so they
    #: stay a table, checked on construction by building the router: unknown keys are errors.
    routing: Mapping[str, object] = field(default_factory=dict)
    #: KV retention during tool waits: ``on`` or ``off`` (docs/routing.md, "KV retention").
    retention: Literal["on", "off"] = defaults.RETENTION
    #: Retention policy parameters; ``None`` = the defaults. Their ``prefill_s_per_token``,
    #: when not given (``None`` or a table without it), is the cost model's: use
    #: :attr:`retention_config`.
    retention_options: Annotated[RetentionConfig | None, from_table(RetentionConfig)] = None
    #: Per-backend in-flight window (calls), ``None`` = unlimited, ``"adaptive"`` (the
    #: default) = sized from the backend: steered by its scraped ``vllm:num_requests_waiting``
    #: and never above its batch size (when it reports one) plus ``target_waiting``.
    admission_window: Annotated[AdmissionWindow, BeforeValidator(_parse_window)] = (
        defaults.ADMISSION_WINDOW
    )
    #: Parameters of the adaptive window (``AdaptiveWindowConfig`` fields: ``initial_window``,
    #: ``min_window``, ``max_window``, ``target_waiting``...); only with ``"adaptive"``.
    admission: Annotated[AdaptiveWindowConfig, from_table(AdaptiveWindowConfig)] = field(
        default_factory=lambda: AdaptiveWindowConfig.from_mapping(defaults.ADMISSION)
    )
    #: Memory-aware admission (``MemoryAdmissionConfig`` fields: ``enabled``,
    #: ``start_watermark``, ``idle_release_s``, ``max_passed``, ``kv_capacity_tokens``;
    #: docs/scheduling.md, "Admission under memory pressure"); not with an unlimited window.
    memory_admission: Annotated[MemoryAdmissionConfig, from_table(MemoryAdmissionConfig)] = field(
        default_factory=MemoryAdmissionConfig
    )
    #: Calls the controller holds in its queues at most; more arrivals get HTTP 503 with
    #: ``Retry-After`` (a bound on memory under a flood).
    max_queued_calls: _Count = 100_000
    #: Most sequences one call may ask for (its ``n``, or ``best_of`` for completions); more
    #: get HTTP 400 naming the cap. ``None`` (the default) = the largest batch size
    #: (``max_num_seqs``) a backend reports, 256 when none reports one (a stock vLLM). Each
    #: sequence counts in the admission window and the tenant's ``max_in_flight``.
    max_sequences_per_call: Annotated[int | None, Field(ge=1)] = None
    #: Largest accepted request body (bytes); larger bodies get HTTP 413 while being read.
    #: No larger than what the backends accept (the emulator's and vLLM's default: 16 MiB).
    max_body_bytes: _Count = 16 * 1024 * 1024
    #: Period of each backend's health probe and metric scrape, and the probe's time limit
    #: (seconds): a dead backend leaves routing within one interval.
    scrape_interval_s: _Seconds = 1.0
    #: How many times faster than real time the backends run: 1 for real engines; ``X`` in
    #: front of engine emulators run with ``--time-scale X`` (docs/engine-emulator.md). The
    #: policies then run on the engines' model seconds (service/core/clock.py): tool waits,
    #: retention TTLs, idle reservations, the program idle timeout and every other time of
    #: the process table and policies. Transport times (probe period, timeouts) stay real.
    time_scale: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    #: Circuit-breaker thresholds (``BreakerConfig`` fields: ``failure_threshold``,
    #: ``error_rate``, ``window``, ``min_calls``, ``cooldown_s``, ``success_threshold``,
    #: ``backoff``, ``max_cooldown_s``, ``probe_timeouts``); unknown keys are errors.
    breaker: Annotated[BreakerConfig, from_table(BreakerConfig)] = field(
        default_factory=BreakerConfig
    )
    #: Bearer token the admin endpoints (adding / removing backends) require; ``None`` = they
    #: accept requests from loopback clients only.
    admin_token: _Secret = field(default=None, repr=False)
    #: Longest wait for a backend's answer to start or continue (seconds); ``None`` = forever.
    backend_timeout_s: _OptionalSeconds = 600.0
    #: A backend that sends no byte of a started stream for this long is stalled (seconds;
    #: ``None`` = only ``backend_timeout_s``): its call is aborted, and retried elsewhere when
    #: nothing reached the client yet, else failed with an error event (docs/controller.md,
    #: "Lifecycle").
    backend_stall_s: _OptionalSeconds = 30.0
    #: On SIGTERM, how long calls in flight may take to finish after the controller stopped
    #: accepting connections (seconds); the rest are then aborted upstream.
    shutdown_grace_s: Annotated[float, Field(ge=0)] = 30.0
    #: Longest wait to connect to a backend (seconds).
    connect_timeout_s: _Seconds = 5.0
    #: Attempts on other backends after a backend could not be reached (before streaming).
    max_retries: Annotated[int, Field(ge=0)] = 2
    #: ``Retry-After`` seconds sent with HTTP 503 when no backend is available.
    retry_after_s: Annotated[int, Field(ge=0)] = 1
    #: A program with no call and no event for this long leaves the process table (seconds).
    program_idle_timeout_s: _Seconds = 600.0
    #: Connection pool size towards all backends together.
    max_connections: _Count = 1024
    #: HTTP transport towards backends: ``fast`` (HTTP/1.1 keep-alive on httptools; https
    #: falls back to httpx) or ``httpx`` (httpx's own, in ``http_pool_shards`` pools).
    http_transport: Literal["fast", "httpx"] = "fast"
    #: Independent connection pools used in turn with ``http_transport = "httpx"``
    #: (per-request pool overhead grows with the number of connections in a pool).
    http_pool_shards: _Count = 8
    #: Log level of the controller's and uvicorn's lines (``critical``, ``error``,
    #: ``warning``, ``info``, ``debug``); each line starts with its ISO 8601 time.
    log_level: LogLevel = "warning"
    #: Access log, one line per request on standard output (time, tenant, program, model,
    #: backend, status, latency, tokens): ``text``, ``json`` or ``off``
    #: (service/http/access_log.py). On by default: a proxy's operators expect one, and a
    #: line holds no prompt content.
    access_log: Literal["off", "text", "json"] = "text"
    #: How ``POST /v1/chat/completions`` and ``POST /v1/completions`` are served: ``direct``
    #: (the fast path: read and answered on the connection by the server's protocol, with
    #: the same checks, limits, errors, log line and metrics; service/http/direct.py) or
    #: ``asgi`` (through the ASGI application, as every other route).
    http_path: Literal["direct", "asgi"] = "direct"
    #: Largest request head (request line + headers, bytes); larger ones are refused.
    max_header_bytes: _Count = 64 * 1024
    #: A connection must deliver a complete request head within this many seconds of its
    #: first byte (and an idle keep-alive connection is closed after it): slow clients are cut.
    header_timeout_s: _Seconds = 10.0
    #: Connections and requests served at once; more get HTTP 503 (uvicorn's
    #: ``limit_concurrency``).
    max_concurrency: _Count = 4096
    # --- tenants (docs/security.md; service/core/tenants.py) ---------------------------------
    #: vLLM's ``--api-key``: one key for the one tenant ``default`` (never shown in a repr).
    api_key: _Secret = field(default=None, repr=False)
    #: ``tenant=key,tenant=key`` (plain keys or ``sha256:<hex>`` hashes), e.g. from
    #: ``AGENTRT_CONTROLLER_API_KEYS``; every tenant gets the default quotas.
    api_keys: _Secret = field(default=None, repr=False)
    #: A TOML key file: tenants with key hashes, weights, cache groups and quotas.
    api_key_file: Annotated[str | None, BeforeValidator(_blank_is_none)] = None
    #: Secret the per-tenant ``cache_salt`` values are derived from; ``None`` = random at
    #: start (salts then change on restart; replicas sharing backends should share one).
    cache_salt_secret: _Secret = field(default=None, repr=False)
    #: Serve ``GET /metrics`` to anyone; off = to loopback callers and the admin token only
    #: (its labels name backends and tenants: docs/security.md, "What the probes show").
    metrics_public: bool = False
    #: Forward the client's ``Authorization`` header to the backends (single-tenant setups
    #: whose backends check the same key); off = the backend's own ``api_key`` or none.
    forward_client_authorization: bool = False
    #: Programs the process table holds at most (all tenants); at the cap, the least recently
    #: active idle program is evicted, else a new program gets HTTP 503.
    max_programs: _Count = 100_000
    #: Longest predicted tool / human wait a ``tool-start`` event may announce (seconds);
    #: longer ones are clamped. ``None`` = ``program_idle_timeout_s``.
    max_predicted_wait_s: _OptionalSeconds = None
    #: Open tool / human waits one program may hold at once; a ``tool-start`` beyond gets
    #: HTTP 409 (each open wait costs memory and a line of its ``/programs`` entry).
    max_tool_waits_per_program: _Count = 256
    #: Fair-share scheduling between tenants: ``auto`` (on when more than one tenant is
    #: configured), ``on`` or ``off``.
    fair_share: Literal["auto", "on", "off"] = "auto"
    #: Per-tenant caps on calls in flight under fair shares (docs/tenancy.md, "Isolation of
    #: the batch"): empty = off (the default); a table of ``IsolationConfig`` fields = on.
    tenant_isolation: Annotated[IsolationConfig, BeforeValidator(_isolation_table)] = field(
        default_factory=lambda: IsolationConfig(enabled=False)
    )

    def __post_init__(self) -> None:
        options = self.retention_options
        # A retention table that names no prefill rate takes the cost model's.
        cost_rate = isinstance(options, Mapping) and "prefill_s_per_token" not in options
        check_fields(self)
        if cost_rate and self.retention_options is not None:
            rate = self.cost.prefill_s_per_token
            object.__setattr__(
                self, "retention_options", replace(self.retention_options, prefill_s_per_token=rate)
            )
        problems: list[tuple[tuple[str | int, ...], str]] = []
        ids = [b.backend_id for b in self.backends]
        if len(set(ids)) != len(ids):
            problems.append((("backends",), f"backend ids must be unique, got {ids}"))
        if self.policy == "fcfs" and self.scheduling != SchedulerConfig():
            problems.append((("scheduling",), "fcfs takes no scheduling parameters"))
        if self.admission_window != "adaptive" and self.admission != AdaptiveWindowConfig():
            problems.append((("admission",), "applies to admission_window = adaptive only"))
        problems += _model_problems(self.model_aliases, self.model_fallbacks)
        if self.admin_token is not None and len(self.admin_token) < 8:
            problems.append((("admin_token",), "must have at least 8 characters"))
        try:
            build_router(self.router, self.routing_params)
        except SectionError as exc:  # reported at "routing"
            problems += [(("routing", *loc), text) for loc, text in exc.problems]
        except ConfigError as exc:
            problems.append((("routing",), str(exc)))
        if problems:
            raise SectionError("", problems)

    @property
    def routing_params(self) -> dict[str, object]:
        """:attr:`routing` with the ``prefix`` router's ``prefill_s_per_token`` defaulting to
        the cost model's."""
        params = dict(self.routing)
        if self.router == "prefix":
            params.setdefault("prefill_s_per_token", self.cost.prefill_s_per_token)
        return params

    @property
    def retention_config(self) -> RetentionConfig:
        """:attr:`retention_options`, or the defaults with the cost model's
        ``prefill_s_per_token``."""
        if self.retention_options is not None:
            return self.retention_options
        return RetentionConfig(prefill_s_per_token=self.cost.prefill_s_per_token)


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


#: The fields given as a table (a JSON object in the environment and on the command line).
_TABLES = frozenset(
    ("scheduling", "cost", "admission", "breaker", "routing", "retention_options",
     "tenant_isolation", "memory_admission")
)  # fmt: skip
# ``model_aliases`` and ``model_fallbacks`` read text themselves (JSON or NAME=VALUE items).


def _from_text(key: str, value: object, source: str) -> object:
    """A table given as text (environment, command line) parsed as JSON; other values are
    left to the field's validation."""
    if key in _TABLES and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            message = f"controller.{key}: must be a JSON object ({source}): {exc}"
            raise ConfigError(message) from None
    return value


def _read_file(path: Path) -> dict[str, object]:
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


#: Keys whose command-line flag is not ``--`` + the key (repeatable flags, one value each).
_FLAGS = {
    "backends": "--backend",
    "model_aliases": "--model-alias",
    "model_fallbacks": "--model-fallback",
}


def load_config(
    file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> ControllerConfig:
    """Merge defaults, ``file``, ``env`` (``AGENTRT_CONTROLLER_*``; ``..._CONFIG`` names a file
    when ``file`` is None) and ``overrides`` (CLI flags; ``None`` values are skipped).

    Raises :class:`ConfigError` for unknown file keys and options and for invalid values, each
    line naming the key's path and where the value came from, e.g.
    ``controller.scheduling.betta: unknown key (file controller.toml)``; unknown
    ``AGENTRT_CONTROLLER_*`` variables are logged once and ignored.
    """
    env = env or {}
    values: dict[str, object] = {}
    #: Where each key's value came from, for messages.
    sources: dict[str, str] = {}
    path = file if file is not None else env.get(ENV_PREFIX + "CONFIG")
    if path:
        for key, value in _read_file(Path(path)).items():
            if key not in _FIELDS:
                raise ConfigError(f"controller.{key}: unknown key (file {path})")
            values[key], sources[key] = value, f"file {path}"
    unknown: list[str] = []
    for var, text in env.items():
        if not var.startswith(ENV_PREFIX) or var == ENV_PREFIX + "CONFIG":
            continue
        key = var[len(ENV_PREFIX) :].lower()
        if _is_service_link(key, text):
            continue
        if key not in _FIELDS:
            unknown.append(var)
            continue
        values[key] = _from_text(key, text, var)
        sources[key] = var
    if unknown:
        _log.warning(
            "ignoring environment variables that name no controller setting: %s",
            ", ".join(sorted(unknown)),
        )
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        flag = _FLAGS.get(key, "--" + key.replace("_", "-"))
        if key not in _FIELDS:
            raise ConfigError(f"controller.{key}: unknown option {flag}")
        values[key], sources[key] = _from_text(key, value, flag), flag
    try:
        return ControllerConfig(**values)  # type: ignore[arg-type]  # validated there
    except SectionError as exc:
        lines = []
        for loc, text in exc.problems:
            source = sources.get(str(loc[0])) if loc else None
            where = ".".join(str(part) for part in ("controller", *loc))
            lines.append(f"{where}: {text}" + (f" ({source})" if source else ""))
        raise ConfigError("; ".join(lines)) from None
