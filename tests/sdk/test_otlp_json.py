"""The SDK's span file reader (agentrt.otlp_json), shared by the simulator's trace export and the
demo's timeline: both encodings of a span, and its errors in the SDK's error tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrt.errors import ConfigError
from agentrt.otlp_json import OtlpSpan, SpanFileError, read_span_file

pytestmark = pytest.mark.timeout(10)


def _request(span: dict[str, object], resource: dict[str, object] | None = None) -> str:
    resource_spans: dict[str, object] = {"scopeSpans": [{"spans": [span]}]}
    if resource is not None:
        resource_spans["resource"] = {
            "attributes": [{"key": k, "value": v} for k, v in resource.items()]
        }
    return json.dumps({"resourceSpans": [resource_spans]})


def test_otlp_json_and_the_proto3_json_form_read_alike(tmp_path: Path) -> None:
    otlp = {
        "name": "llm.call",
        "traceId": "AB" * 16,
        "spanId": "CD" * 8,
        "parentSpanId": "EF" * 8,
        "kind": 3,
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": 3_000,
        "attributes": [
            {"key": "s", "value": {"stringValue": "x"}},
            {"key": "i", "value": {"intValue": "7"}},
            {"key": "d", "value": {"doubleValue": 0.5}},
            {"key": "b", "value": {"boolValue": True}},
            {"key": "a", "value": {"arrayValue": {"values": [{"intValue": "1"}]}}},
            {"key": "bytes", "value": {"bytesValue": "AA=="}},
        ],
        "status": {"code": 2},
    }
    proto3 = {**otlp, "kind": "SPAN_KIND_CLIENT", "status": {"code": "STATUS_CODE_ERROR"}}
    path = tmp_path / "spans.jsonl"
    path.write_text(
        _request(otlp, {"service.name": {"stringValue": "svc"}}) + "\n\n" + _request(proto3) + "\n"
    )
    first, second = read_span_file(path)
    assert first == OtlpSpan(
        "llm.call",
        "ab" * 16,
        "cd" * 8,
        "ef" * 8,
        3,
        1000,
        3000,
        {"s": "x", "i": 7, "d": 0.5, "b": True, "a": [1], "bytes": ""},
        2,
        {"service.name": "svc"},
    )
    assert second == OtlpSpan(**{**_fields(first), "resource": {}})
    assert first.duration_s == pytest.approx(2e-6)
    assert first.attr("i") == 7 and first.attr("missing") is None


def _fields(span: OtlpSpan) -> dict[str, object]:
    return {name: getattr(span, name) for name in OtlpSpan.__dataclass_fields__}


def test_ids_kind_and_status_are_optional_and_a_pretty_document_reads(tmp_path: Path) -> None:
    span = {"name": "tool", "startTimeUnixNano": 5, "endTimeUnixNano": 5}
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps(json.loads(_request(span)), indent=2))
    assert read_span_file(path) == [OtlpSpan("tool", start_ns=5, end_ns=5)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read trace file .*missing.jsonl"),
        ("", "is empty"),
        ('{"resourceSpans": []}\n{oops\n', "line 2: not JSON"),
        ('{"spans": []}\n', "line 1: not an OTLP/JSON trace request"),
        (_request({"name": "x", "startTimeUnixNano": 1}) + "\n", "missing field 'endTimeUnixNano'"),
        (_request({"name": 3, "startTimeUnixNano": 1, "endTimeUnixNano": 2}), "name must be a str"),
        (_request({"name": "x", "startTimeUnixNano": 2, "endTimeUnixNano": 1}), "ends before"),
        (_request({"name": "x", "startTimeUnixNano": 1, "endTimeUnixNano": 2, "kind": "?"}), "'?'"),
        ('{"resourceSpans": []}\n', "holds no spans"),
    ],
)
def test_a_bad_span_file_is_a_config_error_naming_the_file(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / ("missing.jsonl" if content is None else "bad.jsonl")
    if content is not None:
        path.write_text(content)
    with pytest.raises(SpanFileError, match=message) as caught:
        read_span_file(path, what="trace file")
    assert isinstance(caught.value, ConfigError)
    assert str(path) in str(caught.value)
