"""``agentrt demo`` and ``agentrt timeline TRACE_FILE`` (docs/demo.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrt_controller import defaults as product
from agentrt_controller.admission_window import AdmissionWindow, parse_admission_window
from agentrt_demo.settings import DEMO_MODELS, POLICIES, DemoSettings

if TYPE_CHECKING:
    from agentrt_demo.app import DemoResult

__all__ = ["register"]

_DEMO_EPILOG = """\
examples:
  agentrt demo                       # the full run (about 1.5 minutes): the product defaults
  agentrt demo --quick --no-direct   # a few seconds: is everything wired?
  agentrt demo --policy atlas --window 8 --out /tmp/demo   # other controller choices
  agentrt demo --models              # a planner model and a small verifier, one engine each
  agentrt timeline agentrt-demo-out/trace-controller.jsonl --format png"""


def register(subparsers: Any) -> None:
    """Add ``demo`` and ``timeline`` to the ``agentrt`` parser."""
    demo = subparsers.add_parser(
        "demo",
        help="run agent programs through a controller and straight to engines, compare",
        description="Start emulated engines and a controller on loopback, run a mix of agent "
        "programs (ReAct, map-reduce, MCTS, coding agents, and LangGraph / AutoGen agents when "
        "installed) through the controller, then the same programs straight to fresh FCFS "
        "engines; print a summary table and write traces and a program timeline. The "
        "controller runs its product defaults (what 'agentrt controller serve --backend URL' "
        "runs) unless --policy, --router, --retention, --window or --priority choose otherwise.",
        epilog=_DEMO_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = DemoSettings()
    demo.add_argument(
        "--programs",
        type=int,
        metavar="N",
        help=f"SDK programs per phase (default {defaults.programs}; framework agents on top)",
    )
    demo.add_argument(
        "--seed", type=int, help=f"seed of the programs and engines (default {defaults.seed})"
    )
    demo.add_argument(
        "--out", type=Path, metavar="DIR", help="output directory (default ./agentrt-demo-out)"
    )
    demo.add_argument(
        "--time-scale",
        type=float,
        metavar="X",
        help=f"engines run X times faster than the modelled GPU (default {defaults.time_scale:g})",
    )
    demo.add_argument(
        "--rate",
        type=float,
        metavar="R",
        help=f"program arrivals per model second (default {defaults.arrival_rate:g}: near the "
        "engines' saturation)",
    )
    demo.add_argument(
        "--policy",
        choices=POLICIES,
        help=f"controller policy (default: the controller's, {product.POLICY})",
    )
    demo.add_argument(
        "--router",
        metavar="NAME",
        help=f"controller router (default: the controller's, {product.ROUTER})",
    )
    demo.add_argument(
        "--retention",
        choices=("on", "off"),
        help=f"KV retention during tool waits (default: the controller's, {product.RETENTION})",
    )
    demo.add_argument(
        "--window",
        metavar="N|adaptive|unlimited",
        help="controller admission window per engine (default: the controller's, adaptive: "
        "at most the engine batch + 2)",
    )
    demo.add_argument(
        "--priority",
        choices=("on", "off"),
        default="off",
        help="priority passthrough: the controller phase's engines run priority scheduling and "
        "get the controller's priority (default off, as the controller's)",
    )
    demo.add_argument(
        "--engines", type=int, metavar="N", help=f"emulated engines (default {defaults.engines})"
    )
    demo.add_argument(
        "--models",
        nargs="?",
        const=",".join(DEMO_MODELS),
        metavar="PLANNER,SMALL",
        help="several models: the engines serve these in turn, one engine per model (without "
        f"a value: {', '.join(DEMO_MODELS)}); the agents plan with the first and verify "
        "(ReAct) or summarise (map-reduce) with the second; the summary shows where each "
        "model's calls went (default: one model)",
    )
    demo.add_argument(
        "--max-num-seqs",
        type=int,
        metavar="N",
        help=f"sequences per engine step, vLLM's --max-num-seqs (default {defaults.max_num_seqs})",
    )
    demo.add_argument(
        "--num-gpu-blocks",
        type=int,
        metavar="N",
        help=f"KV cache of each engine in 16-token blocks (default {defaults.num_gpu_blocks}); "
        "fewer make the contexts of programs waiting on tools compete for memory, where the "
        "controller's KV retention matters",
    )
    demo.add_argument("--quick", action="store_true", help="six small programs on fast engines")
    demo.add_argument("--no-direct", action="store_true", help="skip the direct (FCFS) baseline")
    demo.add_argument(
        "--no-frameworks", action="store_true", help="leave out the LangGraph / AutoGen agents"
    )
    demo.add_argument(
        "--progress",
        choices=("auto", "live", "plain", "off"),
        default="auto",
        help="progress display on stderr (auto: live on a terminal)",
    )
    demo.add_argument(
        "--timeline",
        choices=("html", "png", "both"),
        default="both",
        help="timeline pictures to write (default both)",
    )
    demo.set_defaults(handler=_demo)

    timeline = subparsers.add_parser(
        "timeline",
        help="draw a program timeline (Gantt chart) from a trace file",
        description="Draw each program's LLM and tool calls per thread from an OTLP-JSON trace "
        "file (as written by 'agentrt demo', or by an OpenTelemetry Collector's file exporter "
        "from agentrt spans).",
    )
    timeline.add_argument("trace_file", type=Path, metavar="TRACE_FILE")
    timeline.add_argument(
        "--out", type=Path, metavar="FILE", help="output file (default: TRACE_FILE with .html/.png)"
    )
    timeline.add_argument(
        "--format",
        choices=("html", "png"),
        help="picture format (default: from --out's suffix, else html)",
    )
    timeline.set_defaults(handler=_timeline)


def _demo(args: argparse.Namespace) -> int:
    import dataclasses

    import anyio

    from agentrt.errors import AgentrtError
    from agentrt_demo.app import run_demo

    overrides: dict[str, Any] = {
        "programs": args.programs,
        "seed": args.seed,
        "out_dir": args.out,
        "time_scale": args.time_scale,
        "arrival_rate": args.rate,
        "policy": args.policy,
        "router": args.router,
        "engines": args.engines,
        "max_num_seqs": args.max_num_seqs,
        "num_gpu_blocks": args.num_gpu_blocks,
        "retention": None if args.retention is None else args.retention == "on",
        "models": None if args.models is None else _models(args.models),
    }
    try:
        settings = DemoSettings(
            **{k: v for k, v in overrides.items() if v is not None},
            # Not among the overrides: its None (unlimited) is a choice, not "unset".
            admission_window="default" if args.window is None else _window(args.window),
            direct=not args.no_direct,
            priority=args.priority == "on",
            frameworks=not args.no_frameworks,
            progress=args.progress,
            timeline_formats=("html", "png") if args.timeline == "both" else (args.timeline,),
        )
        if args.quick:
            settings = settings.quick_variant()
            if args.time_scale is not None:
                settings = dataclasses.replace(settings, time_scale=args.time_scale)
        result = anyio.run(_until_interrupted, run_demo, settings)
    except AgentrtError as exc:
        print(f"agentrt demo: {exc}", file=sys.stderr)
        return 2
    print(f"demo finished in {result.wall_s:.1f} s", file=sys.stderr)
    return result.status


async def _until_interrupted(
    run: Callable[[DemoSettings], Awaitable[DemoResult]], settings: DemoSettings
) -> DemoResult:
    """``await run(settings)``, stopped by Ctrl-C: the first SIGINT cancels it through an
    anyio cancel scope (it keeps cancelling until the demo has stopped its children, which a
    bare ``task.cancel()`` — asyncio's own handler — does not: a shielded clean-up could absorb
    it and the demo went on to its next phase), then raises ``KeyboardInterrupt`` (exit status
    130); a second SIGINT interrupts at once."""
    import asyncio
    import signal
    import threading

    import anyio

    loop = asyncio.get_running_loop()
    scope = anyio.CancelScope()
    interrupted: list[int] = []

    def on_sigint(signum: int, frame: object) -> None:
        if interrupted:
            raise KeyboardInterrupt
        interrupted.append(signum)
        loop.call_soon_threadsafe(scope.cancel)

    if threading.current_thread() is not threading.main_thread():
        return await run(settings)  # signals reach the main thread only
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with scope:
            result = await run(settings)
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:
        raise KeyboardInterrupt
    return result


def _models(text: str) -> tuple[str, ...]:
    """``--models``: comma-separated names (blanks dropped; DemoSettings checks the rest)."""
    return tuple(name.strip() for name in text.split(",") if name.strip()) or ("",)


def _window(text: str) -> AdmissionWindow:
    """``--window``: ``N``, ``adaptive`` or ``unlimited`` (the controller's spellings)."""
    return parse_admission_window(text, name="--window")


def _timeline(args: argparse.Namespace) -> int:
    from agentrt.errors import AgentrtError
    from agentrt_demo.analysis import programs_from_spans
    from agentrt_demo.timeline import TimelineSection, build_sections, write_timeline
    from agentrt_demo.traces import TraceFileError, read_trace

    trace_file: Path = args.trace_file
    fmt = args.format
    if fmt is None:
        suffix = args.out.suffix.lower().lstrip(".") if args.out is not None else ""
        fmt = suffix if suffix in ("html", "png") else "html"
    out: Path = args.out if args.out is not None else trace_file.with_suffix("." + fmt)
    try:
        programs = programs_from_spans(read_trace(trace_file))
        if not programs:
            raise TraceFileError(
                f"{trace_file} has spans but no agentrt program spans "
                "(invoke_workflow / invoke_agent with agentrt.program.id)"
            )
        sections = build_sections([TimelineSection(trace_file.name, programs)])
        write_timeline(out, sections, fmt, title=f"agentrt timeline — {trace_file.name}")
    except AgentrtError as exc:
        print(f"agentrt timeline: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"agentrt timeline: cannot write {out}: {exc}", file=sys.stderr)
        return 2
    nodes = sum(len(p.nodes) for p in programs)
    print(f"wrote {out} ({len(programs)} programs, {nodes} nodes)")
    return 0
