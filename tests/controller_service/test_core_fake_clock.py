"""The controller's core on a fake clock, without HTTP and without sleeping.

:class:`ControllerCore` is built with a :class:`FakeClock` and in-process fake backends whose
answers a test releases one by one; calls go through the facade exactly as the HTTP layer sends
them (``accept`` → ``deadline`` → ``forward`` → ``settle`` → ``call_ended``). Time moves only
when the test moves the clock; the tasks run with ``anyio.sleep(0)`` yields (checkpoints),
never a real sleep. Covered: admission (the window fills, a finished call admits the next),
deadline expiry (queued: dropped from the queues; in flight: cancelled, the upstream request
aborted; both 504 :class:`DeadlinePassed`) and retention windows (a tool wait opens one, the
retained program's next call goes first; past the TTL on the fake clock the window is gone).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from agentrt.protocol import CallTags, ProgramStart, ToolWaitStart
from agentrt_controller.backends.api import BackendRequest
from agentrt_controller.backends.fake import FakeBackend, FakeResponse
from agentrt_controller.keys import ProgramKey
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core.charging import Usage
from agentrt_controller.service.core.clock import FakeClock
from agentrt_controller.service.core.facade import ControllerCore, GenerationRequest
from agentrt_controller.service.core.tenants import DEFAULT_TENANT, TenantDirectory
from agentrt_controller.service.errors import DeadlinePassed, ServiceError
from agentrt_controller.service.http.incoming import parse_call

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

SESSION = "s1"
PATH = "/v1/chat/completions"
#: Every wait is worth retaining (the Continuum rule's figures: R = 0.1 s, holding is free).
RETAIN_ALL = {"kv_capacity_tokens": 100_000, "churn_tokens_per_s": 1_000_000, "reuse_fraction": 0}


@dataclass
class Gates:
    """The fake backend holds each request until the test releases its label (the last user
    message); ``sent`` lists the labels in the order the backend received them."""

    sent: list[str] = field(default_factory=list)
    released: dict[str, anyio.Event] = field(default_factory=dict)
    aborted: list[str] = field(default_factory=list)

    def gate(self, label: str) -> anyio.Event:
        return self.released.setdefault(label, anyio.Event())

    async def handler(self, request: BackendRequest) -> FakeResponse:
        label = str(request.body["messages"][-1]["content"])
        self.sent.append(label)
        try:
            await self.gate(label).wait()
        except anyio.get_cancelled_exc_class():
            self.aborted.append(label)
            raise
        usage = {"prompt_tokens": 4000, "completion_tokens": 2, "total_tokens": 4002}
        return FakeResponse.json({"choices": [{"message": {"content": "ok"}}], "usage": usage})


@dataclass
class Outcome:
    """How one call ended for its client."""

    done: anyio.Event = field(default_factory=anyio.Event)
    status: int | None = None
    error: ServiceError | None = None


async def _settle_all() -> None:
    """Let every runnable task run (checkpoints only: no time passes)."""
    for _ in range(50):
        await anyio.lowlevel.checkpoint()


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await anyio.lowlevel.checkpoint()
    raise AssertionError("the condition never held")


class Driver:
    """Sends calls through the facade as the HTTP layer does."""

    def __init__(self, core: ControllerCore, group: anyio.abc.TaskGroup) -> None:
        self.core = core
        self.group = group
        self._ids = 0

    def call(
        self, label: str, *, program: str | None = None, timeout_ms: int | None = None
    ) -> Outcome:
        """Start the call ``label`` (its prompt) of ``program``; ``timeout_ms``: its budget."""
        self._ids += 1
        tags = CallTags(
            session_id=SESSION,
            program_id=program or label,  # a program of its own unless named
            thread_id="main",
            node_id=f"n{self._ids}",
            timeout_ms=timeout_ms,
        )
        headers = {k.lower(): v for k, v in tags.to_headers().items()}
        body = {"model": "fake-model", "messages": [{"role": "user", "content": label}]}
        parsed = parse_call(
            json.dumps(body).encode(),
            headers,
            f"c{self._ids}",
            self.core.now(),
            self.core.known_models(),
            tenant=DEFAULT_TENANT,
        )
        outcome = Outcome()
        self.group.start_soon(self._exchange, parsed.call, parsed, outcome)
        return outcome

    async def _exchange(self, call: Any, parsed: Any, outcome: Outcome) -> None:
        core = self.core
        pending = core.accept(call, parsed.body, tagged=not parsed.untagged)
        request = GenerationRequest(
            path=PATH, raw_body=parsed.raw_body, body=parsed.body, stream=False
        )
        try:
            with core.deadline(pending):
                forwarded = await core.forward(pending, request)
                usage = Usage()
                try:
                    assert forwarded.answer.body is not None
                    usage.read_body(forwarded.answer.body)
                    outcome.status = forwarded.answer.response.status_code
                finally:
                    await forwarded.answer.aclose()
                    core.settle(pending, forwarded, usage, ok=True)
        except ServiceError as error:
            outcome.status, outcome.error = error.status_code, error
        finally:
            core.call_ended(pending)
            outcome.done.set()


@asynccontextmanager
async def running_core(
    clock: FakeClock, gates: Gates, **options: Any
) -> AsyncIterator[tuple[ControllerCore, Driver]]:
    """A core with one fake backend and an admission window of one call, on ``clock``."""
    backend = FakeBackend("b0", gates.handler)
    config = ControllerConfig(
        policy="fcfs",
        admission_window=1,
        scrape_interval_s=3600.0,  # no probe or expiry round during a test
        **options,
    )
    core = ControllerCore(config, [backend], clock=clock, tenants=TenantDirectory.open_mode())
    async with anyio.create_task_group() as group:
        await group.start(core.run)
        yield core, Driver(core, group)
        group.cancel_scope.cancel()
    await core.aclose()


async def test_the_window_fills_and_a_finished_call_admits_the_next() -> None:
    clock, gates = FakeClock(100.0), Gates()
    async with running_core(clock, gates, retention="off") as (core, driver):
        first = driver.call("first")
        await _until(lambda: gates.sent == ["first"])
        second = driver.call("second")
        await _settle_all()
        assert gates.sent == ["first"]  # the window (one call) is full: the second waits
        assert core.queues_snapshot(full=True)["queued"] == 1

        clock.advance(2.0)
        gates.gate("first").set()
        await first.done.wait()
        assert first.status == 200
        await _until(lambda: gates.sent == ["first", "second"])  # admitted by the finish
        gates.gate("second").set()
        await second.done.wait()
        assert second.status == 200
        # Queue waits are measured on the fake clock: the second call waited 2 s.
        assert core.queues_snapshot(full=True)["queued"] == 0


async def test_a_queued_call_past_its_deadline_gets_504_without_sleeping() -> None:
    clock, gates = FakeClock(100.0), Gates()
    async with running_core(clock, gates, retention="off") as (core, driver):
        holder = driver.call("holder")
        await _until(lambda: gates.sent == ["holder"])
        late = driver.call("late", timeout_ms=5_000)
        await _settle_all()
        assert not late.done.is_set()

        clock.advance(4.999)
        await _settle_all()
        assert not late.done.is_set()  # not yet: the deadline is 5 s after arrival

        clock.advance(0.002)  # past it: the core's loop wakes on the fake clock
        with anyio.fail_after(5):
            await late.done.wait()
        assert late.status == 504 and isinstance(late.error, DeadlinePassed)
        assert "queued" in late.error.message
        assert core.queues_snapshot(full=True)["queued"] == 0
        assert core.metrics.deadline_drops.value() == 1

        gates.gate("holder").set()
        await holder.done.wait()
        await _settle_all()
        assert gates.sent == ["holder"]  # the expired call never reached the backend


async def test_an_in_flight_call_past_its_deadline_is_aborted_with_504() -> None:
    clock, gates = FakeClock(100.0), Gates()
    async with running_core(clock, gates, retention="off") as (core, driver):
        slow = driver.call("slow", timeout_ms=1_000)
        await _until(lambda: gates.sent == ["slow"])
        clock.advance(1.5)
        with anyio.fail_after(5):
            await slow.done.wait()
        assert slow.status == 504 and isinstance(slow.error, DeadlinePassed)
        assert gates.aborted == ["slow"]  # the upstream request was cancelled
        assert core.metrics.deadline_drops.value() == 1
        # Its slot is free again: the next call is admitted at once.
        after = driver.call("after")
        await _until(lambda: gates.sent == ["slow", "after"])
        gates.gate("after").set()
        await after.done.wait()
        assert after.status == 200


async def _answered_then_waiting(
    core: ControllerCore, driver: Driver, gates: Gates, program: str
) -> ProgramKey:
    """``program`` starts, one call of it is answered, then its thread waits on a tool."""
    tenant = core.authenticate(None)
    assert tenant is not None
    core.start_program(tenant, program, ProgramStart(session_id=SESSION, name="react"))
    answered = driver.call(f"{program}-c0", program=program)
    await _until(lambda: f"{program}-c0" in gates.sent)
    gates.gate(f"{program}-c0").set()
    await answered.done.wait()
    assert answered.status == 200
    wait = ToolWaitStart(
        session_id=SESSION, thread_id="main", node_id="t1", tool_name="search",
        predicted_duration_s=5.0,
    )  # fmt: skip
    core.start_tool_wait(tenant, program, wait)
    return ProgramKey(tenant=tenant.name, session_id=SESSION, program_id=program)


async def test_a_retained_programs_next_call_goes_first_until_its_window_ends() -> None:
    clock, gates = FakeClock(100.0), Gates()
    options = {"retention": "on", "retention_options": RETAIN_ALL}
    async with running_core(clock, gates, **options) as (core, driver):
        key = await _answered_then_waiting(core, driver, gates, "agent")
        entry = core.dispatcher.table.get(key)
        assert core.retention is not None
        assert entry is not None and entry.retained_until_s is not None, core.retention.counts
        until_s = entry.retained_until_s
        assert until_s > clock()

        # The window is full; another program's call queues first, then the retained one.
        holder = driver.call("holder")
        await _until(lambda: gates.sent[-1:] == ["holder"])
        other = driver.call("other", program="other")
        clock.advance(1.0)
        back = driver.call("agent-c1", program="agent")
        await _settle_all()
        gates.gate("holder").set()
        await _until(lambda: gates.sent[-1:] == ["agent-c1"])  # the retained one goes first
        gates.gate("agent-c1").set()
        await _until(lambda: gates.sent[-1:] == ["other"])
        gates.gate("other").set()
        for outcome in (holder, back, other):
            await outcome.done.wait()
            assert outcome.status == 200

        # A second wait opens a new window; past its TTL (on the fake clock) it is gone.
        tenant = core.authenticate(None)
        assert tenant is not None
        wait = ToolWaitStart(
            session_id=SESSION, thread_id="main", node_id="t2", tool_name="search",
            predicted_duration_s=5.0,
        )  # fmt: skip
        core.start_tool_wait(tenant, "agent", wait)
        entry = core.dispatcher.table.get(key)
        assert entry is not None and entry.retained_until_s is not None
        clock.set(entry.retained_until_s + 1.0)

        holder = driver.call("holder-2")
        await _until(lambda: gates.sent[-1:] == ["holder-2"])
        other = driver.call("other-2", program="other")
        late = driver.call("agent-c2", program="agent")
        await _settle_all()
        gates.gate("holder-2").set()
        await _until(lambda: gates.sent[-1:] == ["other-2"])  # plain order: no window left
        gates.gate("other-2").set()
        await _until(lambda: gates.sent[-1:] == ["agent-c2"])
        gates.gate("agent-c2").set()
        for outcome in (holder, other, late):
            await outcome.done.wait()
            assert outcome.status == 200
