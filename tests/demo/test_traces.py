"""Trace files: OTLP-JSON lines written and read back; unreadable files are clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from agentrt.errors import AgentrtError
from agentrt_demo.traces import (
    SpanRecord,
    TraceFileError,
    read_trace,
    records_from_sdk,
    write_trace,
)

from .spans import SpanFactory

pytestmark = pytest.mark.timeout(30)


def test_sdk_spans_round_trip_through_an_otlp_json_file(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with (
        tracer.start_as_current_span("invoke_agent p", attributes={"agentrt.program.id": "p-1"}),
        tracer.start_as_current_span(
            "chat m",
            kind=SpanKind.CLIENT,
            attributes={"n": 3, "x": 0.5, "ok": True, "reasons": ["stop", "length"]},
        ),
    ):
        pass
    records = records_from_sdk(exporter.get_finished_spans())
    path = tmp_path / "t.jsonl"
    write_trace(path, records)

    back = read_trace(path)
    assert back == records
    child = next(r for r in back if r.name == "chat m")
    parent = next(r for r in back if r.name == "invoke_agent p")
    assert child.parent_id == parent.span_id and parent.parent_id == ""
    assert child.kind == 3 and len(child.trace_id) == 32 and len(child.span_id) == 16
    assert child.attributes == {"n": 3, "x": 0.5, "ok": True, "reasons": ["stop", "length"]}
    # The file is OTLP/JSON: typed attribute values, decimal-string times.
    document = json.loads(path.read_text().splitlines()[0])
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert isinstance(span["startTimeUnixNano"], str)
    assert {"key": "agentrt.program.id", "value": {"stringValue": "p-1"}} in (
        next(
            s
            for s in document["resourceSpans"][0]["scopeSpans"][0]["spans"]
            if s["name"] == "invoke_agent p"
        )["attributes"]
    )


def test_many_spans_are_split_over_lines_and_a_pretty_printed_file_is_read(tmp_path: Path) -> None:
    factory = SpanFactory()
    for i in range(450):
        factory.program(f"p{i}", i, i + 1)
    path = tmp_path / "many.jsonl"
    write_trace(path, factory.spans)
    assert len(path.read_text().splitlines()) == 3  # 200 spans per line
    assert len(read_trace(path)) == 450

    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(json.loads(path.read_text().splitlines()[0]), indent=2))
    assert len(read_trace(pretty)) == 200


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty"),
        ("not json at all\n", "line 1: not JSON"),
        ('{"resourceSpans": []}\n{oops\n', "line 2: not JSON"),
        ('{"spans": []}\n', "line 1: not an OTLP/JSON trace request"),
        ("[1, 2]\n", "line 1: not an OTLP/JSON trace request"),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x"}]}]}]}\n',
            "missing field 'startTimeUnixNano'",
        ),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x", "traceId": "a", '
            '"spanId": "b", "startTimeUnixNano": "5", "endTimeUnixNano": "4"}]}]}]}\n',
            "ends before it starts",
        ),
        ('{"resourceSpans": []}\n', "holds no spans"),
    ],
)
def test_bad_trace_files_raise_a_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(TraceFileError, match=message) as caught:
        read_trace(path)
    assert isinstance(caught.value, AgentrtError)
    assert str(path) in str(caught.value)


def test_a_missing_or_binary_trace_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TraceFileError, match="cannot read trace file"):
        read_trace(tmp_path / "nope.jsonl")
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TraceFileError, match="cannot read trace file"):
        read_trace(binary)


def test_unknown_attribute_value_kinds_are_kept_as_empty_strings(tmp_path: Path) -> None:
    line = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "name": "x",
                                "traceId": "AB" * 16,
                                "spanId": "CD" * 8,
                                "startTimeUnixNano": 1,
                                "endTimeUnixNano": 2,
                                "attributes": [{"key": "k", "value": {"bytesValue": "AA=="}}],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(line))
    (record,) = read_trace(path)
    assert record == SpanRecord("x", "ab" * 16, "cd" * 8, "", 0, 1, 2, {"k": ""})
