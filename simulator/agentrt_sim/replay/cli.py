"""``agentrt bench replay``: run a trace's programs against a live server (docs/replay.md).

Only argparse is imported at module level: ``agentrt --help`` must stay fast.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

__all__ = ["add_parser"]

_EPILOG = """\
examples:
  agentrt bench sim --workload mixed --rate 0.28 --duration 120 --seed 1 --trace-out t.jsonl
  agentrt engine serve --port 8100 --time-scale 10 &
  agentrt bench replay --trace t.jsonl --base-url http://127.0.0.1:8100/v1 --time-scale 10
  agentrt bench replay --trace t.jsonl --base-url http://ctl:8000/v1 \\
      --tokenize-url http://engine:8100 --metrics-url http://engine:8100 --json"""


def api_key_of(args: argparse.Namespace) -> str:
    """The bearer token of a parsed ``replay`` command: ``--api-key``, else
    ``$OPENAI_API_KEY``, else ``EMPTY`` (what vLLM accepts when started without a key)."""
    return str(args.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY")


def add_parser(commands: Any) -> None:
    """Add ``replay`` to the ``agentrt bench`` subcommands."""
    replay = commands.add_parser(
        "replay",
        help="replay a trace's programs as SDK programs against a live OpenAI-compatible server",
        description="Run every program of a simulator trace (docs/simulator.md § Traces) as an "
        "agentrt SDK program against --base-url: same DAG, arrivals, waits and token counts. "
        "Reports the `bench sim` metrics in model seconds (wall seconds x --time-scale).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_argument("--trace", required=True, metavar="FILE", help="JSONL trace to replay")
    replay.add_argument(
        "--base-url", required=True, metavar="URL", help="OpenAI base URL, e.g. http://h:8000/v1"
    )
    replay.add_argument("--model", default=None, help="model (default: first of /v1/models)")
    replay.add_argument(
        "--api-key",
        default=None,
        help="bearer token sent on every request, the probe included (default: "
        "$OPENAI_API_KEY, else EMPTY)",
    )
    replay.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="run arrivals and waits X times faster, to match an emulator started with the "
        "same --time-scale; results in model seconds (default: %(default)s)",
    )
    replay.add_argument(
        "--warmup",
        type=float,
        default=None,
        metavar="S",
        help="programs arriving before S model seconds are not measured (default: 10%% of "
        "the last arrival, as bench sim --trace-in)",
    )
    replay.add_argument(
        "--max-programs", type=int, default=None, metavar="N", help="replay the first N only"
    )
    replay.add_argument(
        "--tokenize-url",
        default=None,
        metavar="URL",
        help="server root whose /tokenize sizes the prompts (default: --base-url's root; "
        "behind a controller give one of its engines)",
    )
    replay.add_argument(
        "--metrics-url",
        default=None,
        metavar="URL",
        help="server root whose /metrics gives vllm: prefix-cache and preemption counters "
        "(default: --base-url's root)",
    )
    replay.add_argument(
        "--controller",
        choices=["auto", "required", "off"],
        default="auto",
        help="SDK controller mode: tool-wait events to a controller (default: %(default)s)",
    )
    replay.add_argument(
        "--max-retries",
        type=int,
        default=2,
        metavar="N",
        help="re-send a call up to N times when its stream was cut before [DONE], its "
        "connection failed or a gateway answered 502/503 (backoff 0.1 s, doubling); "
        "never after another error answer. 0 = a failed call ends its program "
        "(default: %(default)s)",
    )
    replay.add_argument("--json", action="store_true", help="print a JSON array (one object)")
    replay.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    replay.set_defaults(handler=_handler)


def _handler(args: argparse.Namespace) -> int:
    from agentrt.errors import AgentrtError

    try:
        return _run(args)
    except AgentrtError as exc:  # bad trace, bad options, unusable server
        print(f"agentrt bench: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `agentrt bench replay ... | head`: quiet (agentrt.cli.output)
        from agentrt.cli.output import EXIT_CLOSED_PIPE, silence_stdout

        silence_stdout()
        return EXIT_CLOSED_PIPE


def _progress(enabled: bool) -> Any:
    if not enabled or not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        end = "\n" if done == total else ""
        print(f"\rreplay: {done}/{total} programs", end=end, file=sys.stderr, flush=True)

    return show


def _run(args: argparse.Namespace) -> int:
    import anyio

    from agentrt.errors import ConfigError
    from agentrt_sim.replay.runner import ReplayConfig, replay
    from agentrt_sim.replay.summary import summarize_replay
    from agentrt_sim.workloads.trace import load_trace

    try:
        programs = load_trace(args.trace)
    except OSError as exc:
        raise ConfigError(f"cannot read trace {args.trace}: {exc.strerror or exc}") from exc
    if args.max_programs is not None:
        if args.max_programs < 1:
            raise ConfigError(f"--max-programs must be >= 1, got {args.max_programs}")
        programs = programs[: args.max_programs]
    if not programs:
        raise ConfigError(f"{args.trace}: no programs to replay")
    config = ReplayConfig(
        base_url=args.base_url,
        model=args.model,
        time_scale=args.time_scale,
        api_key=api_key_of(args),
        tokenize_url=args.tokenize_url,
        metrics_url=args.metrics_url,
        controller=args.controller,
        max_retries=args.max_retries,
    )
    duration = max(max(p.arrival_s for p in programs), 1e-9)
    warmup = 0.1 * duration if args.warmup is None else args.warmup
    progress = _progress(not (args.json or args.no_progress))

    async def main() -> Any:
        return await replay(programs, config, progress=progress)

    result, facts = anyio.run(main)
    metrics = summarize_replay(
        result, scale=config.time_scale, warmup_s=warmup, window_end_s=duration
    )
    summary: dict[str, Any] = {
        "workload": f"trace:{args.trace}",
        # Set by the server, not by the replay: unknown here.
        "rate": None,
        "duration_s": duration,
        "seed": None,
        "policy": None,
        "router": None,
        "retention": None,
        "admission_window": None,
        "engines": None,
        "profile": None,
        "warmup_s": warmup,
        **metrics,
        "base_url": config.base_url,
        "model": facts.model,
        "time_scale": config.time_scale,
        "ignore_eos": facts.ignore_eos,
        "template_costs_measured": facts.costs.measured,
    }
    if args.json:
        print(json.dumps([_clean(summary)], indent=2))
    else:
        _print_table(summary, len(programs))
    return 0


def _clean(value: Any) -> Any:
    """NaN is not JSON: null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


def _print_table(summary: dict[str, Any], programs: int) -> None:
    from agentrt_sim.report import print_sim_table

    row = {k: math.nan if v is None else v for k, v in summary.items()}
    row.update(policy="live", router="server", retention="-", admission_window="-")
    title = f"replay of {summary['workload']} ({programs} programs) at {summary['base_url']}"
    print_sim_table([row], title)
    if summary["resends"]:
        print(
            f"calls re-sent after a cut stream, a failed connection or a 502/503: "
            f"{summary['calls_resent']} ({summary['resends']} re-sends)"
        )
    if summary["programs_failed"]:
        print(f"failed programs: {summary['programs_failed']}: {summary['errors']}")
