"""The demo's controller in a child process: ``python -m agentrt_demo.controller_proc JSON``.

A process of its own keeps the controller's CPU work off the agents' event loop (on a small
machine they would otherwise slow each other down and the comparison would measure that).
The child serves on a free loopback port, prints ``READY <base_url>`` on stdout, and stops
when its stdin closes, on SIGINT / SIGTERM, or on an error (exit status 2). Its server spans
are kept in memory and written as OTLP-JSON lines to ``trace_out`` when it stops.

JSON keys: ``overrides`` (controller options, as for ``agentrt_controller.service.load_config``:
``backends`` as ``URL,priority=on`` strings, ``policy``, ``router``, ``admission_window``,
``scrape_interval_s``, ``port``) and ``trace_out`` (a file path, or null for no spans).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

from agentrt_demo.child_stop import child_main, stop_group_on_signal_or_eof

__all__ = ["main"]


async def _serve(options: dict[str, Any]) -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentrt_controller.service import load_config, serve_controller
    from agentrt_demo.traces import records_from_sdk, write_trace

    config = load_config(env={}, overrides=options["overrides"])
    trace_out = options.get("trace_out")
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "agentrt-controller"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        async with (
            serve_controller(config, tracer_provider=provider if trace_out else None) as url,
            anyio.create_task_group() as group,
        ):
            print(f"READY {url}", flush=True)
            stop_group_on_signal_or_eof(group)
    finally:
        if trace_out:
            write_trace(Path(trace_out), records_from_sdk(exporter.get_finished_spans()))
        provider.shutdown()


def main(argv: list[str] | None = None) -> int:
    return child_main("controller", _serve, argv)


if __name__ == "__main__":
    sys.exit(main())
