"""Read span files: OTLP/JSON trace requests, one per line (or one pretty-printed document).

The reader is the SDK's (:mod:`agentrt.otlp_json`, shared with the demo's timeline): the
encoding an OpenTelemetry Collector's file exporter writes and the demo's ``trace-*.jsonl``
files use, and the protobuf messages' generic proto3 JSON form. The exporter needs a span's
name, times, attributes and status; the agentrt attributes say which program, thread and node
it belongs to, so span and trace ids are not needed.
"""

from __future__ import annotations

from pathlib import Path

from agentrt.otlp_json import AttributeValue, SpanFileError, read_span_file
from agentrt.otlp_json import OtlpSpan as Span

__all__ = ["AttributeValue", "Span", "SpanFileError", "read_spans"]


def read_spans(path: str | Path) -> list[Span]:
    """The spans of an OTLP/JSON span file.

    Raises :class:`SpanFileError` when the file cannot be read, a line is not an OTLP/JSON
    trace request (the message names the line), or it holds no span.
    """
    return read_span_file(path)
