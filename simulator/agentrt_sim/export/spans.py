"""Read span files: OTLP/JSON trace requests, one per line (or one pretty-printed document).

This is the encoding an OpenTelemetry Collector's file exporter writes and the one the demo's
``trace-*.jsonl`` files use: ``{"resourceSpans": [{"resource": {...}, "scopeSpans": [{"scope":
{...}, "spans": [...]}]}]}`` with times in ``startTimeUnixNano`` / ``endTimeUnixNano`` (decimal
strings or integers) and typed attribute values (``stringValue``, ``intValue``, ``doubleValue``,
``boolValue``, ``arrayValue``). The protobuf messages' generic proto3 JSON form (what
``google.protobuf.json_format`` makes of the OpenTelemetry exporter's ``encode_spans``) reads
too: it differs only in base64 ids and enums by name. Span and trace ids are not needed (the
agentrt attributes say which program, thread and node a span belongs to).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.errors import ConfigError

__all__ = ["AttributeValue", "Span", "SpanFileError", "read_spans"]

AttributeValue = str | bool | int | float | list[Any]


class SpanFileError(ConfigError):
    """A span file that cannot be read: missing, not OTLP/JSON, or without spans."""


@dataclass(frozen=True, slots=True)
class Span:
    """One finished span, as the exporter needs it."""

    name: str
    #: Unix epoch nanoseconds.
    start_ns: int
    end_ns: int
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    #: OTLP status code: 0 unset, 1 ok, 2 error.
    status: int = 0

    @property
    def duration_s(self) -> float:
        """Wall time of the span (seconds, >= 0)."""
        return max(0, self.end_ns - self.start_ns) / 1e9

    def attr(self, key: str) -> AttributeValue | None:
        """The attribute ``key``, None when absent."""
        return self.attributes.get(key)


def read_spans(path: str | Path) -> list[Span]:
    """The spans of an OTLP/JSON span file.

    Raises :class:`SpanFileError` when the file cannot be read, a line is not an OTLP/JSON
    trace request (the message names the line), or it holds no span.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpanFileError(f"cannot read span file {path}: {exc}") from exc
    spans: list[Span] = []
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


def _documents(path: Path, text: str) -> list[tuple[int, Any]]:
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
    if not lines:
        raise SpanFileError(f"{path} is empty")
    parsed: list[tuple[int, Any]] = []
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


def _spans_in(document: Any) -> Iterator[Span]:
    if not isinstance(document, dict) or "resourceSpans" not in document:
        raise ValueError("expected an object with 'resourceSpans'")
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans.get("scopeSpans") or []:
            for span in scope_spans.get("spans") or []:
                yield _span_in(span)


def _span_in(span: Mapping[str, Any]) -> Span:
    start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
    name = span["name"]
    if not isinstance(name, str):
        raise ValueError("a span name must be a string")
    if end < start:
        raise ValueError(f"span {name!r} ends before it starts")
    return Span(
        name=name,
        start_ns=start,
        end_ns=end,
        attributes=_attrs_in(span.get("attributes") or []),
        status=_status_code((span.get("status") or {}).get("code")),
    )


#: Status codes by their protobuf enum name (the proto3 JSON mapping writes names).
_STATUS_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


def _status_code(code: Any) -> int:
    if isinstance(code, str) and code in _STATUS_NAMES:
        return _STATUS_NAMES[code]
    return int(code or 0)


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
