"""The live state of the backends: in-flight counts, scraped load, health, circuit breakers,
served models — and adding and removing backends while the controller runs.

Health (docs/backends.md, "Health, circuit breaker, adding and removing"): every backend has
its own probe loop (``interval_s`` apart; a probe that takes longer than ``interval_s`` counts
as failed), so one slow backend never delays the verdict on another. A failed probe opens the
backend's :class:`~agentrt_controller.backends.breaker.CircuitBreaker` at once; call outcomes
reported
by the engine open it after N consecutive failures or a high error rate; a refused connection
trips it at once. A backend takes calls (``healthy``) only while its last probe succeeded, its
circuit is closed and it is not draining. So a dead backend stops getting calls within one
probe interval (refused connections: at the first call that hits it).

A backend that goes out of routing because it failed (probe or circuit, not removal) aborts
its calls still waiting for an answer to start: each runs in a cancel scope registered with
:meth:`BackendPool.abortable`, which the pool cancels, so a stalled server (SIGSTOP, a hung
GPU) does not hold them for the read timeout; the engine retries them elsewhere
(docs/controller.md, "Lifecycle").

Removal drains: the backend leaves routing at once, its in-flight calls finish, and when the
last one is released it is dropped, its probe loop stops and it is closed.

Served models (docs/backends.md, "Models"): every successful probe reads the backend's
``/v1/models`` again (or its configured ``models``), so a backend restarted with another model
is routed by its new list within one interval; a failed read keeps the last list. The views
carry the ids (:attr:`BackendView.models`, ``None`` while a backend never listed any), which
the routers' model constraint matches calls against.

In-flight counts change in this object only: :meth:`BackendPool.acquire` when a call is
admitted to a backend, :meth:`BackendPool.release` when it leaves it. Both count calls and
their sequences (a call's ``n``); the policies' view of a backend counts sequences.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from agentrt.errors import ConfigError
from agentrt_controller.backends.api import Backend, BackendError, BackendLoad, DetectsFeatures
from agentrt_controller.backends.breaker import BreakerConfig, BreakerState, CircuitBreaker
from agentrt_controller.backends.emulator import time_scales_differ
from agentrt_controller.backends.kv_capacity import KvCapacity
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.service.core.clock import Clock

__all__ = ["Abortable", "BackendPool", "BackendState", "task_on"]

_log = logging.getLogger("agentrt.controller")


def task_on(loop: asyncio.AbstractEventLoop | None) -> asyncio.Task[Any] | None:
    """The running task, found on ``loop`` (the pool's, :attr:`BackendPool.loop`) without
    looking the running loop up, which in Python 3.11 asks the kernel for the pid each time;
    on the running loop when ``loop`` is ``None`` or not the one running."""
    task = asyncio.current_task(loop) if loop is not None else None
    return task if task is not None else asyncio.current_task()


@dataclass(slots=True, eq=False)
class BackendState:
    """What the controller knows about one backend right now."""

    backend: Backend
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    #: Calls admitted to it that have not finished.
    in_flight: int = 0
    #: Sequences of those calls (each call's ``CallFacts.sequences``: its ``n``): what the
    #: admission window counts (:attr:`BackendView.in_flight`).
    sequences_in_flight: int = 0
    #: Takes calls: last probe succeeded, circuit closed, not draining.
    healthy: bool = True
    #: Last health-probe verdict (optimistic until the first probe).
    probe_ok: bool = True
    #: The last health probe ran out of time (the next one follows at once: the time-out
    #: already waited an interval).
    probe_timed_out: bool = False
    #: Removed: no new calls; dropped when :attr:`in_flight` reaches 0.
    draining: bool = False
    #: Last scrape; all-``None`` when unknown.
    load: BackendLoad = field(default_factory=BackendLoad)
    #: The batch size (``max_num_seqs``) its last scrape that had one reported; kept while a
    #: failed probe clears :attr:`load`. ``None`` = never reported.
    batch: int | None = None
    #: Its KV memory (GPU capacity, CPU tier) from the last scrape that published it; kept
    #: while a failed probe clears :attr:`load` (a restart publishes its new figures).
    #: ``None`` = never published.
    capacity: KvCapacity | None = None
    #: When :attr:`load` was scraped (seconds, controller clock); ``None`` = never.
    load_at_s: float | None = None
    #: Models from its ``/v1/models`` (or configured: the spec's ``models`` option), read at
    #: every successful probe; empty while it never answered.
    models: list[dict[str, Any]] = field(default_factory=list)
    #: The ids of :attr:`models` (what routing matches a call's model against).
    model_ids: frozenset[str] = frozenset()
    #: Calls admitted to it since start.
    admitted_total: int = 0
    #: Calls that failed because of it (broken connections, 5xx, refused) since start.
    failures_total: int = 0
    #: The last failure, for introspection (no prompt content).
    last_error: str = ""
    #: Features were detected since the circuit last closed (DetectsFeatures kinds).
    features_detected: bool = False
    #: The engine time scale last warned about (:meth:`BackendPool._check_time_scale`);
    #: ``None`` = none yet.
    time_scale_warned: float | None = None
    #: Cancels its probe loop.
    probe_scope: anyio.CancelScope | None = None
    #: Calls sent to it whose answer has not started (:meth:`BackendPool.abortable`).
    abortable: set[Abortable] = field(default_factory=set)

    def status(self) -> str:
        """``up``, ``down`` (probe failed), ``open`` / ``half_open`` (circuit) or ``draining``.

        ``up`` means it takes calls (:attr:`healthy`): after the trial probe that closed its
        circuit, a recovered backend stays ``half_open`` until its features, load and models
        were read again and it is back in routing."""
        if self.draining:
            return "draining"
        if self.breaker.state is not BreakerState.CLOSED:
            return str(self.breaker.state.value)
        if not self.probe_ok:
            return "down"
        return "up" if self.healthy else "half_open"

    def describe(self, now_s: float) -> dict[str, Any]:
        """Plain-JSON description for the admin and introspection endpoints."""
        backend = self.backend
        return {
            "backend_id": backend.backend_id,
            "kind": backend.kind,
            "url": backend.url,
            "state": self.status(),
            "healthy": self.healthy,
            "in_flight": self.in_flight,
            "sequences_in_flight": self.sequences_in_flight,
            "admitted_total": self.admitted_total,
            "failures_total": self.failures_total,
            "last_error": self.last_error,
            "circuit": self.breaker.snapshot(now_s),
            "capabilities": asdict(backend.capabilities),
            "load": asdict(self.load),
            "load_age_s": None if self.load_at_s is None else max(0.0, now_s - self.load_at_s),
            "kv_capacity": None if self.capacity is None else asdict(self.capacity),
            "models": [m["id"] for m in self.models],
        }


def _why_out(state: BackendState) -> str:
    """Why ``state``'s backend takes no calls, for the log line (never empty)."""
    if state.draining:
        return "removed through the admin API"
    if not state.breaker.allows_calls():
        return state.breaker.reason or "circuit open"
    return state.last_error or "health probe failed"


class Abortable:
    """The context manager of :meth:`BackendPool.abortable`: the block runs in its task, which
    :meth:`abort` cancels (once) and whose :class:`asyncio.CancelledError` it stops at the
    block's end — unless some other cancellation is pending too (a client gone, a deadline:
    those go on up).

    Task cancellation, not an ``anyio.CancelScope``: a scope per call cost ~10 µs of the
    controller's CPU per call (docs/controller.md, "Performance notes"); the count of the
    task's cancellation requests (``cancelling`` / ``uncancel``, as ``asyncio.timeout`` does)
    tells its own cancellation from the others. :meth:`abort` comes from other tasks (a probe
    loop, another call's outcome): the pool never aborts a call from the call's own task."""

    __slots__ = (
        "_cancelled",
        "_cancelling",
        "_loop",
        "_state",
        "_task",
        "aborted",
        "cancelled_caught",
    )

    def __init__(
        self,
        state: BackendState | None,
        *,
        aborted: bool,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._state = state
        #: The pool's event loop (None: looked up): asyncio.current_task(loop) without a lookup
        #: of the running loop, which in Python 3.11 asks the kernel for the pid each time.
        self._loop = loop
        self._task: asyncio.Task[Any] | None = None
        #: The task's cancellation requests when the block began; :meth:`abort` sent one.
        self._cancelling = 0
        self._cancelled = False
        #: The block was aborted: at once (its backend was out of routing already, check it
        #: before sending) or by :meth:`abort`.
        self.aborted = aborted
        #: The block ended by the abort's cancellation (stopped here).
        self.cancelled_caught = False

    def __enter__(self) -> Abortable:
        task = task_on(self._loop)
        if task is None:
            raise RuntimeError("an abortable block runs in an asyncio task")
        self._task = task
        self._cancelling = task.cancelling()
        if self._state is not None and not self.aborted:
            self._state.abortable.add(self)
        return self

    def abort(self) -> None:
        """Cancel the block (its task); once."""
        if not self.aborted and self._task is not None:
            self.aborted = self._cancelled = True
            self._task.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if self._state is not None:
            self._state.abortable.discard(self)
        task = self._task
        if not self._cancelled or task is None:
            return False
        if task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            self.cancelled_caught = True
            return True
        return False


class BackendPool:
    """Backends by id, with the views the policies get. Single event-loop thread only.

    ``interval_s``: health-probe period and probe time limit (seconds). ``breaker``: the
    thresholds every backend's circuit uses. ``on_change`` is called whenever routing facts
    changed (probe, state change); ``on_error`` when a probe round raised unexpectedly.
    """

    def __init__(
        self,
        backends: Sequence[Backend],
        on_change: Callable[[], None],
        clock: Clock,
        *,
        interval_s: float = 1.0,
        breaker: BreakerConfig | None = None,
        on_error: Callable[[], None] | None = None,
        time_scale: float = 1.0,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError("the probe interval must be > 0 seconds")
        self._clock = clock
        #: The controller's ``time_scale``: a backend that publishes another is logged
        #: (:meth:`_check_time_scale`).
        self.time_scale = time_scale
        self._on_change = on_change
        self._on_error = on_error
        self.interval_s = interval_s
        self.breaker_config = breaker or BreakerConfig()
        self.states: dict[str, BackendState] = {}
        #: Per backend: the facts its last view was built from, and that view (:meth:`views`).
        self._views: dict[str, tuple[tuple[object, ...], BackendView]] = {}
        for backend in backends:
            if backend.backend_id in self.states:
                raise ConfigError(f"duplicate backend id {backend.backend_id!r}")
            self.states[backend.backend_id] = self._new_state(backend)
        self._group: TaskGroup | None = None
        #: The event loop :meth:`run` runs on, the core's (``None`` before): its calls' task
        #: and future lookups without asking for the running loop, which in Python 3.11 asks
        #: the kernel for the pid each time.
        self.loop: asyncio.AbstractEventLoop | None = None
        #: Calls acquired and not yet released, over every backend (a removed one's too).
        self.calls_in_flight = 0

    def _new_state(self, backend: Backend) -> BackendState:
        return BackendState(backend, CircuitBreaker(self.breaker_config))

    # --- the probe loops ---------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Probe every backend once, report started, then keep probing each one every
        ``interval_s`` until cancelled. Backends added later get a loop of their own."""
        self.loop = asyncio.get_running_loop()
        async with anyio.create_task_group() as group:
            self._group = group
            await self.refresh()
            for state in self.states.values():
                group.start_soon(self._probe_loop, state)
            task_status.started()
            await anyio.sleep_forever()

    async def refresh(self) -> None:
        """Probe every backend once (health, load, models), concurrently."""
        async with anyio.create_task_group() as group:
            for state in list(self.states.values()):
                group.start_soon(self._probe_safely, state)
        self._on_change()

    async def _probe_loop(self, state: BackendState) -> None:
        with anyio.CancelScope() as scope:
            state.probe_scope = scope
            backend_id = state.backend.backend_id
            # The membership check covers a removal that happened before this task ran.
            while self.states.get(backend_id) is state:
                if not state.probe_timed_out:
                    await anyio.sleep(self.interval_s)
                if self.states.get(backend_id) is not state:
                    return
                await self._probe_safely(state)
                self._on_change()

    async def _probe_safely(self, state: BackendState) -> None:
        try:
            await self._probe(state)
        except Exception:  # a kind's bug must not stop the other probes: log, go on
            if self._on_error is not None:
                self._on_error()
            _log.exception("probing backend %s failed", state.backend.backend_id)

    async def _probe(self, state: BackendState) -> None:
        backend = state.backend
        ok = False  # stays False when the probe runs out of time
        # Cleared first: a probe that raises must not leave the loop probing without a pause.
        state.probe_timed_out = False
        with anyio.move_on_after(self.interval_s) as limit:
            ok = await backend.health()
        timed_out = state.probe_timed_out = limit.cancelled_caught
        reason = "health probe timed out" if timed_out else "health probe failed"
        now = self._clock()
        was_closed = state.breaker.allows_calls()
        state.breaker.record_probe(ok, now, reason, timed_out=timed_out)
        if not ok and timed_out and state.breaker.allows_calls():
            # A slow answer, not yet enough of them in a row to call the backend out
            # (BreakerConfig.probe_timeouts): keep routing to it on what we last knew.
            _log.info("backend %s: %s (still in routing)", state.backend.backend_id, reason)
            return
        state.probe_ok = ok
        if not ok:
            state.load = BackendLoad()
            state.last_error = reason
            self._update(state)
            return
        if not was_closed and state.breaker.allows_calls():
            state.features_detected = False  # recovered: it may have restarted differently
        if not state.features_detected and isinstance(backend, DetectsFeatures):
            await backend.detect_features()
            state.features_detected = True
        if backend.capabilities.scrapes_metrics:
            try:
                state.load = await backend.scrape()
            except BackendError:
                state.load = BackendLoad()
            state.load_at_s = self._clock()
            if state.load.max_num_seqs is not None and state.load.max_num_seqs >= 1:
                state.batch = state.load.max_num_seqs
            if state.load.capacity is not None:
                state.capacity = state.load.capacity
            self._check_time_scale(state)
        try:
            models = await backend.models()
        except BackendError:  # keep what it said last: a model list does not change often
            models = state.models
        self._set_models(state, models)
        self._update(state)

    def _check_time_scale(self, state: BackendState) -> None:
        """Warn once per scale when the backend's engine runs on another clock than ours: an
        emulator at ``--time-scale X`` counts model seconds, and the policies' times (tool
        waits, retention TTLs, idle releases) would be ``X`` times off against it."""
        scale = state.load.time_scale
        if scale is None or scale == state.time_scale_warned:
            return
        if not time_scales_differ(scale, self.time_scale):
            return
        state.time_scale_warned = scale
        _log.warning(
            "backend %s runs at time scale %g and this controller at %g: the tool waits, "
            "retention TTLs and idle releases it measures are %g times off against the "
            "engine's; start the controller with --time-scale %g (docs/engine-emulator.md, "
            '"Time")', state.backend.backend_id, scale, self.time_scale,
            max(scale, self.time_scale) / min(scale, self.time_scale), scale,
        )  # fmt: skip

    def _set_models(self, state: BackendState, models: list[dict[str, Any]]) -> None:
        ids = frozenset(str(m["id"]) for m in models)
        if ids != state.model_ids:
            if state.model_ids:
                _log.warning(
                    "backend %s now serves %s (was %s)", state.backend.backend_id,
                    ", ".join(sorted(ids)) or "nothing", ", ".join(sorted(state.model_ids)),
                )  # fmt: skip
            state.model_ids = ids
            self._on_change()
        state.models = models

    def _update(self, state: BackendState) -> None:
        """Recompute :attr:`BackendState.healthy`; log and announce changes."""
        healthy = state.probe_ok and state.breaker.allows_calls() and not state.draining
        if healthy != state.healthy:
            _log.warning(
                "backend %s is %s", state.backend.backend_id,
                "up (health probe succeeded)" if healthy else f"out ({state.status()}: "
                f"{_why_out(state)})",
            )  # fmt: skip
            state.healthy = healthy
            if not healthy and not state.draining:
                for block in list(state.abortable):
                    block.abort()
            self._on_change()

    def abortable(self, backend_id: str) -> Abortable:
        """A block (``with pool.abortable(backend_id) as block:``) the pool cancels when
        ``backend_id`` fails (probe or circuit) while it runs; ``block.aborted`` says whether
        it was. Aborted from the start (nothing cancelled: the block checks ``aborted``
        before it sends) when the backend is already out of routing for a failure."""
        state = self.states.get(backend_id)
        out = state is not None and not state.healthy and not state.draining
        return Abortable(state, aborted=out, loop=self.loop)

    # --- facts from calls --------------------------------------------------------------------

    def record_outcome(self, backend_id: str, ok: bool, reason: str = "") -> None:
        """A call to ``backend_id`` ended: ``ok`` = the backend did its part (any 2xx-4xx
        answer), else it failed (broken connection, 5xx, timeout)."""
        state = self.states.get(backend_id)
        if state is None:
            return
        now = self._clock()
        if ok:
            state.breaker.record_success(now)
        else:
            state.failures_total += 1
            state.last_error = reason or "call failed"
            state.breaker.record_failure(now, state.last_error)
        self._update(state)

    async def check(self, backend_id: str) -> bool:
        """One health probe now (at most ``interval_s``), e.g. after a call lost its connection:
        a dead server fails it at once and its circuit opens; a live one (the call itself was
        the problem) stays in routing. Returns whether it is healthy."""
        state = self.states.get(backend_id)
        if state is None:
            return False
        ok = False  # stays False when the probe runs out of time
        with anyio.move_on_after(self.interval_s):
            ok = await state.backend.health()
        state.probe_ok = ok
        state.breaker.record_probe(ok, self._clock(), "health probe after a lost call failed")
        self._update(state)
        return state.healthy

    def mark_down(self, backend_id: str, reason: str = "unreachable") -> None:
        """A call could not reach it: out of routing at once (circuit tripped) until a probe
        after the cool-down succeeds."""
        state = self.states.get(backend_id)
        if state is None:
            return
        state.failures_total += 1
        state.last_error = reason
        state.breaker.trip(self._clock(), reason)
        self._update(state)

    def acquire(self, backend_id: str, sequences: int = 1) -> None:
        """One call of ``sequences`` sequences was admitted to ``backend_id`` (it counts in
        flight until :meth:`release`). Raises :class:`KeyError` for an unknown id."""
        state = self.states[backend_id]
        state.in_flight += 1
        state.sequences_in_flight += sequences
        state.admitted_total += 1
        self.calls_in_flight += 1

    def release(self, backend_id: str, sequences: int = 1) -> None:
        """One admitted call of ``sequences`` sequences left ``backend_id`` (a backend removed
        meanwhile is ignored; a draining one is dropped with its last call)."""
        self.calls_in_flight -= 1
        state = self.states.get(backend_id)
        if state is None:
            return
        state.in_flight -= 1
        state.sequences_in_flight -= sequences
        if state.draining and state.in_flight <= 0:
            self._drop(state)

    # --- adding and removing -----------------------------------------------------------------

    async def add(self, backend: Backend) -> BackendState:
        """Add a backend while running: probed once now (so the answer says whether it is
        up), then every interval. Raises :class:`ConfigError` for a duplicate id."""
        backend_id = backend.backend_id
        if backend_id in self.states:
            raise ConfigError(f"a backend with id {backend_id!r} exists already")
        if self._group is None:
            raise ConfigError("the backend pool is not running")
        state = self._new_state(backend)
        state.healthy = state.probe_ok = False  # no calls before its first probe
        self.states[backend_id] = state
        await self._probe_safely(state)
        if self.states.get(backend_id) is state:  # not removed while probing
            self._group.start_soon(self._probe_loop, state)
            _log.warning(
                "backend %s (%s) added through the admin API; after its first probe: %s",
                backend_id, backend.url, state.status(),
            )  # fmt: skip
        self._on_change()
        return state

    def remove(self, backend_id: str) -> BackendState:
        """Start draining ``backend_id``: no new calls; dropped once its in-flight calls have
        finished (at once when it has none). Raises :class:`KeyError` for an unknown id."""
        state = self.states[backend_id]
        if not state.draining:
            state.draining = True
            _log.warning(
                "backend %s removed through the admin API: draining %d calls",
                backend_id, state.in_flight,
            )  # fmt: skip
            self._update(state)
        if state.in_flight <= 0:
            self._drop(state)
        return state

    def _drop(self, state: BackendState) -> None:
        backend_id = state.backend.backend_id
        if self.states.get(backend_id) is not state:
            return
        del self.states[backend_id]
        _log.warning("backend %s dropped: removed, and no call of it is in flight", backend_id)
        if state.probe_scope is not None:
            state.probe_scope.cancel()
        if self._group is not None:
            self._group.start_soon(_close, state.backend)
        self._on_change()

    async def aclose(self) -> None:
        """Close every backend still in the pool (the pool's loops have stopped)."""
        for state in list(self.states.values()):
            await state.backend.aclose()

    # --- views -------------------------------------------------------------------------------

    def views(self) -> list[BackendView]:
        """One view per backend, for the dispatcher. A backend's view is the very object of
        the previous call while nothing in it changed: the dispatcher then need not ask the
        admission policy about it again (``Dispatcher.admit``), which keeps a decision among
        many backends cheap (docs/routing.md, "Cost at many backends")."""
        cache = self._views
        out = []
        for backend_id, state in self.states.items():
            load = state.load
            supports_priority = state.backend.capabilities.supports_priority
            capacity = state.capacity
            facts = (
                state.sequences_in_flight,
                state.healthy,
                load.num_running,
                load.num_waiting,
                load.kv_cache_usage,
                supports_priority,
                state.load_at_s,
                load.max_num_seqs,
                state.model_ids,
                state.capacity,
            )
            cached = cache.get(backend_id)
            if cached is not None and cached[0] == facts:
                out.append(cached[1])
                continue
            view = BackendView(
                backend_id=backend_id,
                in_flight=state.sequences_in_flight,
                healthy=state.healthy,
                num_running=load.num_running,
                num_waiting=load.num_waiting,
                kv_cache_usage=load.kv_cache_usage,
                supports_priority=supports_priority,
                metrics_at_s=state.load_at_s,
                max_num_seqs=load.max_num_seqs,
                # Unknown (it never listed its models): it takes a call for any model.
                models=state.model_ids or None,
                kv_capacity_tokens=None if capacity is None else capacity.gpu_tokens,
                cpu_kv_capacity_tokens=0 if capacity is None else capacity.tier_tokens(),
            )
            cache[backend_id] = (facts, view)
            out.append(view)
        if len(cache) > len(self.states):  # backends removed
            for backend_id in set(cache) - set(self.states):
                del cache[backend_id]
        return out

    def largest_batch(self) -> int | None:
        """The largest batch size (``max_num_seqs``) a backend not being removed reported
        (:attr:`BackendState.batch`); ``None`` when none did (a stock vLLM)."""
        largest: int | None = None  # a loop, not max() over a list: asked once per call
        for state in self.states.values():
            batch = state.batch
            if batch is not None and not state.draining and (largest is None or batch > largest):
                largest = batch
        return largest

    def any_healthy(self, model: str | None = None) -> bool:
        """Some backend takes calls — for ``model`` when given (it serves it, or its models
        are unknown)."""
        for state in self.states.values():  # a loop, not any(): asked several times per call
            if state.healthy and (model is None or not state.model_ids or model in state.model_ids):
                return True
        return False

    def model_list(self) -> list[dict[str, Any]]:
        """The union of all live backends' models, first occurrence of each id wins."""
        seen: dict[str, dict[str, Any]] = {}
        for state in self.states.values():
            if state.draining:
                continue
            for model in state.models:
                seen.setdefault(model["id"], model)
        return list(seen.values())

    def known_model_ids(self) -> set[str] | None:
        """Model ids served somewhere, or ``None`` when no backend told us (then any model
        name is forwarded and the backend judges it)."""
        ids: set[str] = set()
        for state in self.states.values():  # asked once per call: no comprehension frame
            if state.model_ids and not state.draining:
                ids |= state.model_ids
        return ids or None

    def serving(self, model: str) -> list[BackendState]:
        """The backends (not draining) that list ``model``, in pool order."""
        return [s for s in self.states.values() if not s.draining and model in s.model_ids]


async def _close(backend: Backend) -> None:
    with anyio.CancelScope(shield=True):
        try:
            await backend.aclose()
        except Exception:  # closing is best effort; the backend is gone from routing anyway
            _log.exception("closing backend %s failed", backend.backend_id)
