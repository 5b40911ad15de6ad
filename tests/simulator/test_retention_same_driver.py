"""One scenario, two drivers: the simulator's retention and the controller's give the same pins,
releases (reasons, times) and windows.

The simulator runs two programs (tool waits on two threads, predicted durations from the
earlier waits of the same tool); what its retention driver heard — tool starts, calls, admissions,
program ends, in order and with their times — is replayed into the controller service's
:class:`~agentrt_controller.service.core.retention.RetentionExecutor` on a fake clock with a fake
backend that has native pins. Both carry out the one
:class:`~agentrt_controller.retention.driver.RetentionDriver`; the test compares what reached
the engines / the backend, the dispatcher's windows and every release with its reason.

The scenario: program ``a`` (thread ``main``) comes back from ``search`` inside its TTL (release at
the next admission), then waits on ``slow`` past its TTL (the TTL expires, the returning call is
not tagged); program ``b`` (thread ``worker``) comes back from ``search`` (predicted from ``a``'s),
then ends while its ``final`` wait is still retained (release at program end).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import anyio
import pytest

from agentrt_controller.backends.api import BackendRequest, PinResult
from agentrt_controller.backends.fake import FakeBackend, FakeResponse
from agentrt_controller.keys import ProgramKey
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.retention import RetentionDecision, WaitInfo
from agentrt_controller.retention.driver import ReleaseHook, ReleaseReason
from agentrt_controller.retention.tracker import Retention, pin_id_for
from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.basic import FcfsScheduler, FixedWindowAdmission
from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_controller.scheduling.dispatcher import Admission, Dispatcher
from agentrt_controller.service.core.pool import BackendState
from agentrt_controller.service.core.retention import RetentionExecutor
from agentrt_emulator.core.engine import EngineCore
from agentrt_sim.plan import compile_program
from agentrt_sim.sim import Policies, SimConfig, Simulation
from agentrt_sim.workloads.program import LLMNode, Program, WaitNode

pytestmark = pytest.mark.timeout(60)

#: TTL per tool name (seconds): ``slow`` lasts 5 s, longer than its TTL.
TTLS = {"search": 30.0, "slow": 2.0, "final": 30.0}
ENGINE = "engine-0"

#: One driver event: (kind, payload, now_s).
Event = tuple[str, object, float]
#: (time_s, "pin" | "unpin", pin id, pinned until or None).
PinCall = tuple[float, str, str, float | None]


class TtlByName:
    """Retain every wait for ``TTLS[name]`` with a pin; logs what its driver told it."""

    name = "by-name"

    def __init__(self, log: list[Event] | None = None) -> None:
        self.log = log

    def on_wait_start(self, facts: WaitInfo, now_s: float) -> RetentionDecision:
        if self.log is not None:
            self.log.append(("wait", facts, now_s))
        return RetentionDecision(ttl_s=TTLS.get(facts.name, 0.0), pin=True, reason="pin")

    def on_wait_end(
        self, program: ProgramKey, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        if self.log is not None:
            self.log.append(("wait_end", (program, thread_id, node_id, duration_s), now_s))

    def on_call_arrived(self, program: ProgramKey, thread_id: str, now_s: float) -> None:
        return None

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        if self.log is not None:
            self.log.append(("end", program, now_s))


class LoggingDispatcher(Dispatcher):
    """Logs submitted calls and admissions (into the driver's event log) and every window."""

    def __init__(self, log: list[Event] | None = None) -> None:
        super().__init__(
            FcfsScheduler(ProcessTable()), RoundRobinRouter(), FixedWindowAdmission(None)
        )
        self.log = log
        #: (program id, retained until or None), in order.
        self.windows: list[tuple[str, float | None]] = []

    def submit(
        self, facts: CallFacts, now_s: float, *, retained_backend: str | None = None
    ) -> CallEntry:
        entry = super().submit(facts, now_s, retained_backend=retained_backend)
        if self.log is not None:
            self.log.append(("submit", entry, now_s))
        return entry

    def admit(self, now_s: float, backends: Sequence[BackendView]) -> list[Admission]:
        admissions = super().admit(now_s, backends)
        if self.log is not None:
            self.log.extend(("admit", a, now_s) for a in admissions)
        return admissions

    def set_retention(self, program: ProgramKey, until_s: float | None) -> None:
        self.windows.append((program.program_id, until_s))
        super().set_retention(program, until_s)


class RecordingCore:
    """An engine core whose pins and unpins are logged (everything else passes through)."""

    def __init__(self, core: EngineCore, sim: Simulation, log: list[PinCall]) -> None:
        self._core = core
        self._sim = sim
        self._log = log

    def __getattr__(self, name: str) -> object:
        return getattr(self._core, name)

    def pin(
        self,
        pin_id: str,
        token_ids: list[int],
        *,
        cache_salt: str | None,
        ttl_s: float,
        now_s: float,
    ) -> int:
        self._log.append((now_s, "pin", pin_id, now_s + ttl_s))
        return self._core.pin(pin_id, token_ids, cache_salt=cache_salt, ttl_s=ttl_s, now_s=now_s)

    def unpin(self, pin_id: str) -> bool:
        self._log.append((self._sim.now_s, "unpin", pin_id, None))
        return self._core.unpin(pin_id)


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


class RecordingBackend(FakeBackend):
    """A fake backend with native pins that logs pins and unpins on the controller's clock."""

    def __init__(self, clock: Clock, log: list[PinCall]) -> None:
        super().__init__(ENGINE, _no_requests, pins=True)
        self._clock = clock
        self._log = log

    async def pin(self, pin_id: str, *, ttl_s: float | None, **fields: object) -> PinResult:
        now = self._clock()
        self._log.append((now, "pin", pin_id, now + (ttl_s or 0.0)))
        return await super().pin(pin_id, ttl_s=ttl_s, messages=[{"role": "user"}])

    async def unpin(self, pin_id: str) -> bool:
        self._log.append((self._clock(), "unpin", pin_id, None))
        return await super().unpin(pin_id)


async def _no_requests(request: BackendRequest) -> FakeResponse:
    raise AssertionError("retention with native pins sends no request")


class OnePool:
    """The executor's view of a pool holding one backend."""

    def __init__(self, backend: FakeBackend) -> None:
        self.states = {ENGINE: BackendState(backend=backend)}


@dataclass
class Outcome:
    pins: list[PinCall]
    releases: list[tuple[str, ReleaseReason, float]]
    windows: list[tuple[str, float | None]]
    tagged: list[tuple[str, str | None]]


def _program(
    program_id: str, thread: str, arrival_s: float, waits: Sequence[tuple[str, float]]
) -> Program:
    """call → wait → call → ... on one thread; ends with a wait when ``waits`` says so
    (``(name, duration_s)``; a trailing ``("final", s)`` is the program's last node)."""
    nodes: list[LLMNode | WaitNode] = [LLMNode("c0", (), thread, None, 0, 8)]
    previous = "c0"
    for index, (name, duration_s) in enumerate(waits, start=1):
        wait = WaitNode(
            f"t{index}", (previous,), thread, "tool", name, duration_s, context=previous,
            result_tokens=32,
        )  # fmt: skip
        nodes.append(wait)
        if name == "final":
            break
        call = LLMNode(f"c{index}", (wait.node_id,), thread, wait.node_id, 0, 8)
        nodes.append(call)
        previous = call.node_id
    return Program(program_id, "react", arrival_s, "react", 128, 256, tuple(nodes))


def _release_log(releases: list[tuple[str, ReleaseReason, float]]) -> ReleaseHook:
    def hook(retention: Retention, reason: ReleaseReason, at_s: float) -> None:
        releases.append((retention.pin_id, reason, at_s))

    return hook


def run_simulator() -> tuple[Outcome, list[Event]]:
    events: list[Event] = []
    dispatcher = LoggingDispatcher(events)
    programs = [
        _program("a", "main", 0.0, [("search", 1.0), ("slow", 5.0)]),
        _program("b", "worker", 2.0, [("search", 2.0), ("final", 1.0)]),
    ]
    sim = Simulation(
        [compile_program(p) for p in programs],
        SimConfig(profile="a100-llama3-8b"),
        Policies(dispatcher=dispatcher, retention=TtlByName(events)),
    )
    pins: list[PinCall] = []
    slot = sim.engines[0]
    slot.core = cast(EngineCore, RecordingCore(slot.core, sim, pins))
    releases: list[tuple[str, ReleaseReason, float]] = []
    sim.waits.driver.on_release = _release_log(releases)
    sim.run()
    submitted = [cast(CallEntry, payload) for kind, payload, _ in events if kind == "submit"]
    tagged = [(call.facts.node_id, call.retained_backend) for call in submitted]
    return Outcome(pins, releases, dispatcher.windows, tagged), events


async def run_controller(events: list[Event]) -> Outcome:
    """Replay the simulator's driver events into the controller's executor (fake clock)."""
    clock = Clock()
    pins: list[PinCall] = []
    backend = RecordingBackend(clock, pins)

    dispatcher = LoggingDispatcher()
    executor = RetentionExecutor(TtlByName(), dispatcher, OnePool(backend), clock)
    releases: list[tuple[str, ReleaseReason, float]] = []
    executor.driver.on_release = _release_log(releases)
    last_call: dict[tuple[ProgramKey, str], CallFacts] = {}
    tagged: list[tuple[str, str | None]] = []
    for kind, payload, now_s in events:
        # the executor's loop wakes at the driver's next expiry (as run() would)
        while executor.driver.next_wake_s <= now_s:
            clock.now_s = executor.driver.next_wake_s
            await executor.step()
        clock.now_s = now_s
        if kind == "submit":
            call = cast(CallEntry, payload).facts
            last_call[call.program, call.thread_id] = call
            tagged.append((call.node_id, executor.on_call(call)))
        elif kind == "admit":
            admission = cast(Admission, payload)
            executor.on_admitted(admission.call.facts, admission.backend_id)
        elif kind == "wait":
            facts = cast(WaitInfo, payload)
            previous = last_call[facts.program, facts.thread_id]
            assert facts.backend_id is not None
            body = {"messages": [{"role": "user", "content": "..."}]}
            executor.on_finish(previous, facts.backend_id, body, facts.context_tokens)
            executor.on_tool_start(
                facts.program,
                thread_id=facts.thread_id,
                node_id=facts.node_id,
                tool_name=facts.name,
                predicted_duration_s=facts.predicted_duration_s,
                kind=facts.kind,
            )
        elif kind == "wait_end":
            program, thread_id, node_id, duration_s = cast(
                tuple[ProgramKey, str, str, float], payload
            )
            executor.on_tool_end(
                program, thread_id=thread_id, node_id=node_id, duration_s=duration_s
            )
        else:
            executor.on_program_end(cast(ProgramKey, payload))
        await executor.step()
    # every admission was one sample of the backend's queueing delay (the policy's T)
    assert executor.queue_waits.get(backend.backend_id) is not None
    return Outcome(pins, releases, dispatcher.windows, tagged)


def test_simulator_and_controller_retain_and_release_the_same_way() -> None:
    simulated, events = run_simulator()
    controlled = anyio.run(run_controller, events)

    # the scenario happened as designed
    waits = {
        (w.program.program_id, w.name): (w, now_s)
        for kind, w, now_s in cast(list[tuple[str, WaitInfo, float]], events)
        if kind == "wait"
    }
    assert list(waits) == [("a", "search"), ("a", "slow"), ("b", "search"), ("b", "final")]
    assert waits["b", "search"][0].predicted_duration_s == pytest.approx(1.0)  # a's search
    a_main = pin_id_for(waits["a", "search"][0].program, "main")
    b_worker = pin_id_for(waits["b", "search"][0].program, "worker")
    admitted = {
        (call.program.program_id, call.node_id): now_s
        for kind, admission, now_s in cast(list[tuple[str, Admission, float]], events)
        if kind == "admit"
        for call in (admission.call.facts,)
    }
    b_end = next(now_s for kind, _, now_s in events if kind == "end")
    slow_until = waits["a", "slow"][1] + TTLS["slow"]
    assert simulated.releases == [
        (a_main, "admitted", admitted["a", "c1"]),  # a came back inside its TTL
        (a_main, "ttl", slow_until),  # a's slow wait outlived its TTL
        (b_worker, "admitted", admitted["b", "c1"]),
        (b_worker, "program_end", b_end),  # b ended while retained
    ]
    assert [(kind, pin_id) for _, kind, pin_id, _ in simulated.pins] == [
        ("pin", a_main), ("unpin", a_main), ("pin", a_main),  # the engine expires the second
        ("pin", b_worker), ("unpin", b_worker), ("pin", b_worker), ("unpin", b_worker),
    ]  # fmt: skip
    # Each window ends with a None (a's at its TTL, b's at its end); a program that holds
    # none when it ends is not told again.
    assert ("a", slow_until) in simulated.windows
    assert [(program, until is None) for program, until in simulated.windows] == [
        ("a", False), ("a", True), ("a", False), ("b", False), ("a", True), ("b", True),
        ("b", False), ("b", True),
    ]  # fmt: skip
    # a's c2 came back after its TTL: not tagged
    assert simulated.tagged == [
        ("c0", None), ("c1", ENGINE), ("c0", None), ("c1", ENGINE), ("c2", None),
    ]  # fmt: skip

    # the same pins (ids, times, until), unpins, releases, windows and tags in both drivers
    assert controlled.pins == simulated.pins
    assert controlled.releases == simulated.releases
    assert controlled.windows == simulated.windows
    assert controlled.tagged == simulated.tagged
