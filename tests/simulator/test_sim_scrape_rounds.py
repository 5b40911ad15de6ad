"""With ``SimConfig.scrape_interval_s > 0`` a scrape at each multiple of the interval refreshes
the engines' gauges and runs an admission round, as a served controller's probe wakes its
dispatcher (``BackendPool`` ``on_change`` → ``ControllerService.wake``): the adaptive window
reacts at the scrape times, not only when a call arrives or finishes."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentrt_controller.process_table import ProcessTable
from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission, AdaptiveWindowConfig
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.basic import FcfsScheduler
from agentrt_controller.scheduling.dispatcher import Admission, Dispatcher
from agentrt_sim.plan import compile_program
from agentrt_sim.sim import Policies, SimConfig, Simulation
from agentrt_sim.workloads.program import LLMNode, Program

pytestmark = pytest.mark.timeout(60)


class LoggingDispatcher(Dispatcher):
    """Remembers each admission round that admitted something: (time, calls, window after)."""

    rounds: list[tuple[float, int, float]]

    def admit(self, now_s: float, backends: Sequence[BackendView]) -> list[Admission]:
        admissions = super().admit(now_s, backends)
        if admissions:
            assert isinstance(self.admission, AdaptiveWindowAdmission)
            window = self.admission.window(backends[0].backend_id)
            self.rounds.append((now_s, len(admissions), window))
        return admissions


def _burst(calls: int, output_tokens: int) -> list[Program]:
    """``calls`` one-call programs, all arriving at t = 0."""
    node = LLMNode("c0", (), "main", None, 0, output_tokens)
    return [Program(f"p{i:03d}", "burst", 0.0, "sys", 64, 20, (node,)) for i in range(calls)]


def _run(scrape_interval_s: float, *, slow_start: bool = True) -> tuple[Simulation, Dispatcher]:
    dispatcher = LoggingDispatcher(
        FcfsScheduler(ProcessTable()),
        RoundRobinRouter(),
        AdaptiveWindowAdmission(AdaptiveWindowConfig(slow_start=slow_start)),
    )
    dispatcher.rounds = []
    programs = _burst(40, 2000)  # decoding 2,000 tokens takes far longer than 4 s
    sim = Simulation(
        [compile_program(p) for p in programs],
        SimConfig(scrape_interval_s=scrape_interval_s),
        Policies(dispatcher=dispatcher),
    )
    sim.run()
    return sim, dispatcher


def test_the_window_grows_at_each_scrape_while_calls_queue() -> None:
    sim, dispatcher = _run(1.0)
    assert isinstance(dispatcher, LoggingDispatcher)
    first_finish = min(p.finish_s for p in sim.record.programs)
    assert first_finish > 4.0  # no call finished: only the scrapes can have woken admission
    # Slow start: 8 at the start, doubled at each scrape (1 s apart) until the burst is in.
    assert dispatcher.rounds[:4] == [(0.0, 8, 8.0), (1.0, 8, 16.0), (2.0, 16, 32.0), (3.0, 8, 64.0)]
    assert sim.record.unfinished_programs == 0


def test_the_additive_ramp_steps_once_per_scrape() -> None:
    _, dispatcher = _run(1.0, slow_start=False)
    assert isinstance(dispatcher, LoggingDispatcher)
    assert dispatcher.rounds[:4] == [(0.0, 8, 8.0), (1.0, 1, 9.0), (2.0, 1, 10.0), (3.0, 1, 11.0)]


def test_the_run_ends_at_its_last_event_not_at_a_scrape() -> None:
    sim, _ = _run(1.0)
    assert sim.record.end_s == max(p.finish_s for p in sim.record.programs)
    assert sim.record.end_s % 1.0 != 0.0  # a call's finish, not a scrape time
