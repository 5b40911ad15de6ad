"""agentrt_serving.openapi: the document both servers serve at ``/openapi.json``."""

from __future__ import annotations

from typing import Any

import pytest

from agentrt_serving.openapi import JSON_OBJECT, Answer, Operation, openapi_document

pytestmark = pytest.mark.timeout(10)

_OK = {200: Answer("fine", JSON_OBJECT)}


def _document(*operations: Operation) -> dict[str, Any]:
    return openapi_document(title="t", version="1", description="d", operations=operations)


def test_an_operation_gets_its_path_parameters_the_error_default_and_security() -> None:
    op = Operation("delete", "/things/{thing_id}", "remove", _OK,
                   path_params={"thing_id": {"type": "string", "pattern": "^a+$"}},
                   query={"limit": {"type": "integer"}}, tag="things", secured=True)  # fmt: skip
    document = _document(op, Operation("get", "/things/{thing_id}", "read", _OK))
    paths = document["paths"]
    removal, reading = paths["/things/{thing_id}"]["delete"], paths["/things/{thing_id}"]["get"]
    assert removal["parameters"] == [
        {"name": "thing_id", "in": "path", "required": True,
         "schema": {"type": "string", "pattern": "^a+$"}},
        {"name": "limit", "in": "query", "required": False, "schema": {"type": "integer"}},
    ]  # fmt: skip
    assert reading["parameters"][0]["schema"] == {"type": "string", "minLength": 1}
    assert removal["responses"]["default"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    assert removal["security"] == [{"bearer": []}, {}] and "security" not in reading
    assert removal["operationId"] != reading["operationId"]
    assert document["openapi"] == "3.1.0"


def test_a_streaming_answer_documents_the_event_stream_too() -> None:
    op = Operation("post", "/gen", "generate", {200: Answer("out", JSON_OBJECT, streams=True)},
                   body=JSON_OBJECT)  # fmt: skip
    content = _document(op)["paths"]["/gen"]["post"]["responses"]["200"]["content"]
    assert set(content) == {"application/json", "text/event-stream"}


def test_an_operation_listed_twice_is_refused() -> None:
    op = Operation("get", "/x", "x", _OK)
    with pytest.raises(ValueError, match="GET /x is listed twice"):
        _document(op, op)


def test_an_event_stream_documents_each_event_as_a_parser_reads_it() -> None:
    """OpenAPI 3.1 has an event stream's schema describe each event (schemathesis validates
    every event of a 200 stream against it): its data, event type, id and retry."""
    op = Operation("post", "/gen", "generate", {200: Answer("out", JSON_OBJECT, streams=True)},
                   body=JSON_OBJECT)  # fmt: skip
    content = _document(op)["paths"]["/gen"]["post"]["responses"]["200"]["content"]
    event = content["text/event-stream"]["schema"]
    assert event["type"] == "object" and event["required"] == ["data"]
    assert event["properties"]["data"] == {"type": "string"}
