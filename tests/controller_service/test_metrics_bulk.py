"""Counters and histograms added up in bulk (service/telemetry/prometheus.py): what a scrape
shows equals the increments and observations made, however collections and updates interleave."""

from __future__ import annotations

import threading

import prometheus_client
import pytest

from agentrt_controller.service.telemetry.prometheus import Registry

pytestmark = pytest.mark.timeout(20)


def scraped(registry: Registry, series: str) -> float:
    for line in registry.render().splitlines():
        if line.startswith(series + " "):
            return float(line.split()[1])
    raise AssertionError(f"{series} not in the scrape")


def test_increments_reach_the_scrape_and_value() -> None:
    registry = Registry()
    calls = registry.counter("calls_total", "calls", ("status",))
    calls.inc(1.0, "200")
    calls.inc(2.5, "200")
    calls.inc(1.0, "503")
    assert scraped(registry, 'calls_total{status="200"}') == 3.5
    calls.inc(1.0, "200")  # after a collection: carried by the next one
    assert calls.value("200") == 4.5
    assert scraped(registry, 'calls_total{status="200"}') == 4.5
    assert scraped(registry, 'calls_total{status="503"}') == 1.0


def test_bad_increments_are_refused_at_once() -> None:
    calls = Registry().counter("calls_total", "calls", ("status",))
    with pytest.raises(ValueError, match="label values"):
        calls.inc(1.0)
    with pytest.raises(ValueError, match="non-negative"):
        calls.inc(-1.0, "200")


def test_collections_from_another_thread_lose_nothing() -> None:
    registry = Registry()
    calls = registry.counter("calls_total", "calls", ("backend",))
    stop = threading.Event()

    def scrape_again_and_again() -> None:
        while not stop.is_set():
            registry.render()

    scraper = threading.Thread(target=scrape_again_and_again)
    scraper.start()
    try:
        for index in range(20_000):
            calls.inc(1.0, f"b{index % 7}")  # new series appear while the scraper copies
    finally:
        stop.set()
        scraper.join()
    assert sum(scraped(registry, f'calls_total{{backend="b{i}"}}') for i in range(7)) == 20_000


def _without_created(text: str) -> list[str]:
    return [line for line in text.splitlines() if "_created" not in line]


def test_histograms_scrape_exactly_as_prometheus_client_s_own() -> None:
    bounds = (0.01, 0.1, 1.0, 10.0)
    ours = Registry()
    histogram = ours.histogram("wait_seconds", "wait", bounds, ("op",))
    theirs = prometheus_client.CollectorRegistry()
    reference = prometheus_client.Histogram(
        "wait_seconds", "wait", ("op",), registry=theirs, buckets=bounds
    )
    values = [0.0, 0.01, 0.010000001, 0.3, 1.0, 9.99, 10.0, 11.0, -1.0, float("inf"), 0.1 / 3]
    values += [0.001 * i for i in range(500)] + [float("nan")]
    for step, value in enumerate(values):
        op = "chat" if step % 3 else "completions"
        histogram.observe(value, op)
        reference.labels(op).observe(value)
        if step % 97 == 0:  # scrapes in between change nothing
            ours.render()
    assert _without_created(ours.render()) == _without_created(
        prometheus_client.generate_latest(theirs).decode()
    )
    # The NaN (the last value, a "chat" one) counts in no bucket, as prometheus_client has it.
    assert histogram.count("chat") == sum(1 for step in range(len(values)) if step % 3) - 1


def test_bad_observations_are_refused_at_once() -> None:
    histogram = Registry().histogram("wait_seconds", "wait", (1.0,), ("op",))
    with pytest.raises(ValueError, match="label values"):
        histogram.observe(1.0)
