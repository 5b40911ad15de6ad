"""``agentrt_controller_promotions_total`` counts the scheduler's anti-starvation promotions,
with a bare policy and inside tenants' fair shares (the controller's default wiring): the
paper's anti-starvation example (BRIEF §3, beta = 3) promotes one call, and the scrape-time
collection turns the scheduler's snapshot into the counter."""

from __future__ import annotations

import pytest

from agentrt_controller.scheduling.api import Scheduler
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.service.telemetry.metrics import ServiceMetrics
from tests.controller_policies.helpers import make_call


def _promote_once(scheduler: Scheduler) -> float:
    """Drive the worked example to its one promotion; returns the time it happened at."""
    first = make_call("p", 0.0, tenant="alice")
    scheduler.submit(first, 0.0)
    assert scheduler.pop(50.0) is first
    scheduler.on_finish(first, 20.0, 70.0)
    call = make_call("p", 70.0, tenant="alice")
    scheduler.submit(call, 70.0)
    assert scheduler.pop(70.0) is call
    call.service_s = 1.0
    scheduler.requeue(call, 71.0)
    assert scheduler.pop(86.0) is call  # popping runs the anti-starvation check
    assert call.promotions == 1
    return 86.0


@pytest.mark.parametrize("tenancy", [None, {"enabled": True}], ids=["bare", "fair-shares"])
def test_the_promotions_counter_follows_the_scheduler(tenancy: dict[str, bool] | None) -> None:
    scheduler = build_scheduler("plas", SchedulerConfig(starvation_beta=3.0), tenancy=tenancy)
    metrics = ServiceMetrics()
    metrics.fill_queues(scheduler.snapshot(0.0))
    assert metrics.promotions.value() == 0.0
    now_s = _promote_once(scheduler)
    metrics.fill_queues(scheduler.snapshot(now_s))
    assert metrics.promotions.value() == 1.0
    metrics.fill_queues(scheduler.snapshot(now_s))  # a second scrape counts nothing again
    assert metrics.promotions.value() == 1.0
