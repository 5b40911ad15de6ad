"""``OtlpJsonFileSpanExporter``: finished spans appended to a file as OTLP/JSON lines.

The OpenTelemetry Protocol File Exporter's serialization (opentelemetry.io, "OpenTelemetry
Protocol File Exporter", development status): a JSON lines file, each line one
``ExportTraceServiceRequest`` in the OTLP/JSON encoding — spans grouped by resource and by
instrumentation scope, hex ``traceId`` / ``spanId`` / ``parentSpanId``, times as decimal strings
of Unix nanoseconds, ``kind`` and ``status.code`` as OTLP enum numbers, typed attribute values
(64-bit integers as decimal strings), events and links with their attributes. One line per
export: a batch of the ``BatchSpanProcessor`` :func:`~agentrt.runtime.telemetry.make_telemetry`
pairs it with, as the specification recommends. Lines are appended and flushed whole, so a
reader (``agentrt trace export``, ``agentrt timeline``, :func:`agentrt.otlp_json.read_span_file`)
sees complete requests even while the program runs.

Needs the OpenTelemetry SDK (``pip install 'agentrt[otel]'``): imported only by
:func:`~agentrt.runtime.telemetry.make_telemetry` (docs/tracing.md, "Span files").
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

__all__ = ["OtlpJsonFileSpanExporter", "trace_request"]

#: OTLP's span kinds (``SPAN_KIND_INTERNAL`` = 1 ...); the API's enum starts at 0.
_KIND = {
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}
_STATUS = {StatusCode.UNSET: 0, StatusCode.OK: 1, StatusCode.ERROR: 2}


class OtlpJsonFileSpanExporter(SpanExporter):
    """Appends each exported batch to ``path`` as one OTLP/JSON line (module docstring).

    The file is created (with its folder) when the exporter is built, appended to when it
    exists, and closed by :meth:`shutdown`. Raises ``OSError`` at construction when it cannot
    be opened. Thread-safe: the batch processor exports from its own thread."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        line = json.dumps(trace_request(spans), separators=(",", ":"), ensure_ascii=False)
        with self._lock:
            if self._file is None:  # after shutdown
                return SpanExportResult.FAILURE
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except OSError:
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every export is flushed when written

    def shutdown(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def trace_request(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """One OTLP/JSON ``ExportTraceServiceRequest`` holding ``spans`` (finished SDK spans)."""
    by_resource: dict[int, tuple[Any, dict[tuple[str, str], list[dict[str, Any]]]]] = {}
    for span in spans:
        resource = span.resource
        _, scopes = by_resource.setdefault(id(resource), (resource, {}))
        scope = span.instrumentation_scope
        key = (scope.name, scope.version or "") if scope is not None else ("", "")
        scopes.setdefault(key, []).append(_span(span))
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes(resource.attributes)},
                "scopeSpans": [
                    {"scope": _scope(name, version), "spans": encoded}
                    for (name, version), encoded in scopes.items()
                ],
            }
            for resource, scopes in by_resource.values()
        ]
    }


def _scope(name: str, version: str) -> dict[str, str]:
    return {"name": name, "version": version} if version else {"name": name}


def _span(span: ReadableSpan) -> dict[str, Any]:
    context = span.context
    out: dict[str, Any] = {
        "traceId": f"{context.trace_id:032x}" if context is not None else "",
        "spanId": f"{context.span_id:016x}" if context is not None else "",
        "name": span.name,
        "kind": _KIND.get(span.kind, 0),
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or span.start_time or 0),
        "attributes": _attributes(span.attributes or {}),
        "status": _status(span),
    }
    if context is not None and context.trace_state:
        out["traceState"] = context.trace_state.to_header()
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    if span.events:
        out["events"] = [
            {
                "timeUnixNano": str(event.timestamp),
                "name": event.name,
                "attributes": _attributes(event.attributes or {}),
            }
            for event in span.events
        ]
    if span.links:
        out["links"] = [
            {
                "traceId": f"{link.context.trace_id:032x}",
                "spanId": f"{link.context.span_id:016x}",
                "attributes": _attributes(link.attributes or {}),
            }
            for link in span.links
        ]
    return out


def _status(span: ReadableSpan) -> dict[str, Any]:
    code = _STATUS.get(span.status.status_code, 0)
    if not code:
        return {}
    if span.status.description:
        return {"code": code, "message": span.status.description}
    return {"code": code}


def _attributes(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _value(value)} for key, value in attributes.items()]


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):  # before int: a bool is an int
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # int64 as a decimal string (the OTLP/JSON mapping)
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, Sequence):
        return {"arrayValue": {"values": [_value(item) for item in value]}}
    return {"stringValue": str(value)}
