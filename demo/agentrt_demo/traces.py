"""Trace files: spans as OTLP-JSON lines (what an OpenTelemetry Collector's file exporter
writes), read back for the summary and the timeline.

Each line is one ``ExportTraceServiceRequest`` in the OTLP/JSON encoding:
``{"resourceSpans": [{"resource": {...}, "scopeSpans": [{"scope": {...}, "spans": [...]}]}]}``
with hex ``traceId`` / ``spanId``, times in ``startTimeUnixNano`` / ``endTimeUnixNano``
(decimal strings), typed attribute values (``stringValue``, ``intValue``, ``doubleValue``,
``boolValue``, ``arrayValue``) and ``kind`` as the OTLP enum (1 internal, 2 server, 3 client).
A file holding one pretty-printed request (not one per line) is read too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from agentrt.errors import AgentrtError

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

AttributeValue = str | bool | int | float | list[Any]


class TraceFileError(AgentrtError, ValueError):
    """A trace file that cannot be read: missing, not OTLP-JSON, or without spans."""


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One finished span, as the summary and the timeline need it."""

    name: str
    #: 32 / 16 lowercase hex digits; ``parent_id`` is "" for a root span.
    trace_id: str
    span_id: str
    parent_id: str
    #: OTLP span kind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    kind: int
    #: Unix epoch nanoseconds.
    start_ns: int
    end_ns: int
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    #: OTLP status code: 0 unset, 1 ok, 2 error.
    status: int = 0
    resource: Mapping[str, AttributeValue] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


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
    """The spans of an OTLP-JSON trace file.

    Raises :class:`TraceFileError` when the file cannot be read, a line is not an OTLP-JSON
    trace request (the message names the line), or it holds no span.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFileError(f"cannot read trace file {path}: {exc}") from exc
    try:
        documents = _documents(text)
    except ValueError as exc:
        raise TraceFileError(f"{path}: {exc}") from None
    records: list[SpanRecord] = []
    for line_no, document in documents:
        try:
            records.extend(_spans_in(document))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TraceFileError(
                f"{path}, line {line_no}: not an OTLP-JSON trace request ({_describe(exc)})"
            ) from None
    if not records:
        raise TraceFileError(f"{path} holds no spans")
    return records


def _documents(text: str) -> list[tuple[int, Any]]:
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
    if not lines:
        raise ValueError("the file is empty")
    parsed: list[tuple[int, Any]] = []
    for line_no, line in lines:
        try:
            parsed.append((line_no, json.loads(line)))
        except json.JSONDecodeError as exc:
            try:  # one pretty-printed document?
                return [(1, json.loads(text))]
            except json.JSONDecodeError:
                raise ValueError(f"line {line_no} is not JSON ({exc.msg})") from None
    return parsed


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    return str(exc) or type(exc).__name__


def _spans_in(document: Any) -> Iterator[SpanRecord]:
    if not isinstance(document, dict) or "resourceSpans" not in document:
        raise ValueError("expected an object with 'resourceSpans'")
    for resource_spans in document["resourceSpans"]:
        resource = _attrs_in((resource_spans.get("resource") or {}).get("attributes") or [])
        for scope_spans in resource_spans.get("scopeSpans") or []:
            for span in scope_spans.get("spans") or []:
                yield _span_in(span, resource)


def _span_in(span: Mapping[str, Any], resource: Mapping[str, AttributeValue]) -> SpanRecord:
    start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
    if end < start:
        raise ValueError(f"span {span.get('name')!r} ends before it starts")
    name = span["name"]
    if not isinstance(name, str):
        raise ValueError("a span name must be a string")
    return SpanRecord(
        name=name,
        trace_id=str(span["traceId"]).lower(),
        span_id=str(span["spanId"]).lower(),
        parent_id=str(span.get("parentSpanId") or "").lower(),
        kind=int(span.get("kind") or 0),
        start_ns=start,
        end_ns=end,
        attributes=_attrs_in(span.get("attributes") or []),
        status=int((span.get("status") or {}).get("code") or 0),
        resource=resource,
    )


def _attrs_in(items: Iterable[Mapping[str, Any]]) -> dict[str, AttributeValue]:
    return {str(item["key"]): _value_in(item.get("value") or {}) for item in items}


def _value_in(value: Mapping[str, Any]) -> AttributeValue:
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_value_in(v) for v in (value["arrayValue"].get("values") or [])]
    return ""
