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

**What is kept** (:class:`KeptPrompt`, never the request body): per thread, only the parts of
its last prompt that a pin or a re-warm replays — ``messages`` + ``tools`` (chat), or ``prompt``
(a text, or token ids for ``/v1/completions``), ``cache_salt`` and ``model`` — and only when the
backend that served it can use them (``pins`` or ``rewarm`` in its traits; any other backend
gets a window-only retention, so nothing is kept). Decided per capability:

* a *digest* (block hashes) cannot pin on the emulator or re-warm vLLM — both must see the
  prompt itself (or its token ids) to find, or recompute, its blocks;
* *token ids* are what SGLang pins (it refuses messages, :class:`PinsUnsupported`) and what the
  emulator and vLLM's ``/v1/completions`` also accept, but the controller has them only when
  the client sent them (a completions prompt of ids, kept as such): getting them for chat would
  cost a ``/tokenize`` round trip per tagged call on the request path;
* so the prompt's messages it is, measured (UTF-8 JSON bytes) and charged to the program's
  tenant's budget (``retention_options.kept_bytes_per_tenant``): over it the driver drops the
  tenant's oldest kept prompts (their retention is then window-only), so memory parked in
  retention is at most the budget per tenant, whatever the bodies carry.

Backend calls run in this object's own loop (:meth:`RetentionExecutor.run`, in the core's task
group); the request path only enqueues, never awaits a backend. A backend's refusal is logged
as one warning line with its reason and counted as a retention error (``errors``, and
``on_error(action)``: the ``retention_errors_total`` metric), never raised into a call and
never an internal error.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import anyio
from anyio.abc import TaskStatus

from agentrt.errors import AgentrtError
from agentrt_controller.backends.api import Backend, BackendLoad, BackendRequest, pins_of
from agentrt_controller.backends.kv_capacity import (
    DEFAULT_KV_BYTES_PER_TOKEN,
    DEFAULT_RELOAD_S_PER_TOKEN,
    KvCapacity,
)
from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention import RetentionConfig, RetentionTracker, TtlRetentionPolicy
from agentrt_controller.retention.driver import (
    BackendTraits,
    RetentionAction,
    RetentionDriver,
    ThreadContext,
    ToolWait,
)
from agentrt_controller.retention.policy import reload_s_per_token_of
from agentrt_controller.retention.recent import RecentMeans
from agentrt_controller.scheduling.call import CallFacts
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.service.core.clock import sleep_until
from agentrt_serving.hardware import PROFILES

__all__ = ["KeptPrompt", "RetentionExecutor", "keep_prompt"]

_log = logging.getLogger("agentrt.controller")
_MAX_ACTIONS = 10_000

#: A request body as the service forwards it (JSON object; holds prompts: never logged).
Body = Mapping[str, object]
#: Longest reason a warning line carries (characters).
_MAX_REASON = 300


@dataclass(frozen=True, slots=True)
class KeptPrompt:
    """What retention keeps of a thread's last prompt (module docstring): exactly one of
    ``messages`` / ``prompt`` / ``token_ids``. Holds prompts: its repr hides them."""

    #: The chat messages as the client sent them (``None`` for a completions prompt).
    messages: Sequence[Mapping[str, object]] | None = field(default=None, repr=False)
    #: The chat's tool definitions (they are part of the rendered prefix); ``None`` = none.
    tools: Sequence[Mapping[str, object]] | None = field(default=None, repr=False)
    #: A completions prompt given as text.
    prompt: str | None = field(default=None, repr=False)
    #: A completions prompt given as token ids.
    token_ids: tuple[int, ...] | None = field(default=None, repr=False)
    #: The salt the program's calls carry (salted KV is a separate namespace).
    cache_salt: str | None = field(default=None, repr=False)
    #: The model the call named (a re-warm names it too); ``None`` = none named.
    model: str | None = None
    #: Memory charged for it (bytes): the UTF-8 JSON size of the fields above.
    size_bytes: int = 0

    def rewarm_body(self) -> tuple[str, dict[str, object]]:
        """The path and body of a 1-token request that recomputes this prompt's blocks."""
        body: dict[str, object] = {"max_tokens": 1, "stream": False}
        if self.model is not None:
            body["model"] = self.model
        if self.cache_salt is not None:
            body["cache_salt"] = self.cache_salt
        if self.messages is not None:
            body["messages"] = list(self.messages)
            if self.tools is not None:
                body["tools"] = list(self.tools)
            return "/v1/chat/completions", body
        body["prompt"] = list(self.token_ids) if self.token_ids is not None else self.prompt
        return "/v1/completions", body


