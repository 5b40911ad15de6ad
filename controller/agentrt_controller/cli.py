"""``agentrt controller serve``: run the program controller in front of model servers."""

from __future__ import annotations

import argparse
import dataclasses
import logging.config
import os
import sys
from typing import TYPE_CHECKING

from agentrt_controller import defaults

if TYPE_CHECKING:
    from agentrt_controller.service.config import ControllerConfig

__all__ = ["banner", "register"]

_DESCRIPTION = """\
Serve the agentrt program controller in front of one or more vLLM, SGLang or
OpenAI-compatible servers; it schedules calls by program (FCFS, MLFQ, PLAS, ATLAS).

  scheduled (OpenAI):   POST /v1/chat/completions, /v1/completions, /v1/responses
  routed, unscheduled:  POST /v1/embeddings, /tokenize, /detokenize
  models:               GET /v1/models (the union of the backends' models)
  program events:       /agentrt/v1/... (sessions, programs and their tool waits,
                        GET /agentrt/v1/programs and /agentrt/v1/queues for introspection)
  backends (admin):     GET, POST /agentrt/v1/backends, DELETE /agentrt/v1/backends/ID
  probes, telemetry:    GET /health, /readyz, /livez, /metrics, /openapi.json

Every error is an OpenAI-style JSON body (404 / 405 too). Every option can also come from a
TOML/JSON file (--config) or an AGENTRT_CONTROLLER_<OPTION> environment variable; flags win
over the environment, which wins over the file. See docs/controller.md."""

