"""Trace files: spans as OTLP-JSON lines (what an OpenTelemetry Collector's file exporter
writes), read back for the summary and the timeline with the SDK's span file reader
(:mod:`agentrt.otlp_json`, shared with the simulator's trace export).

Each line is one ``ExportTraceServiceRequest`` in the OTLP/JSON encoding:
``{"resourceSpans": [{"resource": {...}, "scopeSpans": [{"scope": {...}, "spans": [...]}]}]}``
with hex ``traceId`` / ``spanId``, times in ``startTimeUnixNano`` / ``endTimeUnixNano``
(decimal strings), typed attribute values (``stringValue``, ``intValue``, ``doubleValue``,
``boolValue``, ``arrayValue``) and ``kind`` as the OTLP enum (1 internal, 2 server, 3 client).
A file holding one pretty-printed request (not one per line) is read too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from agentrt.otlp_json import AttributeValue, OtlpSpan, SpanFileError, read_span_file

__all__ = ["SpanRecord", "TraceFileError", "read_trace", "records_from_sdk", "write_trace"]

_BATCH = 200
_KIND_TO_OTLP = {
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}
_STATUS_TO_OTLP = {StatusCode.UNSET: 0, StatusCode.OK: 1, StatusCode.ERROR: 2}

#: One finished span, as the summary and the timeline need it (the SDK's span file record).
SpanRecord = OtlpSpan


class TraceFileError(SpanFileError):
    """A trace file that cannot be read: missing, not OTLP/JSON, or without spans."""


# ------------------------------------------------------------------------------- from the SDK
def records_from_sdk(spans: Iterable[ReadableSpan]) -> list[SpanRecord]:
    """Finished SDK spans as records (unfinished ones are skipped)."""
    out: list[SpanRecord] = []
    for span in spans:
        ctx = span.context
        if ctx is None or span.start_time is None or span.end_time is None:
            continue
        parent = span.parent
        out.append(
            SpanRecord(
                name=span.name,
                trace_id=f"{ctx.trace_id:032x}",
                span_id=f"{ctx.span_id:016x}",
                parent_id=f"{parent.span_id:016x}" if parent is not None else "",
                kind=_KIND_TO_OTLP.get(span.kind, 0),
                start_ns=span.start_time,
                end_ns=span.end_time,
                attributes={k: _plain(v) for k, v in (span.attributes or {}).items()},
                status=_STATUS_TO_OTLP.get(span.status.status_code, 0),
                resource={k: _plain(v) for k, v in span.resource.attributes.items()},
            )
        )
    return out


def _plain(value: Any) -> AttributeValue:
    if isinstance(value, str | bool | int | float):
        return value
    return [v for v in value]


# ------------------------------------------------------------------------------- writing
def write_trace(path: Path, records: Sequence[SpanRecord]) -> None:
    """Write ``records`` to ``path`` as OTLP-JSON lines (up to 200 spans per line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for start in range(0, len(records), _BATCH):
            out.write(json.dumps(_request(records[start : start + _BATCH]), separators=(",", ":")))
            out.write("\n")


def _request(records: Sequence[SpanRecord]) -> dict[str, Any]:
    by_resource: dict[str, list[SpanRecord]] = {}
    for record in records:
        key = json.dumps(dict(record.resource), sort_keys=True, default=str)
        by_resource.setdefault(key, []).append(record)
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attrs_out(group[0].resource)},
                "scopeSpans": [
                    {"scope": {"name": "agentrt"}, "spans": [_span_out(r) for r in group]}
                ],
            }
            for group in by_resource.values()
        ]
    }


def _span_out(record: SpanRecord) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": record.trace_id,
        "spanId": record.span_id,
        "name": record.name,
        "kind": record.kind,
        "startTimeUnixNano": str(record.start_ns),
        "endTimeUnixNano": str(record.end_ns),
        "attributes": _attrs_out(record.attributes),
        "status": {"code": record.status} if record.status else {},
    }
    if record.parent_id:
        span["parentSpanId"] = record.parent_id
    return span


def _attrs_out(attributes: Mapping[str, AttributeValue]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value_out(v)} for k, v in attributes.items()]


def _value_out(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_value_out(v) for v in value]}}
    return {"stringValue": str(value)}


# ------------------------------------------------------------------------------- reading
def read_trace(path: Path) -> list[SpanRecord]:
    """The spans of an OTLP-JSON trace file (the SDK's reader, :mod:`agentrt.otlp_json`).

    Raises :class:`TraceFileError` when the file cannot be read, a line is not an OTLP-JSON
    trace request (the message names the line), or it holds no span.
    """
    try:
        return read_span_file(path, what="trace file")
    except SpanFileError as exc:
        raise TraceFileError(str(exc)) from None
