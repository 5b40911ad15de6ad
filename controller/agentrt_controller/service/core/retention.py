"""KV retention in the controller service: tool events → the pure policy → backends.

The decision is :class:`agentrt_controller.retention.TtlRetentionPolicy`'s (the same object the
simulator drives); this module carries it out (docs/routing.md, "KV retention"):

* **window** (every backend): ``Dispatcher.set_retention`` until the TTL and, on the thread's
  next call, ``Call.retained_backend`` — the Dispatcher's retained lane admits it
  first, to the backend that served the thread's last call;
* **pin** on a backend with native pins (:class:`~agentrt_controller.backends.api.SupportsPins`: the
  emulator, SGLang): ``pin(pin_id, messages=<the thread's last request messages>, ttl_s)`` —
  the prefix the next call starts with (the last answer is not in it: the controller does not
  parse answers, so the pin covers the context up to the last prompt);
* **re-warm** on a backend without pins that reports load (vLLM): a ``max_tokens=1`` request
  with those messages, ``rewarm_lead_s`` before the predicted return, only while the backend
  has spare capacity (``in_flight < rewarm_max_in_flight`` and KV usage < 0.9).

Releases: at the thread's next admission (unpin), when the TTL ends (the backend expires its
pin itself; the window is cleared here), at program end or idle expiry (unpin every pin of the
program — a TTL never holds memory for an ended program). Backend calls run in this object's
own loop (:meth:`RetentionDriver.run`, in the engine's task group); the request path only
enqueues, never awaits a backend. Failures are logged and counted, never raised into a call.
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from anyio.abc import TaskStatus

from agentrt.errors import AgentrtError
from agentrt_controller.backends.api import Backend, BackendRequest, pins_of
from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention import (
    Retention,
    RetentionTracker,
    ToolWaitFacts,
    TtlRetentionPolicy,
)
from agentrt_controller.scheduling.api import Call
from agentrt_controller.scheduling.dispatcher import Dispatcher

__all__ = ["RetentionDriver"]

_log = logging.getLogger("agentrt.controller")
_MAX_ACTIONS = 10_000


class _Pool(Protocol):
    @property
    def states(self) -> Mapping[str, Any]: ...


@dataclass(slots=True)
class _Context:
    """What the controller knows of a thread's context after its last call (holds prompts:
    never logged)."""

    backend_id: str
    body: Mapping[str, Any]
    tokens: int


class RetentionDriver:
    """Retention for one controller (event-loop thread only)."""

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
        self.dispatcher = dispatcher
        self.pool = pool
        self.clock = clock
        self.tracker = RetentionTracker(rewarm_lead_s=rewarm_lead_s)
        self.rewarm_max_in_flight = rewarm_max_in_flight
        self._on_error = on_error
        #: program -> thread -> the thread's last context.
        self._contexts: dict[ProgramKey, dict[str, _Context]] = {}
        #: Programs holding a retention (the dispatcher is told when it ends).
        self._retained: set[ProgramKey] = set()
        #: Backend calls to make, in order (bounded: a flood drops, counted as ``dropped``).
        self._actions: deque[tuple[str, Retention]] = deque()
        self._wake = anyio.Event()
        #: Counters for introspection: decisions by reason, pins, unpins, re-warms, drops.
        self.counts: dict[str, int] = {}

    # --- facts from the request path (synchronous, never await a backend) ------------------

    def on_call(self, call: Call) -> None:
        """A tagged call arrived: its thread came back; tag it if its context is retained."""
        key = call.program_key
        now = self.clock()
        self.policy.on_call_arrived(key, call.thread_id, now)
        retention = self.tracker.get(key, call.thread_id)
        if retention is not None and retention.until_s > now:
            call.retained_backend = retention.backend_id

    def on_admitted(self, call: Call, backend_id: str) -> None:
        """The call left the queues: its thread's retention has done its job."""
        key = call.program_key
        released = self.tracker.release_thread(key, call.thread_id)
        if released is not None:
            self._release([released], key)

    def on_finish(
        self, call: Call, backend_id: str, body: Mapping[str, Any], prompt_tokens: int
    ) -> None:
        """A tagged call was answered: remember its context (backend, request body, prompt
        tokens) for the thread's next wait."""
        key = call.program_key
        context = _Context(backend_id, body, prompt_tokens)
        self._contexts.setdefault(key, {})[call.thread_id] = context

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
        now = self.clock()
        context = self._contexts.get(key, {}).get(thread_id)
        state = self.pool.states.get(context.backend_id) if context is not None else None
        facts = ToolWaitFacts(
            program=key,
            thread_id=thread_id,
            node_id=node_id,
            kind=kind,
            name=tool_name,
            predicted_duration_s=predicted_duration_s,
            context_tokens=context.tokens if context is not None else 0,
            backend_id=(
                context.backend_id
                if context is not None and state is not None and state.healthy
                else None
            ),
            kv_cache_usage=state.load.kv_cache_usage if state is not None else None,
            program_kind=program_kind,
        )
        decision = self.policy.on_wait_start(facts, now)
        self._count(decision.reason)
        if decision.ttl_s <= 0 or context is None or state is None:
            return
        retention, replaced = self.tracker.start(
            key,
            thread_id,
            backend_id=context.backend_id,
            ttl_s=decision.ttl_s,
            now_s=now,
            context_tokens=context.tokens,
            predicted_return_s=predicted_duration_s,
            payload=context.body,
        )
        if replaced is not None:
            self._release([replaced], key, clear=False)
        if retention is None:
            return
        self._retained.add(key)
        self.dispatcher.set_retention(key, self.tracker.retained_until(key))
        capabilities = state.backend.capabilities
        if not decision.pin:
            retention.rewarm_at_s = math.inf
        elif capabilities.supports_pins and pins_of(state.backend) is not None:
            retention.rewarm_at_s = math.inf  # a native pin, no re-warm
            self._enqueue(("pin", retention))
        elif not capabilities.scrapes_metrics:
            retention.rewarm_at_s = math.inf  # no observable prefix cache to re-warm
        self._wake.set()

    def on_tool_end(
        self, key: ProgramKey, *, thread_id: str, node_id: str, duration_s: float
    ) -> None:
        """The tool returned after ``duration_s`` seconds (learned per tool)."""
        self.policy.on_wait_end(key, thread_id, node_id, duration_s, self.clock())

    def on_program_end(self, key: ProgramKey) -> None:
        """The program ended (or expired): release everything it holds, forget it."""
        self._retained.add(key)
        self._release(self.tracker.release_program(key), key)
        self._retained.discard(key)
        self.policy.on_program_end(key, self.clock())
        self._contexts.pop(key, None)

    def on_program_start(self, key: ProgramKey) -> None:
        """A program (id) starts (again): retention is allowed for it."""
        self.tracker.forget_ended(key)

    def snapshot(self) -> dict[str, Any]:
        """JSON-able counters for introspection."""
        return {
            "retained": len(self.tracker),
            "counts": dict(self.counts),
            "policy": self.policy.snapshot(),
        }

    # --- the loop that talks to backends ----------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Carry out pins, unpins and re-warms; expire windows. Runs until cancelled."""
        task_status.started()
        while True:
            now = self.clock()
            for expired in self.tracker.expire(now):
                self._clear(expired.program)
            for due in self.tracker.due_rewarms(now):
                self._enqueue(("rewarm", due))
            while self._actions:
                await self._perform(self._actions.popleft())
            wait_s = min(self.tracker.next_expiry_s, self.tracker.next_rewarm_s) - self.clock()
            with anyio.move_on_after(max(0.0, min(wait_s, 60.0))):
                await self._wake.wait()
            self._wake = anyio.Event()

    async def _perform(self, action: tuple[str, Retention]) -> None:
        kind, retention = action
        state = self.pool.states.get(retention.backend_id)
        if state is None:
            return
        try:
            if kind == "pin":
                pins = pins_of(state.backend)
                if pins is not None and self._live(retention):
                    ttl = max(0.001, retention.until_s - self.clock())
                    body = retention.payload if isinstance(retention.payload, Mapping) else {}
                    await pins.pin(
                        retention.pin_id,
                        ttl_s=ttl,
                        messages=body.get("messages"),
                        tools=body.get("tools"),
                        prompt=None if "messages" in body else body.get("prompt"),
                        cache_salt=body.get("cache_salt"),
                    )
                    self._count("pins")
            elif kind == "unpin":
                pins = pins_of(state.backend)
                if pins is not None:
                    await pins.unpin(retention.pin_id)
                    self._count("unpins")
            elif kind == "rewarm" and self._has_room(state):
                await self._rewarm(state.backend, retention)
        except (AgentrtError, OSError):  # a backend's refusal must not stop retention
            self._count("errors")
            self._on_error()
            _log.warning("retention %s on %s failed", kind, retention.backend_id, exc_info=True)

    async def _rewarm(self, backend: Backend, retention: Retention) -> None:
        body = dict(retention.payload) if isinstance(retention.payload, Mapping) else {}
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

    def _release(self, released: Sequence[Retention], key: ProgramKey, clear: bool = True) -> None:
        for retention in released:
            state = self.pool.states.get(retention.backend_id)
            if state is not None and state.backend.capabilities.supports_pins:
                self._enqueue(("unpin", retention))
        if clear:
            self._clear(key)

    def _clear(self, key: ProgramKey) -> None:
        """Tell the dispatcher how long the program stays retained (``None``: no longer)."""
        if key not in self._retained:
            return
        until = self.tracker.retained_until(key)
        self.dispatcher.set_retention(key, until)
        if until is None:
            self._retained.discard(key)

    def _live(self, retention: Retention) -> bool:
        current = self.tracker.get(retention.program, retention.thread_id)
        return current is retention and retention.until_s > self.clock()

    def _has_room(self, state: Any) -> bool:
        usage = state.load.kv_cache_usage
        return (
            state.healthy
            and state.in_flight < self.rewarm_max_in_flight
            and (usage is None or usage < 0.9)
        )

    def _enqueue(self, action: tuple[str, Retention]) -> None:
        if len(self._actions) >= _MAX_ACTIONS:
            self._count("dropped")
            return
        self._actions.append(action)
        self._wake.set()

    def _count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
