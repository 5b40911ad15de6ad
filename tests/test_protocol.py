from __future__ import annotations

import math

import pytest

from agentrt.errors import ProtocolError
from agentrt.protocol import HEADER_PROGRAM_ID, HEADER_TRACEPARENT, CallTags, deadline_after


def test_round_trip_through_headers() -> None:
    tags = CallTags(
        session_id="s1",
        program_id="p1",
        thread_id="t2",
        node_id="n7",
        parent_ids=("n5", "n6"),
        attempt=2,
        timeout_ms=1500,
        objective="throughput",
    )
    headers = {k.lower(): v for k, v in tags.to_headers().items()}
    assert CallTags.from_headers(headers) == tags
    # Trace context is the OpenTelemetry propagator's, not a tag: neither written nor parsed.
    assert HEADER_TRACEPARENT not in headers
    traced = {
        **headers,
        HEADER_TRACEPARENT: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    }
    assert CallTags.from_headers(traced) == tags
    assert tags.deadline_s(10.0) == pytest.approx(11.5)


def test_untagged_request_has_no_tags() -> None:
    assert CallTags.from_headers({"content-type": "application/json"}) is None


def test_missing_optional_headers_take_defaults() -> None:
    tags = CallTags.from_headers({HEADER_PROGRAM_ID: "p"})
    assert tags is not None
    assert (tags.thread_id, tags.attempt, tags.timeout_ms) == ("main", 1, None)
    assert tags.deadline_s(3.0) == math.inf


def test_a_deadline_counts_the_senders_wall_milliseconds_on_the_receivers_clock() -> None:
    assert deadline_after(None, 3.0) == math.inf
    assert deadline_after(1500, 10.0) == pytest.approx(11.5)
    # A receiver whose clock runs 10 of its seconds per wall second (a controller at
    # --time-scale 10) gives the same 1.5 wall seconds 15 of its own.
    assert deadline_after(1500, 10.0, time_scale=10.0) == pytest.approx(25.0)


@pytest.mark.parametrize(
    "headers",
    [
        {HEADER_PROGRAM_ID: "p", "X-Agentrt-Attempt": "x"},
        {HEADER_PROGRAM_ID: "p", "X-Agentrt-Attempt": "0"},
        {HEADER_PROGRAM_ID: "p", "X-Agentrt-Timeout-Ms": "-5"},
        {HEADER_PROGRAM_ID: "bad id with spaces"},
        {HEADER_PROGRAM_ID: "p", "X-Agentrt-Objective": "fast"},
        {HEADER_PROGRAM_ID: "p" * 200},
        {HEADER_PROGRAM_ID: "p", "X-Agentrt-Timeout-Ms": "soon"},
        {HEADER_PROGRAM_ID: "p", "X-Agentrt-Parent-Ids": "a,b", "X-Agentrt-Parent-Count": "1"},
        {HEADER_PROGRAM_ID: "p", "X-Agentrt-Parent-Count": "many"},
        {HEADER_PROGRAM_ID: "p", "X-Agentrt-Parent-Digest": "md5:abc"},
    ],
)
def test_malformed_tags_are_rejected(headers: dict[str, str]) -> None:
    with pytest.raises(ProtocolError):
        CallTags.from_headers(headers)