def keep_prompt(body: Body) -> KeptPrompt | None:
    """The parts of ``body`` a pin or a re-warm replays (module docstring); ``None`` when it
    has no prompt retention could use. No other field of the body is referenced."""
    messages, tools = _list(body.get("messages")), None
    prompt: str | None = None
    token_ids: tuple[int, ...] | None = None
    if messages is not None:
        tools = _list(body.get("tools"))
    else:
        raw = body.get("prompt")
        if isinstance(raw, str):
            prompt = raw
        elif isinstance(raw, list) and raw and all(type(t) is int for t in raw):
            token_ids = tuple(raw)
        else:
            return None
    cache_salt, model = _str(body.get("cache_salt")), _str(body.get("model"))
    kept = [messages, tools, prompt, token_ids, cache_salt, model]
    encoded = json.dumps(kept, ensure_ascii=False, separators=(",", ":"), default=str)
    size = len(encoded.encode())
    return KeptPrompt(messages, tools, prompt, token_ids, cache_salt, model, size)


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

    @property
    def capacity(self) -> KvCapacity | None: ...


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
        kept_bytes_per_tenant: int | None = None,
        hardware_profile: str | None = None,
        on_error: Callable[[str], None] = lambda action: None,
    ) -> None:
        """``kept_bytes_per_tenant``: the budget of kept prompts per tenant (bytes; ``None``
        = :class:`RetentionConfig`'s default). ``hardware_profile``: the controller's cost
        profile (``cost.profile``), whose KV bytes per token and PCIe bandwidth price a
        backend's CPU tier when the backend does not publish its own rate; ``None`` = the
        reference profile's (:data:`~agentrt_controller.backends.kv_capacity.
        REFERENCE_PROFILE`). ``on_error``: told the action (``pin``, ``unpin``, ``rewarm``)
        of each backend call that failed."""
        if kept_bytes_per_tenant is None:
            kept_bytes_per_tenant = RetentionConfig().kept_bytes_per_tenant
        self.policy = policy
        self.pool = pool
        self.clock = clock
        self.driver = RetentionDriver(
            policy,
            self._traits,
            dispatcher.set_retention,
            rewarm_lead_s=rewarm_lead_s,
            rewarm_max_in_flight=rewarm_max_in_flight,
            kept_bytes_per_tenant=kept_bytes_per_tenant,
        )
        self._on_error = on_error
        #: KV bytes per token and reload cost for a tier the backend publishes in bytes only
        #: (the profile's when it has a KV size and a PCIe bandwidth, else the reference's).
        self._kv_bytes_per_token = DEFAULT_KV_BYTES_PER_TOKEN
        self._reload_s_per_token = DEFAULT_RELOAD_S_PER_TOKEN
        profile = hardware_profile or ""
        if profile in PROFILES and reload_s_per_token_of(profile) > 0:
            self._kv_bytes_per_token = PROFILES[profile].kv_bytes_per_token
            self._reload_s_per_token = reload_s_per_token_of(profile)
        #: Recent wait of calls from arrival to admission, per backend (seconds).
        self.queue_waits = RecentMeans()
        #: Backend calls to make, in order (bounded: a flood drops, counted as ``dropped``).
        self._actions: deque[RetentionAction] = deque()
        #: Set by new work; the loop's sleep on the clock is cancelled when it is set.
        self._woken = False
        self._sleep: anyio.CancelScope | None = None
        #: Backend calls made: pins, unpins, re-warms, errors, drops; and the blocks the
        #: backends said they pinned (``pinned_blocks``, summed over the pins placed).
        self._calls: dict[str, int] = {}

    @property
    def counts(self) -> dict[str, int]:
        """Counters for introspection: the driver's decisions by reason, prompts not kept or
        dropped over a tenant's budget (``kept_dropped``), then pins (and the blocks they
        held, ``pinned_blocks``), unpins, re-warms, errors and drops."""
        return {**self.driver.decisions, "kept_dropped": self.driver.kept_dropped, **self._calls}

    @property
    def tracker(self) -> RetentionTracker:
        """The driver's live retentions (``len()`` = how many)."""
        return self.driver.tracker

    # --- facts from the request path (synchronous, never await a backend) ------------------

    def on_call(self, call: CallFacts) -> str | None:
        """A tagged call arrived (its thread came back): the backend holding its retained
        context, or ``None``."""
        backend, actions = self.driver.on_return(call.program, call.thread_id, self.clock())
        self._enqueue(actions)
        return backend

    def on_admitted(self, call: CallFacts, backend_id: str) -> None:
        """The call left the queues: its thread's retention has done its job. Its wait in the
        queues is one sample of the backend's recent queueing delay (the retention policy's
        eviction cost)."""
        now = self.clock()
        self.queue_waits.observe(backend_id, now - call.arrival_s)
        self._enqueue(self.driver.on_admitted(call.program, call.thread_id, now))

    def on_finish(self, call: CallFacts, backend_id: str, body: Body, prompt_tokens: int) -> None:
        """A tagged call was answered: remember its context (backend, prompt tokens and, when
        that backend can pin or re-warm, the kept parts of its prompt) for the thread's next
        wait. ``body`` itself is not kept."""
        traits = self._traits(backend_id)
        kept = keep_prompt(body) if traits is not None and (traits.pins or traits.rewarm) else None
        context = ThreadContext(
            backend_id,
            prompt_tokens,
            payload=kept,
            kept_bytes=kept.size_bytes if kept is not None else 0,
        )
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
            "kept_bytes": self.driver.kept_bytes,
            "kept_bytes_per_tenant": self.driver.kept_bytes_per_tenant,
            "counts": dict(self.counts),
            "policy": self.policy.snapshot(),
            "backends": self._memory_snapshot(),
        }

    def _memory_snapshot(self) -> dict[str, dict[str, object]]:
        """Per backend, the memory facts the policy gets (``M``, the tier, its reload cost)."""
        out: dict[str, dict[str, object]] = {}
        for backend_id, state in self.pool.states.items():
            capacity, reload, tier = self._memory(state.capacity)
            out[backend_id] = {
                "kv_capacity_tokens": capacity,
                "cpu_kv_capacity_tokens": tier,
                "reload_s_per_token": reload,
                "published": state.capacity is not None,
            }
        return out

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
        kept = retention.payload if isinstance(retention.payload, KeptPrompt) else None
        try:
            if action.kind == "pin":
                pins = pins_of(state.backend)
                live = self.driver.is_live(retention, self.clock())
                if pins is not None and kept is not None and live:
                    ttl = max(0.001, retention.until_s - self.clock())
                    pinned = await pins.pin(
                        retention.pin_id,
                        ttl_s=ttl,
                        messages=kept.messages,
                        tools=kept.tools,
                        prompt=kept.prompt,
                        token_ids=kept.token_ids,
                        cache_salt=kept.cache_salt,
                    )
                    self._count("pins")
                    self._count("pinned_blocks", pinned.blocks or 0)
            elif action.kind == "unpin":
                pins = pins_of(state.backend)
                if pins is not None:
                    await pins.unpin(retention.pin_id)
                    self._count("unpins")
            elif kept is not None:
                await self._rewarm(state.backend, kept)
        except (AgentrtError, OSError) as exc:  # a backend's refusal must not stop retention
            self._count("errors")
            self._on_error(action.kind)
            _log.warning(
                "retention %s of %s on %s failed: %s",
                action.kind,
                retention.pin_id,
                action.backend_id,
                _reason(exc),
            )

    async def _rewarm(self, backend: Backend, kept: KeptPrompt) -> None:
        path, body = kept.rewarm_body()
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
        capacity, reload, tier = self._memory(state.capacity)
        return BackendTraits(
            healthy=state.healthy,
            kv_cache_usage=state.load.kv_cache_usage,
            in_flight=state.in_flight,
            pins=pins_of(state.backend) is not None,
            rewarm=state.backend.capabilities.scrapes_metrics,
            kv_capacity_tokens=capacity,
            reload_s_per_token=reload,
            cpu_kv_capacity_tokens=tier,
            queue_wait_s=self.queue_waits.get(backend_id),
            # the deadlock guard reads these
            num_running=state.load.num_running,
            num_waiting=state.load.num_waiting,
        )

    def _memory(self, published: KvCapacity | None) -> tuple[int | None, float | None, int]:
        """The backend's KV capacity ``M`` (tokens), its CPU tier's reload cost (seconds per
        token; ``None`` = no tier) and the tier's size (tokens) for the policy: what the
        backend publishes (:mod:`agentrt_controller.backends.kv_capacity`), with
        ``retention_options.kv_capacity_tokens`` / ``reload_s_per_token`` overriding when
        set (docs/routing.md, "Where M and the tier come from")."""
        # A policy given in code (tests, embedders) may have no RetentionConfig: no overrides.
        config: RetentionConfig | None = getattr(self.policy, "config", None)
        capacity = config.kv_capacity_tokens if config is not None else None
        configured_reload = config.reload_s_per_token if config is not None else None
        if capacity is None and published is not None:
            capacity = published.gpu_tokens
        if published is None or not published.has_tier:
            # no tier published: the configured rate (None = recompute) applies, as before
            return capacity, configured_reload, 0
        reload = configured_reload
        if reload is None:
            reload = published.reload_s_per_token
        if reload is None:
            reload = self._reload_s_per_token
        return capacity, reload, published.tier_tokens(self._kv_bytes_per_token)

    def _enqueue(self, actions: list[RetentionAction]) -> None:
        for action in actions:
            if len(self._actions) >= _MAX_ACTIONS:
                self._count("dropped")
                continue
            self._actions.append(action)
            self._wake_up()

    def _count(self, name: str, amount: int = 1) -> None:
        self._calls[name] = self._calls.get(name, 0) + amount


def _list(value: object) -> list[Mapping[str, object]] | None:
    return value if isinstance(value, list) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _reason(exc: BaseException) -> str:
    """One line naming the error: its class and message, bounded (no traceback)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 3] + "..."
