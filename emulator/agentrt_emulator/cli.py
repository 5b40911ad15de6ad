"""``agentrt engine serve``: run the vLLM-compatible engine emulator over HTTP."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]

_DESCRIPTION = """\
Serve an emulated vLLM engine. A roofline model of the chosen GPU profile decides how long
each engine step takes; a deterministic scripted model (NOT a language model) decides the text,
tool calls and JSON it returns. See docs/engine-emulator.md.

  OpenAI API:        POST /v1/chat/completions, /v1/completions, /v1/responses,
                     /v1/embeddings; GET /v1/models
  vLLM's extras:     POST /tokenize, /detokenize; GET /version
  probes, metrics:   GET /health, /readyz, /livez, /metrics (vLLM's names), /openapi.json
  agentrt:           retention pins: GET, POST /agentrt/engine/v1/pins,
                     DELETE /agentrt/engine/v1/pins/ID; GET /agentrt/engine/v1/state

Every error is a JSON body (404 / 405 too). Log lines on stderr start with their ISO 8601
time."""

_EPILOG = """\
examples:
  agentrt engine serve --port 8000
  agentrt engine serve --port 8001 --profile h100-llama3-8b --time-scale 10 \\
      --scheduling-policy priority --max-num-seqs 64
  curl -s localhost:8000/metrics | grep vllm:num_requests"""


def register(subparsers: Any) -> None:
    """Add the ``engine`` command group to the ``agentrt`` parser."""
    engine = subparsers.add_parser(
        "engine",
        help="run the vLLM-compatible engine emulator",
        description="The engine emulator: a modelled vLLM engine served over HTTP.",
    )
    commands = engine.add_subparsers(dest="engine_command", metavar="SUBCOMMAND")
    engine.set_defaults(handler=lambda args: _usage(engine))
    serve = commands.add_parser(
        "serve",
        help="serve an emulated engine on HOST:PORT",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    net = serve.add_argument_group("server")
    net.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    net.add_argument(
        "--port", type=int, default=8000, help="TCP port, 0 = any free one (default: %(default)s)"
    )
    net.add_argument(
        "--model",
        default=None,
        metavar="NAME",
        help="model name to serve and require in requests (default: agentrt/emulated-llama-3.1-8b)",
    )
    net.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn log level (default: %(default)s)",
    )
    limits = serve.add_argument_group("HTTP limits (docs/security.md)")
    limits.add_argument(
        "--max-body-bytes",
        type=int,
        default=16 * 1024 * 1024,
        metavar="N",
        help="largest request body; 413 as soon as a body passes it (default: %(default)s)",
    )
    limits.add_argument(
        "--max-header-bytes",
        type=int,
        default=64 * 1024,
        metavar="N",
        help="largest request line + headers; larger heads are refused (default: %(default)s)",
    )
    limits.add_argument(
        "--header-timeout-s",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds a connection has to send a whole request head; idle keep-alive "
        "connections close after it too (default: %(default)s)",
    )
    limits.add_argument(
        "--max-concurrency",
        type=int,
        default=4096,
        metavar="N",
        help="connections + requests served at once; more get 503 (default: %(default)s)",
    )
    model = serve.add_argument_group("engine model")
    model.add_argument(
        "--profile",
        default=None,
        metavar="NAME",
        help="hardware profile of the step-time model: a100-llama3-8b (default), "
        "h100-llama3-8b, ...",
    )
    model.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="run X times faster than the modelled GPU; latencies in /metrics and "
        "pin TTLs stay in model seconds (default: %(default)s)",
    )
    model.add_argument(
        "--stream-interval-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="hold a stream's intermediate tokens until MS wall milliseconds after its "
        "previous write (first and last tokens are never held); cuts per-token HTTP work "
        "at high time scales (default: %(default)s, every step)",
    )
    model.add_argument(
        "--max-num-seqs",
        type=int,
        default=256,
        metavar="N",
        help="most sequences in one step, as vLLM (default: %(default)s)",
    )
    model.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=8192,
        metavar="N",
        help="token budget of one step, as vLLM (default: %(default)s)",
    )
    model.add_argument(
        "--max-model-len",
        type=int,
        default=32768,
        metavar="N",
        help="longest prompt + output in tokens (default: %(default)s)",
    )
    model.add_argument(
        "--num-gpu-blocks",
        type=int,
        default=None,
        metavar="N",
        help="KV cache size in blocks (default: derived from the profile's memory)",
    )
    model.add_argument(
        "--block-size",
        type=int,
        default=16,
        metavar="N",
        help="tokens per KV block (default: %(default)s)",
    )
    model.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        metavar="F",
        help="fraction of device memory used when deriving the KV cache size "
        "(default: %(default)s)",
    )
    model.add_argument(
        "--scheduling-policy",
        choices=["fcfs", "priority"],
        default="fcfs",
        help="fcfs, or priority (lower 'priority' value first; non-zero "
        "priorities are refused under fcfs, as vLLM does) (default: %(default)s)",
    )
    model.add_argument(
        "--no-enable-prefix-caching",
        dest="enable_prefix_caching",
        action="store_false",
        help="turn automatic prefix caching off",
    )
    model.add_argument(
        "--kv-offloading-size",
        type=float,
        default=0.0,
        metavar="GIB",
        help="KV CPU tier in GiB, as vLLM: blocks evicted or preempted from GPU KV are kept "
        "in host memory and reloaded over PCIe instead of recomputed; at most the profile's "
        "host memory (default: %(default)s, off)",
    )
    model.add_argument(
        "--kv-offloading-backend",
        choices=["native"],
        default="native",
        help="KV offloading backend, as vLLM; only vLLM's native CPU offloading is modelled "
        "(default: %(default)s)",
    )
    model.add_argument(
        "--seed", type=int, default=0, help="seed of the scripted model (default: %(default)s)"
    )
    serve.set_defaults(handler=_serve)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _serve(args: argparse.Namespace) -> int:
    import anyio

    from agentrt.errors import AgentrtError
    from agentrt_emulator.core.types import EngineConfig
    from agentrt_emulator.server.config import DEFAULT_MODEL_NAME, DEFAULT_PROFILE, EmulatorConfig
    from agentrt_emulator.server.runner import run_forever

    try:
        config = EmulatorConfig(
            engine=EngineConfig(
                block_size=args.block_size,
                num_gpu_blocks=args.num_gpu_blocks,
                max_num_seqs=args.max_num_seqs,
                max_num_batched_tokens=args.max_num_batched_tokens,
                max_model_len=args.max_model_len,
                scheduling_policy=args.scheduling_policy,
                enable_prefix_caching=args.enable_prefix_caching,
                gpu_memory_utilization=args.gpu_memory_utilization,
                kv_offloading_size=args.kv_offloading_size,
            ),
            profile=args.profile or DEFAULT_PROFILE,
            model_name=args.model or DEFAULT_MODEL_NAME,
            time_scale=args.time_scale,
            seed=args.seed,
            stream_interval_wall_s=args.stream_interval_ms / 1000.0,
            max_body_bytes=args.max_body_bytes,
            max_header_bytes=args.max_header_bytes,
            header_timeout_s=args.header_timeout_s,
            max_concurrency=args.max_concurrency,
        )
        anyio.run(run_forever, config, args.host, args.port, args.log_level)
    except AgentrtError as exc:
        print(f"agentrt engine serve: {exc}", file=sys.stderr)
        return 2
    return 0
