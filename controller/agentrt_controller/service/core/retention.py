"""KV retention in the controller service: carries out the retention driver's actions on backends.

The decisions are :class:`agentrt_controller.retention.driver.RetentionDriver`'s — the same object
the simulator drives (docs/routing.md, "KV retention"): windows, pins, re-warms and the release
points (the thread's next admission, TTL end, program end or idle expiry). This module feeds it
the service's events with the controller's clock and performs what it returns:

* **pin** (``SupportsPins``: the emulator, SGLang): ``pin(pin_id, messages=<the thread's last
  request messages>, ttl_s)`` — the prefix the next call starts with (the last answer is not in
  it: the controller does not parse answers, so the pin covers the context up to the last
  prompt);
* **unpin**: ``unpin(pin_id)``;
* **re-warm** (a backend without pins that reports load, vLLM): a ``max_tokens=1`` request with
  those messages.

Backend calls run in this object's own loop (:meth:`RetentionExecutor.run`, in the core's task
group); the request path only enqueues, never awaits a backend. Failures are logged and counted,
never raised into a call.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Protocol

import anyio
from anyio.abc import TaskStatus

from agentrt.errors import AgentrtError
from agentrt_controller.backends.api import Backend, BackendLoad, BackendRequest, pins_of
from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention import RetentionTracker, TtlRetentionPolicy
from agentrt_controller.retention.driver import (
    BackendTraits,
    RetentionAction,
    RetentionDriver,
    ThreadContext,
    ToolWait,
)
from agentrt_controller.scheduling.call import CallFacts
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.service.core.clock import sleep_until

__all__ = ["RetentionExecutor"]

_log = logging.getLogger("agentrt.controller")
_MAX_ACTIONS = 10_000

#: A request body as the service forwards it (JSON object; holds prompts: never logged).
Body = Mapping[str, object]


class _State(Protocol):
    """What the executor reads of a pool's backend state."""

    @property
    def backend(self) -> Backend: ...

    @property
    def healthy(self) -> bool: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def load(self) -> BackendLoad: ...


class _Pool(Protocol):
    @property
    def states(self) -> Mapping[str, _State]: ...


