"""When the core wakes its dispatch loop (``CallQueue``): on an arrival while another call is
queued or in flight (an arrival at an idle controller is decided at once, in its own task, by
the same ``Dispatcher.admit``), and on a finish only while calls are queued — a round with none
queued has nothing to do. The client waits on a future made only when it has to. On a fake
clock, through the facade as the HTTP layer calls it."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import anyio
import pytest

from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core.facade import ControllerCore
from tests.controller_service.fake_core import running_core, settle, untagged

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def _core(window: int = 1) -> AbstractAsyncContextManager[ControllerCore]:
    """A running core with one fake backend and an admission window of ``window`` calls."""
    config = ControllerConfig(
        policy="plas", admission_window=window, scrape_interval_s=3600.0, retention="off"
    )
    return running_core(config)


async def test_a_finish_wakes_the_loop_only_while_calls_are_queued() -> None:
    async with _core() as core:
        first = untagged(core, "first")
        core.calls.submit(first)  # an idle controller: decided at once, the loop not woken
        assert not core._woken
        assert first.admission is not None and first.waiter is None  # decided before asked
        assert await core.calls.admitted(first) is first.admission

        second = untagged(core, "second")  # the window (one call) is full: it is queued
        core.calls.submit(second)
        assert core._woken  # a call in flight: the loop decides
        await settle()
        assert second.admission is None and core.calls.queued() == 1

        async def wait_second() -> None:
            await core.calls.admitted(second)

        async with anyio.create_task_group() as group:
            group.start_soon(wait_second)
            await settle()
            assert second.waiter is not None and not second.waiter.done()
            core.calls.finish(first.admission.call, "b0", 0.1, ok=True)
            assert core._woken  # a call is queued: the finish wakes the loop
        assert second.admission is not None and core.calls.queued() == 0

        core.calls.finish(second.admission.call, "b0", 0.1, ok=True)
        assert not core._woken  # nothing queued: no round to run


async def test_an_arrival_while_a_call_is_in_flight_is_decided_by_the_loop_s_round() -> None:
    async with _core(window=4) as core:
        first = untagged(core, "first")
        core.calls.submit(first)
        assert first.admission is not None and core.pool.calls_in_flight == 1
        second, third = untagged(core, "second"), untagged(core, "third")
        core.calls.submit(second)
        core.calls.submit(third)
        assert core._woken and core.calls.queued() == 2
        assert second.admission is None and third.admission is None  # not before the round
        await settle()  # one round of the loop admits both
        assert second.admission is not None and third.admission is not None
        assert core.pool.calls_in_flight == 3
        for pending in (first, second, third):
            assert pending.admission is not None
            core.calls.finish(pending.admission.call, "b0", 0.1, ok=True)
        assert core.pool.calls_in_flight == 0
        fourth = untagged(core, "fourth")  # idle again: decided at once
        core.calls.submit(fourth)
        assert fourth.admission is not None and not core._woken
        core.calls.finish(fourth.admission.call, "b0", 0.1, ok=True)


async def test_a_failing_round_at_arrival_leaves_the_call_queued_for_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with _core() as core:
        real_admit = core.dispatcher.admit
        failures = [RuntimeError("policy bug")]

        def flaky_admit(now_s: float, views: object) -> object:
            if failures:
                raise failures.pop()
            return real_admit(now_s, views)  # type: ignore[arg-type]

        monkeypatch.setattr(core.dispatcher, "admit", flaky_admit)
        first = untagged(core, "first")
        core.calls.submit(first)  # the round at arrival fails: logged, the loop woken
        assert first.admission is None and core.calls.queued() == 1 and core._woken
        admission = await core.calls.admitted(first)  # the loop's round admits it
        assert admission.backend_id == "b0" and core.calls.queued() == 0
        core.calls.finish(admission.call, "b0", 0.1, ok=True)
