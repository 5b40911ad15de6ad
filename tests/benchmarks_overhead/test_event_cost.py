"""benchmarks/event_cost.py runs end to end: every tool-wait event is accepted (the SDK's link
runs in ``required`` mode, so a refused or lost event raises) and the costs are read (no
timing asserted here)."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(120)

bench = load_benchmark("event_cost")


@pytest.mark.parametrize("http_path", ["direct", "asgi"])
def test_events_are_sent_and_their_cost_read(http_path: str) -> None:
    args = argparse.Namespace(waits=5, programs=2, http_path=http_path)
    result = asyncio.run(bench.cost(args))
    assert set(result) == {
        "controller_us_per_event",
        "sdk_us_per_event",
        "event_p50_ms",
        "controller_us_per_call",
        "client_us_per_call",
    }
    assert result["controller_us_per_event"] > 0 and result["event_p50_ms"] > 0
    assert result["controller_us_per_call"] > 0
