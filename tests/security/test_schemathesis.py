"""Schemathesis over both servers' OpenAPI documents (``GET /openapi.json``), in process, on
loopback, bounded: a controller (two tenants' keys, an admin token) in front of an emulator.
Every operation of each document gets :data:`EXAMPLES` generated requests (derandomized: the
same requests every run); each answer must be no 5xx and conform to the document (status,
content type, body schema). The figures go to stdout (``pytest -s``) and docs/security.md.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from .stack import MODEL, Stack, threaded_stack

#: Generated requests per operation (the whole run stays well under a minute).
EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
TENANT_KEY = "fuzz-key-a"


@dataclass
class Figures:
    """What one server's run did."""

    operations: int = 0
    examples: int = 0
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    #: ``"METHOD /path -> status: reason"`` of each failed check.
    failures: list[str] = field(default_factory=list)

    def line(self, server: str) -> str:
        statuses = ", ".join(f"{s}: {n}" for s, n in sorted(self.statuses.items()))
        return (
            f"schemathesis {server}: {self.operations} operations, {self.examples} examples, "
            f"{len(self.failures)} failures ({statuses})"
        )


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with threaded_stack(
        api_keys=f"alice={TENANT_KEY},bob=fuzz-key-b", admin_token="fuzz-admin-token"
    ) as running:
        httpx.get(running.controller_url + "/readyz", timeout=10)
        yield running


def _document(base_url: str) -> dict[str, Any]:
    answer = httpx.get(base_url + "/openapi.json", timeout=10)
    assert answer.status_code == 200
    document: dict[str, Any] = answer.json()
    return document


def _fuzz(
    base_url: str,
    headers: dict[str, str],
    document: dict[str, Any] | None = None,
    *,
    session_id: str | None = None,
) -> Figures:
    """Run every operation of ``document`` (``base_url``'s own by default); the figures.
    With ``session_id``, half the event bodies name that live session and half the program
    ids are one program, so events reach a live program too."""
    if document is None:
        document = _document(base_url)
    schema = schemathesis.openapi.from_dict(document)
    figures = Figures()
    for result in schema.get_all_operations():
        operation = result.ok()
        figures.operations += 1
        # Half the bodies name the served model (the other half mostly get 404): the calls
        # then reach the scheduler and the engine; half the events a live session's program.
        strategy = st.tuples(operation.as_strategy(), st.booleans())

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(drawn=strategy)
        def run(drawn: tuple[Any, bool]) -> None:
            case, served = drawn
            if served and isinstance(case.body, dict):
                if "model" in case.body:
                    case.body["model"] = MODEL
                if session_id is not None and "session_id" in case.body:
                    case.body["session_id"] = session_id
            if served and session_id is not None and "program_id" in (case.path_parameters or {}):
                case.path_parameters["program_id"] = "fuzzed-program"
            response = case.call(base_url=base_url, headers=headers, timeout=20)
            figures.examples += 1
            figures.statuses[response.status_code] += 1
            try:
                case.validate_response(response, checks=CHECKS)
            except FailureGroup as failed:
                reasons = "; ".join(
                    getattr(f, "title", type(f).__name__) for f in failed.exceptions
                )
                figures.failures.append(
                    f"{case.operation.label} -> {response.status_code}: {reasons}"
                )

        run()
    return figures


@pytest.mark.timeout(120)
def test_schemathesis_finds_no_5xx_and_no_answer_outside_the_documents(stack: Stack) -> None:
    tenant = {"Authorization": f"Bearer {TENANT_KEY}"}
    session = httpx.post(
        stack.controller_url + "/agentrt/v1/sessions", json={}, headers=tenant, timeout=10
    )
    controller = _fuzz(stack.controller_url, tenant, session_id=session.json()["session_id"])
    engine = _fuzz(stack.engine_url, {})
    print()
    print(controller.line("controller"))
    print(engine.line("emulator"))
    assert controller.operations >= 20 and engine.operations >= 15
    assert controller.failures == [] and engine.failures == []
    assert not any(s >= 500 for s in (*controller.statuses, *engine.statuses))
    assert controller.statuses[200] > 0 and engine.statuses[200] > 0
    assert stack.logs.tracebacks() == []


def test_an_answer_outside_the_document_is_reported(stack: Stack) -> None:
    """The run above is not vacuous: a document that promises what the server does not answer
    (``/livez`` giving an integer) fails the schema check."""
    document = _document(stack.controller_url)
    document["paths"] = {"/livez": document["paths"]["/livez"]}
    answer = document["paths"]["/livez"]["get"]["responses"]["200"]
    answer["content"]["application/json"]["schema"] = {"type": "integer"}
    figures = _fuzz(stack.controller_url, {}, document)
    assert figures.examples >= 1
    assert figures.failures and all("violates schema" in f for f in figures.failures)


def test_a_streamed_answer_conforms_event_by_event(stack: Stack) -> None:
    """A 200 event stream from either server passes schemathesis' schema check: every event
    (chunks, the usage chunk, ``[DONE]``) matches the document's event schema."""
    for base_url, headers in (
        (stack.engine_url, {}),
        (stack.controller_url, {"Authorization": f"Bearer {TENANT_KEY}"}),
    ):
        schema = schemathesis.openapi.from_dict(_document(base_url))
        operation = schema["/v1/chat/completions"]["POST"]
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 4,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        case = operation.Case(body=body, media_type="application/json")
        response = case.call(base_url=base_url, headers=headers, timeout=20)
        assert response.status_code == 200
        assert response.headers["content-type"][0].startswith("text/event-stream")
        assert b"[DONE]" in response.content
        case.validate_response(response, checks=CHECKS)
