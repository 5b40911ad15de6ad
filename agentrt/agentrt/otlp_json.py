"""Reading span files: OTLP/JSON trace requests, one per line (or one pretty-printed document).

This is the encoding an OpenTelemetry Collector's file exporter writes, and the one the demo's
``trace-*.jsonl`` files use: each line one ``ExportTraceServiceRequest``, ``{"resourceSpans":
[{"resource": {...}, "scopeSpans": [{"scope": {...}, "spans": [...]}]}]}``, with hex ``traceId``
/ ``spanId`` / ``parentSpanId``, times in ``startTimeUnixNano`` / ``endTimeUnixNano`` (decimal
strings or integers), typed attribute values (``stringValue``, ``intValue``, ``doubleValue``,
``boolValue``, ``arrayValue``; any other kind reads as ``""``) and ``kind`` / ``status.code`` as
OTLP enum numbers. The protobuf messages' generic proto3 JSON form (what
``google.protobuf.json_format`` makes of the OpenTelemetry exporter's ``encode_spans``) reads
too: its enums by name are mapped to their numbers; its ids are base64, kept as given (lower
case).

Pure: the standard library only. The simulator's trace export (``agentrt trace``) and the demo's
timeline read span files with :func:`read_span_file`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias, TypedDict, cast

from agentrt.errors import ConfigError

__all__ = ["AttributeValue", "OtlpSpan", "SpanFileError", "read_span_file"]

#: An attribute's value: OTLP's scalar kinds, or a list of values (``arrayValue``).
AttributeValue: TypeAlias = "str | bool | int | float | list[AttributeValue]"


# The OTLP/JSON shapes read below (what the file should hold: nothing is validated up front; a
# field of the wrong shape raises KeyError / TypeError / ValueError / AttributeError, which
# ``read_span_file`` reports with the line).
class _AnyValue(TypedDict, total=False):
    stringValue: str
    boolValue: bool
    intValue: str | int
    doubleValue: float | int
    arrayValue: _ArrayValue


class _ArrayValue(TypedDict, total=False):
    values: list[_AnyValue]


class _KeyValue(TypedDict, total=False):
    key: str
    value: _AnyValue


class _Status(TypedDict, total=False):
    code: int | str


class _Span(TypedDict, total=False):
    name: str
    traceId: str
    spanId: str
    parentSpanId: str
    kind: int | str
    startTimeUnixNano: str | int
    endTimeUnixNano: str | int
    attributes: list[_KeyValue]
    status: _Status


class _ScopeSpans(TypedDict, total=False):
    spans: list[_Span]


class _Resource(TypedDict, total=False):
    attributes: list[_KeyValue]


class _ResourceSpans(TypedDict, total=False):
    resource: _Resource
    scopeSpans: list[_ScopeSpans]


class _TraceRequest(TypedDict):
    resourceSpans: list[_ResourceSpans]


class SpanFileError(ConfigError):
    """A span file that cannot be read: missing, not OTLP/JSON, or without spans. The message
    names the file and, where one is at fault, the line."""


@dataclass(frozen=True, slots=True)
class OtlpSpan:
    """One finished span of a span file."""

    name: str
    #: As in the file, lower case: 32 / 16 hex digits in OTLP/JSON; "" when absent.
    trace_id: str = ""
    span_id: str = ""
    #: "" for a root span.
    parent_id: str = ""
    #: OTLP span kind: 0 unspecified, 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    kind: int = 0
    #: Unix epoch nanoseconds; ``end_ns >= start_ns``.
    start_ns: int = 0
    end_ns: int = 0
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    #: OTLP status code: 0 unset, 1 ok, 2 error.
    status: int = 0
    #: The attributes of the resource that emitted the span.
    resource: Mapping[str, AttributeValue] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        """Wall time of the span (seconds, >= 0)."""
        return max(0, self.end_ns - self.start_ns) / 1e9

    def attr(self, key: str) -> AttributeValue | None:
        """The attribute ``key``, None when absent."""
        return self.attributes.get(key)


def read_span_file(path: str | Path, *, what: str = "span file") -> list[OtlpSpan]:
    """The spans of the OTLP/JSON span file at ``path``, in file order.

    Raises :class:`SpanFileError` when the file cannot be read (the message says ``cannot read
    {what} {path}``), is empty, a line is not JSON or not an OTLP/JSON trace request (the
    message names the line), or it holds no span.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpanFileError(f"cannot read {what} {path}: {exc}") from exc
    spans: list[OtlpSpan] = []
    for line_no, document in _documents(path, text):
        try:
            spans.extend(_spans_in(document))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SpanFileError(
                f"{path}, line {line_no}: not an OTLP/JSON trace request ({_describe(exc)})"
            ) from None
    if not spans:
        raise SpanFileError(f"{path} holds no spans")
    return spans


def _documents(path: Path, text: str) -> list[tuple[int, object]]:
    """(line number, parsed JSON) per non-blank line, or ``[(1, document)]`` for a file that
    is one pretty-printed document."""
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
    if not lines:
        raise SpanFileError(f"{path} is empty")
    parsed: list[tuple[int, object]] = []
    for line_no, line in lines:
        try:
            parsed.append((line_no, json.loads(line)))
        except json.JSONDecodeError as exc:
            try:  # one pretty-printed document?
                return [(1, json.loads(text))]
            except json.JSONDecodeError:
                raise SpanFileError(
                    f"{path}, line {line_no}: not JSON ({exc.msg}); expected OTLP/JSON trace "
                    "requests, one per line"
                ) from None
    return parsed


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    return str(exc) or type(exc).__name__


def _spans_in(document: object) -> Iterator[OtlpSpan]:
    if not isinstance(document, dict) or "resourceSpans" not in document:
        raise ValueError("expected an object with 'resourceSpans'")
    request = cast(_TraceRequest, document)  # its shape is checked field by field, as read
    for resource_spans in request["resourceSpans"]:
        resource = _attrs_in((resource_spans.get("resource") or {}).get("attributes") or [])
        for scope_spans in resource_spans.get("scopeSpans") or []:
            for span in scope_spans.get("spans") or []:
                yield _span_in(span, resource)


def _span_in(span: _Span, resource: Mapping[str, AttributeValue]) -> OtlpSpan:
    start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
    name = span["name"]
    if not isinstance(name, str):
        raise ValueError("a span name must be a string")
    if end < start:
        raise ValueError(f"span {name!r} ends before it starts")
    return OtlpSpan(
        name=name,
        trace_id=str(span.get("traceId") or "").lower(),
        span_id=str(span.get("spanId") or "").lower(),
        parent_id=str(span.get("parentSpanId") or "").lower(),
        kind=_enum(span.get("kind"), _KIND_NAMES),
        start_ns=start,
        end_ns=end,
        attributes=_attrs_in(span.get("attributes") or []),
        status=_enum((span.get("status") or {}).get("code"), _STATUS_NAMES),
        resource=resource,
    )


#: Enum values by their protobuf names (the proto3 JSON mapping writes names).
_STATUS_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_KIND_NAMES = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}


def _enum(value: int | str | None, names: Mapping[str, int]) -> int:
    if isinstance(value, str) and value in names:
        return names[value]
    return int(value or 0)


def _attrs_in(items: Iterable[_KeyValue]) -> dict[str, AttributeValue]:
    return {str(item["key"]): _value_in(item.get("value") or {}) for item in items}


def _value_in(value: _AnyValue) -> AttributeValue:
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
