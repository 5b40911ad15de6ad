"""The admission window on ``/metrics`` and in ``GET /agentrt/v1/queues``: fixed, unlimited and
adaptive (with its slow start), read at scrape time (docs/controller.md, "Metrics")."""

from __future__ import annotations

import math
import re

import anyio
import pytest

from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission, AdaptiveWindowConfig
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.service.telemetry.introspection import admission_window

from .conftest import Running, running
from .fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

QUEUES = "/agentrt/v1/queues"


def sample(metrics: str, name: str, backend: str) -> float | None:
    """The value of ``name{backend="..."}`` in a ``/metrics`` text; ``None`` when absent."""
    pattern = rf'^{re.escape(name)}\{{backend="{re.escape(backend)}"\}} (\S+)$'
    match = re.search(pattern, metrics, re.MULTILINE)
    return None if match is None else float(match.group(1))


async def views(svc: Running) -> tuple[dict[str, object], str]:
    """The queues JSON and the ``/metrics`` text, in that order."""
    queues = (await svc.http.get(svc.url + QUEUES)).json()
    metrics = (await svc.http.get(svc.url + "/metrics")).text
    return queues, metrics


async def test_a_fixed_window_shows_as_its_size_while_it_holds_calls() -> None:
    state = FakeState(gate=anyio.Event())
    async with running(state, admission_window=2) as svc, anyio.create_task_group() as group:
        for _ in range(3):
            group.start_soon(svc.chat)
        queues: dict[str, object] = {}
        for _ in range(1000):
            queues, metrics = await views(svc)
            if queues["queued"] == 1:
                break
            await anyio.sleep(0.01)
        state.gate.set()  # type: ignore[union-attr]
    (backend,) = queues["backends"]  # type: ignore[misc]
    name = backend["backend_id"]
    assert backend["admission_window"] == 2 and backend["admission_slow_start"] is None
    assert backend["sequences_in_flight"] == 2
    assert sample(metrics, "agentrt_controller_admission_window", name) == 2.0
    assert sample(metrics, "agentrt_controller_in_flight_sequences", name) == 2.0
    assert 'agentrt_controller_queue_length{level="0"} 1.0' in metrics
    # a fixed window has no slow start: the family is there, without a series
    assert "# TYPE agentrt_controller_admission_slow_start gauge" in metrics
    assert sample(metrics, "agentrt_controller_admission_slow_start", name) is None


async def test_an_unlimited_window_shows_as_inf_and_null() -> None:
    async with running(FakeState(), admission_window=None) as svc:
        assert (await svc.chat()).status_code == 200
        queues, metrics = await views(svc)
    (backend,) = queues["backends"]  # type: ignore[misc]
    assert backend["admission_window"] is None and backend["admission_slow_start"] is None
    assert f'agentrt_controller_admission_window{{backend="{backend["backend_id"]}"}} +Inf' in (
        metrics
    )


async def test_the_adaptive_window_shows_its_slow_start_ramp() -> None:
    """Waiting queue 0, no batch size: 8 in flight fill the initial window of 8, the next
    sample doubles it to 16, 16 in flight fill that, the next doubles it to 32 — more than the
    20 calls, so it stays there, still in slow start."""
    state = FakeState(gate=anyio.Event(), metrics_text="vllm:num_requests_waiting 0\n")
    async with (
        running(state, admission_window="adaptive", scrape_interval_s=0.05) as svc,
        anyio.create_task_group() as group,
    ):
        admission = svc.app.core.dispatcher.admission
        assert isinstance(admission, AdaptiveWindowAdmission)
        before = (await svc.http.get(svc.url + "/metrics")).text
        for _ in range(20):
            group.start_soon(svc.chat)
        queues: dict[str, object] = {}
        with anyio.fail_after(20):
            while True:
                queues, metrics = await views(svc)
                (backend,) = queues["backends"]  # type: ignore[misc]
                if queues["queued"] == 0 and backend["admission_window"] == 32:
                    break
                await anyio.sleep(0.02)
        state.gate.set()  # type: ignore[union-attr]
    name = backend["backend_id"]
    assert sample(before, "agentrt_controller_admission_window", name) == 8.0  # initial
    assert sample(before, "agentrt_controller_admission_slow_start", name) == 1.0
    assert backend["admission_slow_start"] is True and backend["sequences_in_flight"] == 20
    assert sample(metrics, "agentrt_controller_admission_window", name) == 32.0
    assert sample(metrics, "agentrt_controller_admission_slow_start", name) == 1.0
    assert sample(metrics, "agentrt_controller_in_flight_sequences", name) == 20.0


async def test_a_congested_sample_ends_slow_start_on_the_gauge() -> None:
    """A waiting queue of 9 (target 2) shrinks the window of 8 by at most half, to 4, and ends
    slow start for good."""
    state = FakeState(metrics_text="vllm:num_requests_waiting 9\nvllm:num_requests_running 3\n")
    async with running(state, admission_window="adaptive", scrape_interval_s=0.05) as svc:
        with anyio.fail_after(10):
            while svc.app.core.pool.views()[0].num_waiting is None:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        assert (await svc.chat()).status_code == 200
        queues, metrics = await views(svc)
    (backend,) = queues["backends"]  # type: ignore[misc]
    name = backend["backend_id"]
    window = sample(metrics, "agentrt_controller_admission_window", name)
    assert window is not None and window <= 4.0  # later samples of 9 halve it again
    assert backend["admission_window"] <= 4.0
    assert backend["admission_slow_start"] is False
    assert sample(metrics, "agentrt_controller_admission_slow_start", name) == 0.0


def test_the_window_of_each_policy() -> None:
    assert admission_window(FixedWindowAdmission(4), "b") == (4.0, None)
    assert admission_window(FixedWindowAdmission(None), "b") == (math.inf, None)
    adaptive = AdaptiveWindowAdmission()
    assert admission_window(adaptive, "b") == (8.0, True)  # not asked about yet: initial
    congested = BackendView("b", in_flight=0, num_waiting=5, metrics_at_s=1.0)
    adaptive.has_room(congested, 1.0)
    assert admission_window(adaptive, "b") == (5.0, False)  # 8 - (5 - 2)
    assert admission_window(adaptive, "other") == (8.0, True)
    no_ramp = AdaptiveWindowAdmission(AdaptiveWindowConfig(slow_start=False))
    assert admission_window(no_ramp, "b") == (8.0, False)