_EPILOG = """\
backend syntax: URL[,kind=vllm|sglang|openai|emulator][,priority=on|off|auto][,id=NAME]
                [,OPTION=VALUE...]      (kinds and options: docs/backends.md)
  priority=on sends the scheduler's priority in each request body (vLLM must run with
  --scheduling-policy priority); auto asks the server with one probe request.
  models=A|B names the models it serves (else its /v1/models is asked at every probe); a
  call goes only to backends serving its model.
  Backends can be listed, added and removed while running: /agentrt/v1/backends (with an
  admin token set, AGENTRT_CONTROLLER_ADMIN_TOKEN, it is required, from loopback too;
  without one, loopback clients only).

defaults (what --backend URL alone runs; the configuration the simulated benchmarks
recommend, docs/controller.md "Why these defaults"):
  {summary}
  The adaptive window keeps each backend's own waiting queue near empty, so the waiting
  happens in the controller's queues where the policy orders it; it never exceeds the
  backend's batch size + 2 when the backend reports one (our emulator does; vLLM does not,
  then the waiting queue alone steers it). Priority passthrough is off: a stock vLLM runs
  FCFS and rejects a request priority (use priority=auto or on with
  --scheduling-policy priority).

examples:
  agentrt controller serve --backend http://127.0.0.1:8000
  agentrt controller serve --port 8080 --backend http://127.0.0.1:8000,priority=on \\
      --backend http://127.0.0.1:8001,priority=on --policy atlas
  AGENTRT_CONTROLLER_BACKENDS="http://gpu1:8000 http://gpu2:8000" agentrt controller serve
  agentrt controller serve --config controller.toml"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``controller`` command group to the ``agentrt`` parser."""
    group = subparsers.add_parser(
        "controller",
        help="run the program controller (OpenAI-compatible, program-aware scheduling)",
        description="The program controller service.",
    )
    commands = group.add_subparsers(dest="controller_command", metavar="SUBCOMMAND")
    group.set_defaults(handler=lambda args: _usage(group))
    serve = commands.add_parser(
        "serve",
        help="serve the controller on HOST:PORT",
        description=_DESCRIPTION,
        epilog=_EPILOG.format(summary=_default_summary()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--config", metavar="FILE", help="TOML or JSON configuration file")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="TCP port, 0 = any free one (default 8080)")
    serve.add_argument(
        "--backend",
        action="append",
        dest="backends",
        metavar="URL[,key=value...]",
        help="a model server; repeat for several (see 'backend syntax' below)",
    )
    serve.add_argument(
        "--model-alias",
        action="append",
        dest="model_aliases",
        metavar="NAME=MODEL",
        help="a call naming NAME runs on MODEL; repeat for several (docs/routing.md)",
    )
    serve.add_argument(
        "--model-fallback",
        action="append",
        dest="model_fallbacks",
        metavar="MODEL=A,B",
        help="when every backend of MODEL is out, run its calls on A, else B; repeatable",
    )
    serve.add_argument(
        "--policy", help=f"fcfs | mlfq | plas | atlas | gittins (default {defaults.POLICY})"
    )
    serve.add_argument(
        "--admission-window",
        metavar="N|adaptive|unlimited",
        help=f"per-backend in-flight window (default {defaults.ADMISSION_WINDOW}: from the "
        "backend's waiting queue, at most its batch size + 2)",
    )
    serve.add_argument(
        "--scheduling",
        metavar="JSON",
        help='policy parameters, e.g. \'{"starvation_beta": 3, "boundaries_s": [0.5, 2]...}\'',
    )
    serve.add_argument("--admission", metavar="JSON", help="adaptive window parameters")
    serve.add_argument(
        "--cost", metavar="JSON", help='cost model, e.g. \'{"profile": "a100-llama3-8b"}\''
    )
    serve.add_argument(
        "--router",
        help=f"prefix | round_robin | least_loaded | autellix | pipeline "
        f"(default {defaults.ROUTER})",
    )
    serve.add_argument(
        "--routing", metavar="JSON", help="router parameters, e.g. '{\"affinity_weight\": 0.3}'"
    )
    serve.add_argument(
        "--retention",
        choices=["on", "off"],
        default=None,
        help=f"KV retention during tool waits (default {defaults.RETENTION})",
    )
    serve.add_argument("--retention-options", metavar="JSON", help="retention parameters")
    serve.add_argument(
        "--max-body-bytes", type=int, help="largest request body, 413 above (16 MiB)"
    )
    serve.add_argument(
        "--max-header-bytes", type=int, help="largest request line + headers (65536)"
    )
    serve.add_argument(
        "--header-timeout-s",
        type=float,
        help="seconds a connection has to send a whole request head; idle keep-alive too (10)",
    )
    serve.add_argument(
        "--max-concurrency", type=int, help="connections + requests at once, 503 above (4096)"
    )
    serve.add_argument("--scrape-interval-s", type=float, help="backend probe period (1.0)")
    serve.add_argument(
        "--time-scale",
        type=float,
        metavar="X",
        help="the backends are engine emulators run with --time-scale X: the policies' clock "
        "runs X times faster than real time, in their model seconds (1.0: real engines)",
    )
    serve.add_argument(
        "--breaker", metavar="JSON", help="circuit breaker, e.g. '{\"cooldown_s\": 5}'"
    )
    serve.add_argument("--backend-timeout-s", type=float, help="backend read timeout (600)")
    serve.add_argument(
        "--backend-stall-s",
        type=float,
        help="abort a stream whose backend sent nothing for this long (30)",
    )
    serve.add_argument(
        "--shutdown-grace-s",
        type=float,
        help="on SIGTERM, time for calls in flight to finish before they are aborted (30)",
    )
    serve.add_argument("--max-retries", type=int, help="retries on other backends (2)")
    serve.add_argument(
        "--program-idle-timeout-s", type=float, help="idle programs leave the table (600)"
    )
    serve.add_argument(
        "--log-level",
        choices=["critical", "error", "warning", "info", "debug"],
        default=None,
        help="level of the controller's own lines on stderr, each with its ISO 8601 time "
        "(default warning)",
    )
    serve.add_argument(
        "--access-log",
        choices=["off", "text", "json"],
        default=None,
        help="one line per request on stdout: time, method, path, status, latency, tenant, "
        "session, program, model, backend, prompt / completion tokens (default text)",
    )
    serve.add_argument(
        "--http-path",
        choices=["direct", "asgi"],
        default=None,
        help="how POST /v1/chat/completions and /v1/completions are served: direct (the fast "
        "path, answered by the server's protocol with the same checks, limits, errors, log "
        "line and metrics) or asgi (through the ASGI app, like every other route); default "
        "direct (docs/controller.md, 'Performance notes')",
    )
    serve.add_argument(
        "--api-key",
        help="one API key for the one tenant 'default' (like vLLM's --api-key); prefer "
        "AGENTRT_CONTROLLER_API_KEY or a key file: flags show in the process list",
    )
    serve.add_argument(
        "--api-key-file",
        metavar="FILE",
        help="TOML key file: tenants, key hashes, weights, cache groups, quotas (docs/security.md)",
    )
    serve.add_argument(
        "--max-programs", type=int, help="programs the process table holds at most (100000)"
    )
    serve.add_argument(
        "--max-predicted-wait-s",
        type=float,
        help="clamp for a tool wait's predicted duration (default: the idle timeout)",
    )
    serve.add_argument(
        "--fair-share",
        choices=["auto", "on", "off"],
        default=None,
        help="fair shares between tenants (auto: on with more than one tenant)",
    )
    serve.add_argument(
        "--tenant-isolation",
        metavar="JSON",
        help="per-tenant caps on calls in flight under fair shares, e.g. '{\"enabled\": true}' "
        "(docs/tenancy.md)",
    )
    serve.set_defaults(handler=_serve)
    hash_key = commands.add_parser(
        "hash-key",
        help="print the stored form (sha256:<hex>) of an API key read from standard input",
        description="Read one API key from standard input (one line; surrounding whitespace "
        "is dropped) and print its hash for a key file's keys = [...] (docs/security.md).",
    )
    hash_key.set_defaults(handler=_hash_key)


def _priority_text(priority: object) -> str:
    if priority == "auto":
        return "auto"
    return "on" if priority else "off"


def _default_summary() -> str:
    return defaults.describe(
        policy=defaults.POLICY,
        admission_window=defaults.ADMISSION_WINDOW,
        router=defaults.ROUTER,
        retention=defaults.RETENTION,
        priority=_priority_text(defaults.PRIORITY),
    )


def banner(config: ControllerConfig) -> str:
    """The start-up line: where the controller listens, its backends and every policy choice
    (priority passthrough per backend)."""
    priorities = {_priority_text(b.priority) for b in config.backends}
    priority = (
        priorities.pop()
        if len(priorities) == 1
        else ",".join(f"{b.backend_id}:{_priority_text(b.priority)}" for b in config.backends)
    )
    summary = defaults.describe(
        policy=config.policy,
        admission_window=config.admission_window,
        router=config.router,
        retention=config.retention,
        priority=priority,
    )
    backends = ",".join(b.backend_id for b in config.backends)
    line = f"agentrt controller on http://{config.host}:{config.port} {summary} backends={backends}"
    return f"{line} {_tenants_text(config)}"


def _tenants_text(config: ControllerConfig) -> str:
    """The tenancy phrase of the start-up line (reads the key file: raises ConfigError)."""
    from agentrt_controller.service.core.tenants import build_directory

    directory = build_directory(
        key_file=config.api_key_file, key_list=config.api_keys, single_key=config.api_key
    )
    return directory.describe()


def _hash_key(args: argparse.Namespace) -> int:
    from agentrt_controller.service.core.tenants import hash_key

    key = sys.stdin.readline().strip()
    if not key:
        print("agentrt controller hash-key: no key on standard input", file=sys.stderr)
        return 2
    print(hash_key(key))
    return 0


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


_OVERRIDES = (
    "host", "port", "backends", "policy", "admission_window", "scheduling", "admission", "cost",
    "router", "routing", "retention", "retention_options", "max_body_bytes", "scrape_interval_s",
    "breaker", "backend_timeout_s", "backend_stall_s", "shutdown_grace_s", "max_retries",
    "program_idle_timeout_s", "log_level", "max_header_bytes", "header_timeout_s",
    "max_concurrency", "api_key", "api_key_file", "max_programs", "max_predicted_wait_s",
    "fair_share", "tenant_isolation", "model_aliases", "model_fallbacks", "access_log",
    "http_path", "time_scale",
)  # fmt: skip


def _serve(args: argparse.Namespace) -> int:
    from agentrt.errors import ConfigError
    from agentrt_controller.service import load_config, run_controller
    from agentrt_controller.service.telemetry.otel import build_telemetry, export_plan
    from agentrt_serving.logs import server_log_config

    overrides = {name: getattr(args, name) for name in _OVERRIDES}
    # Timestamps from the first line on (loading the config may warn); uvicorn applies the
    # config's level and access log once it is read (agentrt_serving.logs).
    logging.config.dictConfig(server_log_config(args.log_level or "warning"))
    try:
        config = load_config(args.config, os.environ, overrides)
        if not config.backends:
            raise ConfigError("no backend: pass --backend URL (or AGENTRT_CONTROLLER_BACKENDS)")
        banner(config)  # reads the key file: a bad one is an error before binding
        # Spans and metrics over OTLP when the standard OTEL_* variables ask (docs/tracing.md).
        telemetry = build_telemetry(export_plan(os.environ))
        # The line names the bound port (--port 0 picks one); run_controller builds (and so
        # validates) everything before binding.
        run_controller(
            config,
            lambda port: banner(dataclasses.replace(config, port=port)),
            telemetry=telemetry,
        )
    except ConfigError as exc:
        print(f"agentrt controller: {exc}", file=sys.stderr)
        return 2
    return 0