class RetentionExecutor:
    """Retention for one controller (event-loop thread only): the driver on the controller's
    clock, its actions on the pool's backends."""

    def __init__(
        self,
        policy: TtlRetentionPolicy,
        dispatcher: Dispatcher,
        pool: _Pool,
        clock: Callable[[], float],
        *,
        rewarm_lead_s: float = 0.5,
        rewarm_max_in_flight: int = 8,
        on_error: Callable[[], None] = lambda: None,
    ) -> None:
        self.policy = policy
        self.pool = pool
        self.clock = clock
        self.driver = RetentionDriver(
            policy,
            self._traits,
            dispatcher.set_retention,
            rewarm_lead_s=rewarm_lead_s,
            rewarm_max_in_flight=rewarm_max_in_flight,
        )
        self._on_error = on_error
        #: Backend calls to make, in order (bounded: a flood drops, counted as ``dropped``).
        self._actions: deque[RetentionAction] = deque()
        #: Set by new work; the loop's sleep on the clock is cancelled when it is set.
        self._woken = False
        self._sleep: anyio.CancelScope | None = None
        #: Backend calls made: pins, unpins, re-warms, errors, drops.
        self._calls: dict[str, int] = {}

    @property
    def counts(self) -> dict[str, int]:
        """Counters for introspection: the driver's decisions by reason, then pins, unpins,
        re-warms, errors and drops."""
        return {**self.driver.decisions, **self._calls}

    @property
    def tracker(self) -> RetentionTracker:
        """The driver's live retentions (``len()`` = how many)."""
        return self.driver.tracker

    # --- facts from the request path (synchronous, never await a backend) ------------------

    def on_call(self, call: CallFacts) -> str | None:
        """A tagged call arrived (its thread came back): the backend holding its retained
        context, or ``None``."""
        return self.driver.on_call(call.program, call.thread_id, self.clock())

    def on_admitted(self, call: CallFacts, backend_id: str) -> None:
        """The call left the queues: its thread's retention has done its job."""
        self._enqueue(self.driver.on_admitted(call.program, call.thread_id, self.clock()))

    def on_finish(self, call: CallFacts, backend_id: str, body: Body, prompt_tokens: int) -> None:
        """A tagged call was answered: remember its context (backend, request body, prompt
        tokens) for the thread's next wait."""
        context = ThreadContext(backend_id, prompt_tokens, payload=body)
        self.driver.on_finish(call.program, call.thread_id, context)

    def on_tool_start(
        self,
        key: ProgramKey,
        *,
        thread_id: str,
        node_id: str,
        tool_name: str,
        predicted_duration_s: float | None,
        kind: str,
        program_kind: str = "",
    ) -> None:
        """A thread waits on a tool: decide, and carry the decision out."""
        wait = ToolWait(
            program=key,
            thread_id=thread_id,
            node_id=node_id,
            kind=kind,
            name=tool_name,
            predicted_duration_s=predicted_duration_s,
            program_kind=program_kind,
        )
        self._enqueue(self.driver.on_tool_start(wait, self.clock()))
        self._wake_up()  # the loop's next wake-up (expiry, re-warm) may be earlier now

    def on_tool_end(
        self, key: ProgramKey, *, thread_id: str, node_id: str, duration_s: float
    ) -> None:
        """The tool returned after ``duration_s`` seconds (learned per tool)."""
        self.driver.on_tool_end(key, thread_id, node_id, duration_s, self.clock())

    def on_program_end(self, key: ProgramKey) -> None:
        """The program ended (or expired): release everything it holds, forget it."""
        self._enqueue(self.driver.on_program_end(key, self.clock()))

    def on_program_start(self, key: ProgramKey) -> None:
        """A program (id) starts (again): retention is allowed for it."""
        self.driver.on_program_start(key)

    def snapshot(self) -> dict[str, object]:
        """JSON-able counters for introspection."""
        return {
            "retained": len(self.driver),
            "counts": dict(self.counts),
            "policy": self.policy.snapshot(),
        }

    # --- the loop that talks to backends ----------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Carry out pins, unpins and re-warms; expire windows. Runs until cancelled."""
        task_status.started()
        while True:
            await self.step()
            if not self._woken:
                # On the core's clock (a fake clock in tests drives it), at most a minute.
                target_s = min(self.driver.next_wake_s, self.clock() + 60.0)
                with anyio.CancelScope() as scope:
                    self._sleep = scope
                    await sleep_until(self.clock, target_s)
                self._sleep = None
            self._woken = False

    async def step(self) -> None:
        """One pass of :meth:`run`: the driver's due work at the clock's now, then every
        queued backend call (a test with a fake clock calls this instead of :meth:`run`)."""
        self._enqueue(self.driver.tick(self.clock()))
        while self._actions:
            await self._perform(self._actions.popleft())

    def _wake_up(self) -> None:
        """New work: end the loop's sleep now (or skip its next one)."""
        self._woken = True
        if self._sleep is not None:
            self._sleep.cancel()

    async def _perform(self, action: RetentionAction) -> None:
        state = self.pool.states.get(action.backend_id)
        if state is None:
            return
        retention = action.retention
        try:
            if action.kind == "pin":
                pins = pins_of(state.backend)
                if pins is not None and self.driver.is_live(retention, self.clock()):
                    ttl = max(0.001, retention.until_s - self.clock())
                    body = _body(retention.payload)
                    await pins.pin(
                        retention.pin_id,
                        ttl_s=ttl,
                        messages=_list(body.get("messages")),
                        tools=_list(body.get("tools")),
                        prompt=None if "messages" in body else _str(body.get("prompt")),
                        cache_salt=_str(body.get("cache_salt")),
                    )
                    self._count("pins")
            elif action.kind == "unpin":
                pins = pins_of(state.backend)
                if pins is not None:
                    await pins.unpin(retention.pin_id)
                    self._count("unpins")
            else:
                await self._rewarm(state.backend, _body(retention.payload))
        except (AgentrtError, OSError):  # a backend's refusal must not stop retention
            self._count("errors")
            self._on_error()
            _log.warning("retention %s on %s failed", action.kind, action.backend_id, exc_info=True)

    async def _rewarm(self, backend: Backend, payload: Body) -> None:
        body = dict(payload)
        if "messages" not in body and "prompt" not in body:
            return
        body.update({"max_tokens": 1, "stream": False})
        body.pop("max_completion_tokens", None)
        body.pop("stream_options", None)
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        raw = json.dumps(body).encode()
        response = await backend.send(BackendRequest(path, raw, body, stream=False))
        try:
            await response.aread()
        finally:
            await response.aclose()
        self._count("rewarms")

    # --- helpers ---------------------------------------------------------------------------

    def _traits(self, backend_id: str) -> BackendTraits | None:
        state = self.pool.states.get(backend_id)
        if state is None:
            return None
        return BackendTraits(
            healthy=state.healthy,
            kv_cache_usage=state.load.kv_cache_usage,
            in_flight=state.in_flight,
            pins=pins_of(state.backend) is not None,
            rewarm=state.backend.capabilities.scrapes_metrics,
        )

    def _enqueue(self, actions: list[RetentionAction]) -> None:
        for action in actions:
            if len(self._actions) >= _MAX_ACTIONS:
                self._count("dropped")
                continue
            self._actions.append(action)
            self._wake_up()

    def _count(self, name: str) -> None:
        self._calls[name] = self._calls.get(name, 0) + 1


def _body(payload: object) -> Body:
    return payload if isinstance(payload, Mapping) else {}


def _list(value: object) -> list[Mapping[str, object]] | None:
    return value if isinstance(value, list) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None
