"""Counters added up in bulk (service/telemetry/prometheus.py): what a scrape shows equals the
increments made, however collections and increments interleave."""

from __future__ import annotations

import threading

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
