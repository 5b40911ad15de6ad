"""``agentrt trace``: convert recorded traces into simulator traces (``export``).

docs/trace-export.md describes the conversion rules and their approximations.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register"]

_EPILOG = """\
examples:
  agentrt trace export agentrt-demo-out/trace-controller.jsonl -o programs.jsonl \\
      --kind-attr agentrt.demo.kind --time-scale 5
  agentrt bench sim --trace-in programs.jsonl --policy fcfs,plas

SPANS_FILE holds OTLP/JSON trace requests, one per line (what an OpenTelemetry Collector's file
exporter and `agentrt demo` write). Exit status 2: the file is not a span file, or it records no
agentrt program with a completed LLM call."""


def register(subparsers: Any) -> None:
    """Add the ``trace`` command group to the ``agentrt`` parser."""
    trace = subparsers.add_parser(
        "trace",
        help="convert recorded traces into simulator traces",
        description="Convert what the SDK recorded of a live run into simulator traces.",
    )
    commands = trace.add_subparsers(dest="trace_command", metavar="SUBCOMMAND")
    trace.set_defaults(handler=lambda args: _usage(trace))
    export = commands.add_parser(
        "export",
        help="turn the SDK's OpenTelemetry spans into an agentrt-sim trace (JSONL)",
        description="Turn the spans the agentrt SDK recorded of a live run (program, chat and "
        "execute_tool spans) into a simulator trace: one program per program span, an llm "
        "node per LLM call, a tool node per tool call. Replay the result with `agentrt bench "
        "sim --trace-in` or `agentrt bench replay`. A summary goes to stderr.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export.add_argument("spans_file", metavar="SPANS_FILE", help="OTLP/JSON span file")
    export.add_argument(
        "-o",
        "--output",
        metavar="OUT.jsonl",
        default="-",
        help="where to write the trace (default: stdout)",
    )
    export.add_argument(
        "--kind-attr",
        metavar="ATTR",
        default=None,
        help="program-span attribute holding each program's workload kind, e.g. "
        "agentrt.demo.kind (default, or when a span lacks it: the program name without a "
        "trailing number, react-04 -> react)",
    )
    export.add_argument(
        "--time-scale",
        metavar="X",
        type=float,
        default=1.0,
        help="multiply recorded wall durations (tool calls, waits, arrivals) by X to give "
        "model seconds: X=5 for a run against an emulator running 5 times faster than real "
        "time (default: 1)",
    )
    export.set_defaults(handler=_export)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _export(args: argparse.Namespace) -> int:
    from agentrt.errors import ConfigError
    from agentrt_sim.export import read_spans, spans_to_programs
    from agentrt_sim.workloads.trace import TRACE_FORMAT, TRACE_VERSION, program_to_json

    try:
        spans = read_spans(args.spans_file)
        programs, summary = spans_to_programs(
            spans, kind_attr=args.kind_attr, time_scale=args.time_scale
        )
    except ConfigError as exc:
        print(f"agentrt trace export: error: {exc}", file=sys.stderr)
        return 2
    if not programs:
        print(
            f"agentrt trace export: error: {args.spans_file} records no agentrt program with a "
            f"completed LLM call ({len(spans)} spans read)",
            file=sys.stderr,
        )
        for line in summary.lines()[2:]:
            print(f"  {line}", file=sys.stderr)
        return 2
    lines = [json.dumps({"format": TRACE_FORMAT, "version": TRACE_VERSION})]
    lines += [json.dumps(program_to_json(p), separators=(",", ":")) for p in programs]
    text = "\n".join(lines) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as out:
                out.write(text)
        except OSError as exc:
            message = f"agentrt trace export: error: cannot write {args.output}: {exc}"
            print(message, file=sys.stderr)
            return 2
    where = "stdout" if args.output == "-" else args.output
    print(f"agentrt trace export: wrote {where}", file=sys.stderr)
    for line in summary.lines():
        print(f"  {line}", file=sys.stderr)
    return 0
