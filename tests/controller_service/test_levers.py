"""The two levers: backend priority and controller-side admission; quanta from streamed
tokens; adaptive windows fed by scraped ``vllm:num_requests_waiting``."""

from __future__ import annotations

import anyio
import pytest

from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission

from .conftest import running
from .fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def test_quanta_are_counted_from_streamed_tokens() -> None:
    state = FakeState(tokens=40)  # MLFQ's first quantum is 16 tokens, the second 32
    async with running(state, policy="mlfq") as svc:
        response = await svc.chat(stream=True)
        queues = (await svc.http.get(svc.url + "/agentrt/v1/queues")).json()
    assert response.status_code == 200
    assert queues["demotions_total"] == 1  # 40 tokens: used up the 16-token quantum once


async def test_window_holds_calls_at_the_controller() -> None:
    state = FakeState(gate=anyio.Event())
    async with running(state, admission_window=2) as svc, anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(svc.chat)
        for _ in range(1000):
            queues = (await svc.http.get(svc.url + "/agentrt/v1/queues")).json()
            if queues["queued"] == 3:
                break
            await anyio.sleep(0.01)
        backend = queues["backends"][0]
        state.gate.set()  # type: ignore[union-attr]
    assert backend["in_flight"] == 2 and queues["queued"] == 3
    assert len(state.requests) == 5  # all answered once the gate opened


async def test_adaptive_window_reads_the_scraped_waiting_queue() -> None:
    state = FakeState(metrics_text="vllm:num_requests_waiting 9\nvllm:num_requests_running 3\n")
    async with running(state, admission_window="adaptive", scrape_interval_s=0.05) as svc:
        assert isinstance(svc.app.core.dispatcher.admission, AdaptiveWindowAdmission)
        with anyio.fail_after(10):
            while svc.app.core.pool.views()[0].num_waiting is None:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        (view,) = svc.app.core.pool.views()
        assert (view.num_waiting, view.num_running) == (9, 3)
        assert view.metrics_at_s is not None
        assert (await svc.chat()).status_code == 200
        queues = (await svc.http.get(svc.url + "/agentrt/v1/queues")).json()
        metrics = (await svc.http.get(svc.url + "/metrics")).text
    assert queues["admission"] == "adaptive"
    assert 'agentrt_controller_backend_num_requests_waiting{backend="' in metrics


async def test_default_window_holds_calls_beyond_a_reported_batch_of_two() -> None:
    """No admission option: the adaptive window, bounded by the scraped batch size (2) plus
    target_waiting (2), keeps the 6 further calls in the controller's queues."""
    state = FakeState(
        gate=anyio.Event(),
        metrics_text="vllm:num_requests_waiting 0\nagentrt_engine_max_num_seqs 2\n",
    )
    async with running(state, scrape_interval_s=0.05) as svc, anyio.create_task_group() as group:
        admission = svc.app.core.dispatcher.admission
        assert isinstance(admission, AdaptiveWindowAdmission)
        with anyio.fail_after(10):
            while svc.app.core.pool.views()[0].max_num_seqs is None:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        for _ in range(10):
            group.start_soon(svc.chat)
        for _ in range(1000):
            queues = (await svc.http.get(svc.url + "/agentrt/v1/queues")).json()
            if queues["queued"] == 6:
                break
            await anyio.sleep(0.01)
        backend = queues["backends"][0]
        window = admission.window(backend["backend_id"])
        state.gate.set()  # type: ignore[union-attr]
    assert backend["in_flight"] == 4 and queues["queued"] == 6
    assert window == 4
    assert len(state.requests) == 10
