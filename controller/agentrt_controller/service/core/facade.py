"""The controller's one facade between the HTTP layer and its core.

:class:`ControllerCore` owns everything a call and a program go through — tenants and their
quotas and cache salts, model lookup, the queues and the
:class:`~agentrt_controller.scheduling.dispatcher.Dispatcher`, the backend pool (health, circuit
breakers, in-flight counts), forwarding and its retry policy, charging, program events,
sessions, KV retention, call deadlines — and the one
:data:`~agentrt_controller.service.core.clock.Clock` all of them read. The endpoints (``proxy``,
``passthrough``, ``events``, ``admin``, ``app``) only translate HTTP into calls of the methods
below and their results back into HTTP; they never read the core's attributes
(docs/controller.md, "Inside the service"). One generation call::

    pending = core.accept(call, body, tagged=..., tenant=...)   # quotas, hashes, retention
    with core.deadline(pending):                # the call's one deadline, on the core's clock
        forwarded = await core.forward(pending, request)   # queue .. admit .. send .. retry
        ... stream forwarded.answer to the client, core.tokens(call, n) per chunk ...
        charge = core.settle(pending, forwarded, usage, ok=..., reason=...)
    core.call_ended(pending)                    # quota left; an untagged call's program ends

``request`` is a :class:`GenerationRequest` (the parsed body, headers, stream flag); the core
turns it into the admitted backend's request (salt where the backend declares
``takes_cache_salt``, stream usage where it declares ``stream_usage``, the priority) and the
backend adds its own credential.

Public methods, by concern:

* lifecycle — :meth:`run` (the core's loops: dispatch, deadlines, probes, retention, expiry),
  :meth:`aclose`, :meth:`wake`, :meth:`now`;
* tenants — :attr:`authenticate`, :meth:`open_tenancy`, :meth:`salt_for`;
* one call — :attr:`known_models`, :attr:`resolve_model`, :meth:`accept`, :meth:`deadline`,
  :meth:`forward`, :meth:`tokens`, :meth:`settle`, :meth:`call_ended`;
* programs (one per event) — :meth:`start_session`, :meth:`end_session`,
  :meth:`start_program`, :meth:`end_program`, :meth:`start_tool_wait`,
  :meth:`end_tool_wait`, :meth:`max_predicted_wait_s`, :meth:`expire_programs`;
* backends — :meth:`healthy`, :meth:`backend_health`, :meth:`models`,
  :meth:`describe_backends`, :meth:`backends_for_model`, :meth:`has_backend`,
  :meth:`add_backend`, :meth:`remove_backend`;
* introspection — :meth:`programs_snapshot`, :meth:`queues_snapshot`,
  :meth:`collect_metrics`.

The scheduler and retention hear of program events here, in the order the papers' algorithms
need (Autellix, arXiv 2502.13965: the program-level process table; Continuum, arXiv
2511.02230: the TTL decision when a tool call starts). Event loop thread only.

**Clients count wall seconds.** The durations a client sends (a call's or a program's
``timeout_ms``, a wait's ``predicted_duration_s`` and ``duration_s``) and those it is told (a
session's ``idle_timeout_s``, a quota's ``Retry-After``) are seconds of its wall clock. The
core's clock runs ``config.time_scale`` of its seconds to each of them (``controller serve
--time-scale``, in front of engines run faster than real time: service/core/clock.py), so they
are converted here, at the edge; at the default scale 1 the two are the same.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import anyio
from anyio.abc import TaskStatus

from agentrt.protocol import (
    ProgramEnd,
    ProgramStart,
    SessionStart,
    SessionStarted,
    ToolWaitEnd,
    ToolWaitStart,
    deadline_after,
)
from agentrt_controller.backends.api import (
    Backend,
    BackendDisconnected,
    BackendError,
    BackendUnavailable,
    credential_of,
)
from agentrt_controller.cost_model import CostFunction
from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing import request_block_hashes, uses_block_hashes
from agentrt_controller.routing.hashing import MessageChains
from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core.answer import BackendAnswer
from agentrt_controller.service.core.calls import CallQueue, Forwarded, PendingCall
from agentrt_controller.service.core.charging import Charge, Charger, Usage
from agentrt_controller.service.core.clock import MONOTONIC, Clock, sleep_until
from agentrt_controller.service.core.kv_events import KvEventsFeed
from agentrt_controller.service.core.models import ModelCatalog
from agentrt_controller.service.core.policies import build_dispatcher, build_retention
from agentrt_controller.service.core.pool import BackendPool
from agentrt_controller.service.core.quotas import ProgramNotFound, TenantQuotas, check_program
from agentrt_controller.service.core.requests import GenerationRequest
from agentrt_controller.service.core.retry import RetryPolicy
from agentrt_controller.service.core.sessions import SessionRegistry
from agentrt_controller.service.core.tenants import Tenant, TenantDirectory, build_directory
from agentrt_controller.service.errors import Conflict, ServiceError, UpstreamFailed
from agentrt_controller.service.telemetry.introspection import (
    collect_metrics,
    queues_snapshot,
    with_wall_times,
)
from agentrt_controller.service.telemetry.metrics import ServiceMetrics

__all__ = ["ControllerCore", "Forwarded", "GenerationRequest", "PendingCall", "SaltFor"]

_log = logging.getLogger("agentrt.controller")

#: ``(client's cache_salt or None) -> the cache_salt to send`` for one tenant.
SaltFor = Callable[[str | None], str]


class ControllerCore:
    """The controller's core behind one object (see the module docstring).

    ``backends`` must not be empty (checked by the app); ``cost`` replaces the configured cost
    model; ``clock`` is the monotonic clock in seconds that every policy decision uses.
    """

    def __init__(
        self,
        config: ControllerConfig,
        backends: Sequence[Backend],
        *,
        metrics: ServiceMetrics | None = None,
        cost: CostFunction | None = None,
        clock: Clock = MONOTONIC,
        tenants: TenantDirectory | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics if metrics is not None else ServiceMetrics()
        self.clock = clock
        #: ``now()``: the core's clock (seconds) — the clock itself, not a method calling it
        #: (the endpoints read it several times per call).
        self.now: Clock = clock
        #: API keys -> tenants (open mode without keys); raises ConfigError for bad sources.
        self.tenants = (
            tenants
            if tenants is not None
            else build_directory(
                key_file=config.api_key_file,
                key_list=config.api_keys,
                single_key=config.api_key,
                secret=config.cache_salt_secret,
            )
        )
        self.quotas = TenantQuotas(clock, time_scale=config.time_scale)
        # ``config.cost`` parsed once: the router's and retention's defaults and the charge.
        cost_model = config.cost
        self.dispatcher = build_dispatcher(config, cost_model, self.tenants)
        self.pool = BackendPool(
            backends,
            self.wake,
            clock,
            interval_s=config.scrape_interval_s,
            breaker=config.breaker,
            on_error=self.metrics.internal_errors.inc,
            time_scale=config.time_scale,
        )
        #: Served models, aliases and fallbacks (docs/routing.md, "Several models").
        self.catalog = ModelCatalog(
            self.pool.known_model_ids,
            self.pool.any_healthy,
            aliases=config.model_aliases,
            fallbacks=config.model_fallbacks,
        )
        #: KV retention during tool waits (``config.retention = "on"``); ``None`` = off.
        self.retention = (
            build_retention(
                config, cost_model, self.dispatcher, self.pool, clock, self.metrics, self.tenants
            )
            if config.retention == "on"
            else None
        )
        self.calls = CallQueue(
            self.dispatcher,
            self.pool,
            self.metrics,
            clock,
            max_queued_calls=config.max_queued_calls,
            retry_after_s=config.retry_after_s,
            wake=self.wake,
            on_admitted=self.retention.on_admitted if self.retention is not None else None,
            max_sequences_per_call=config.max_sequences_per_call,
        )
        self.charger = Charger(cost if cost is not None else cost_model.service_s)
        self.retry = RetryPolicy(config.max_retries)
        #: Fill ``CallFacts.block_hashes`` (message-boundary chains) for a prefix-aware router.
        self._hashes = uses_block_hashes(self.dispatcher.router)
        #: The chains of recent messages: a program's next call repeats its history, whose
        #: hashing would otherwise grow the cost of a call with its prompt.
        self._chains = MessageChains()
        #: vLLM's KV events for the exact prefix index (backends with ``kv_events``); ``None``
        #: = none configured (the estimate alone).
        self.kv_events = KvEventsFeed.build(
            config.backends, self.dispatcher.router, api_key_of=self._credential_of,
            on_change=self.wake,
        )  # fmt: skip
        if self.kv_events is not None:
            self.kv_events.register_metrics(self.metrics.registry)
        self.sessions = SessionRegistry()
        # Three lookups of every call, bound here rather than methods calling them (a frame
        # fewer each; the endpoints call them as methods).
        #: ``authenticate(authorization)``: the tenant whose API key is the bearer token of an
        #: ``Authorization`` header value; ``None`` when there is none (open mode: always the
        #: one tenant).
        self.authenticate: Callable[[str | None], Tenant | None] = self.tenants.authenticate
        #: ``known_models()``: model ids some live backend serves; ``None`` when none said
        #: (anything goes).
        self.known_models: Callable[[], set[str] | None] = self.pool.known_model_ids
        #: ``resolve_model(requested)``: the model a call naming ``requested`` runs on:
        #: aliases, the one served model for a call naming none, fallbacks when every backend
        #: of it is out (:meth:`ModelCatalog.resolve`). Raises :class:`BadRequest` /
        #: :class:`ModelNotFound`.
        self.resolve_model: Callable[[object], str] = self.catalog.resolve
        #: A dispatch round is due (:meth:`wake`), and the future the dispatch loop waits on
        #: while none is: a bare future on the core's loop, not an ``anyio.Event`` made per
        #: round (an async-library lookup and several frames each).
        self._woken = False
        self._wake_waiter: asyncio.Future[None] | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Dispatch, probe backends (each in its own loop, :class:`BackendPool`), carry out
        retention and expire idle programs until cancelled (the app's lifespan owns this
        task). Reports started after the first probe of every backend."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._dispatch_loop)
            await group.start(self.calls.deadlines.run, self._expire_calls)
            if self.retention is not None:
                await group.start(self.retention.run)
            await group.start(self.pool.run)
            if self.kv_events is not None:
                await group.start(self.kv_events.run)
            self.expire_programs()
            group.start_soon(self._expiry_loop)
            task_status.started()

    async def aclose(self) -> None:
        """Close the backends (after :meth:`run` was cancelled)."""
        await self.pool.aclose()

    def wake(self) -> None:
        """Something changed (arrival, finish, scrape, event): run the dispatcher soon."""
        self._woken = True
        waiter = self._wake_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _dispatch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._woken:
                self._wake_waiter = loop.create_future()
                try:
                    await self._wake_waiter
                finally:
                    self._wake_waiter = None
            self._woken = False
            try:
                self.calls.dispatch()
            except Exception:  # a policy bug must not stop the service: log it, go on
                self.metrics.internal_errors.inc()
                _log.exception("dispatch round failed")

    def _expire_calls(self, now: float) -> None:
        try:
            self.calls.expire(now)
        except Exception:  # a policy bug must not stop the deadline loop
            self.metrics.internal_errors.inc()
            _log.exception("deadline round failed")

    async def _expiry_loop(self) -> None:
        while True:
            await sleep_until(self.clock, self.clock() + self.config.scrape_interval_s)
            try:
                self.expire_programs()
            except Exception:
                self.metrics.internal_errors.inc()
                _log.exception("program expiry round failed")

    # --- one call ----------------------------------------------------------------------------

    def open_tenancy(self) -> bool:
        """No API keys are configured: every caller is the one tenant, no quotas."""
        return self.tenants.open

    def salt_for(self, tenant: Tenant) -> SaltFor | None:
        """How ``tenant``'s ``cache_salt`` is chosen (a client's own salt counts only where
        the tenant may choose one); ``None`` in open mode (bodies go unchanged, a client's
        salt included)."""
        if self.tenants.open:
            return None
        tenants = self.tenants
        return lambda chosen: tenants.cache_salt(tenant, chosen)

    def accept(
        self,
        call: CallFacts,
        body: Mapping[str, Any],
        *,
        tagged: bool,
        tenant: Tenant | None = None,
    ) -> PendingCall:
        """A parsed generation request of ``tenant`` (``call.program.tenant`` is its name):
        check its sequences against the cap (:class:`BadRequest` 400) and the program quotas
        (:class:`QuotaExceeded` 429, :class:`TableFull` 503), then add what the router and
        retention need (block hashes — salted by the body's ``cache_salt`` — and the retained
        backend of a thread back from its tool)."""
        self.calls.check_sequences(call)  # n / best_of above the cap: 400
        if tenant is not None:
            self._check_program(call.program, tenant)
            self.metrics.tenant_calls.inc(1.0, tenant.name)
        if self._hashes:
            call = call.with_block_hashes(request_block_hashes(body, self._chains))
        retained = None
        if tagged and self.retention is not None:
            retained = self.retention.on_call(call)
        return PendingCall(call, body, tagged, tenant=tenant, retained_backend=retained)

    def _check_program(self, key: ProgramKey, tenant: Tenant) -> None:
        if self.tenants.open:
            quota_tenant = tenant  # open mode: no tenant quota, the global cap still holds
        else:
            quota_tenant = self.tenants.tenants.get(tenant.name, tenant)
        try:
            victim = check_program(
                self.dispatcher.table,
                key,
                quota_tenant,
                self.clock(),
                max_programs=self.config.max_programs,
                retry_after_s=self.config.retry_after_s,
                time_scale=self.config.time_scale,
            )
        except ServiceError as error:
            self.metrics.tenant_refusals.inc(1.0, tenant.name, str(error.status_code))
            raise
        if victim is not None:
            self.metrics.evictions.inc()
            self._end_program(victim, evicted=True)

    def deadline(self, pending: PendingCall) -> AbstractContextManager[None]:
        """Hold the call's exchange (:meth:`forward` up to :meth:`settle`) under its one
        deadline, ``call.deadline_s`` on the core's clock: queued, the call is dropped from
        the queues; otherwise the block is cancelled (the upstream request aborted). Either
        way :class:`DeadlinePassed` (504) is raised. The core's deadline loop enforces it
        (service/core/deadlines.py)."""
        return self.calls.deadlines.watch(pending.call)

    async def forward(self, pending: PendingCall, request: GenerationRequest) -> Forwarded:
        """Queue the call, wait for its admission, send ``request`` as the admitted backend
        takes it (:meth:`GenerationRequest.for_backend`: salt, stream usage, priority; the
        backend adds its credential) and read until the client can be answered
        (:class:`BackendAnswer`); a backend that fails before that is left for another
        (:class:`RetryPolicy`). Raises :class:`NoBackend` (503), :class:`DeadlinePassed`
        (504) or :class:`UpstreamFailed` (502); on any raise the call is finished."""
        call = pending.call
        if pending.tenant is not None and not pending.quota_entered:
            try:
                await self.quotas.enter(pending.tenant, call.sequences)
            except ServiceError as error:
                self.metrics.tenant_refusals.inc(1.0, pending.tenant.name, str(error.status_code))
                raise
            pending.quota_entered = True
        if self.kv_events is not None and not call.token_block_hashes:
            call = pending.call = await self.kv_events.fill_token_chain(call, pending.body)
        self.calls.submit(pending)
        retries = 0
        while True:
            admission = await self.calls.admitted(pending)
            backend_id = admission.backend_id
            backend = self.pool.states[backend_id].backend
            try:
                # The pool aborts the block when this backend fails meanwhile (pool.py).
                with self.pool.abortable(backend_id) as block:
                    if not block.aborted:  # else its backend is out already
                        sent = request.for_backend(backend.capabilities, admission.backend_priority)
                        response = await backend.send(sent)
                        answer = await BackendAnswer.start(request.stream, response)
                        status = response.status_code
                        if self.retry.retryable_status(status) and self.retry.may_retry(retries):
                            await answer.aclose()  # nothing of it reached the client: retry
                            raise BackendUnavailable(
                                f"backend {backend_id} answered HTTP {status}",
                                connect_failed=False,
                            )
                        return Forwarded(admission, answer, retries)
                raise BackendDisconnected(  # only reached when the pool aborted the block
                    f"backend {backend_id} failed (health probe or circuit) before its answer "
                    "started"
                )
            except BackendError as exc:
                failure = exc
                if not self.retry.retryable(failure):
                    self.calls.finish(
                        admission.call, backend_id, 0.0, ok=False, reason=str(failure)
                    )
                    raise UpstreamFailed(str(failure)) from failure
            except BaseException:
                self.calls.finish(admission.call, backend_id, 0.0)
                raise
            _log.info("call %s: %s", call.call_id, failure)
            if not self.retry.may_retry(retries):
                self.calls.finish(admission.call, backend_id, 0.0, ok=False, reason=str(failure))
                raise UpstreamFailed(f"no backend could answer: {failure}") from failure
            retries += 1
            down = self.retry.proves_down(failure)
            if not down:  # dead, or did this call break it? A probe tells.
                try:
                    down = not await self.pool.check(backend_id)
                except BaseException:
                    self.calls.finish(admission.call, backend_id, 0.0)
                    raise
            self.calls.requeue(pending, backend_id, down, str(failure))

    def tokens(self, call: CallEntry, new_tokens: int) -> None:
        """Output tokens streamed for an admitted call (quantum accounting)."""
        self.calls.tokens(call, new_tokens)

    def token_counter(self) -> Callable[[CallEntry, int], None]:
        """:meth:`tokens` without this object's frame, for a caller that counts every read
        of a stream (the proxy's relay)."""
        return self.calls.tokens

    def settle(
        self, pending: PendingCall, forwarded: Forwarded, usage: Usage, *, ok: bool | None,
        reason: str = "",
    ) -> Charge:  # fmt: skip
        """The forwarded call is over: charge it from ``usage`` by the cost model, release its
        backend slot and tell the backend's circuit ``ok`` (``None``: no verdict — client
        gone, deadline). A tagged call answered ``ok`` leaves its context for retention."""
        call = pending.call
        charge = self.charger.charge(usage, call)
        self.metrics.output_tokens.inc(charge.output_tokens)
        self.metrics.uncached_prompt_tokens.inc(charge.uncached_prompt_tokens)
        tenant = pending.tenant
        if tenant is not None:
            self.quotas.charge_tokens(tenant, charge.prompt_tokens + charge.output_tokens)
            self.metrics.tenant_tokens.inc(float(charge.prompt_tokens), tenant.name, "prompt")
            self.metrics.tenant_tokens.inc(float(charge.output_tokens), tenant.name, "output")
            self.metrics.tenant_service.inc(charge.service_s, tenant.name)
        admission = forwarded.admission
        backend_id = admission.backend_id
        self.calls.finish(admission.call, backend_id, charge.service_s, ok=ok, reason=reason)
        if ok and pending.tagged and self.retention is not None:
            self.retention.on_finish(call, backend_id, pending.body, charge.prompt_tokens)
        return charge

    def call_ended(self, pending: PendingCall) -> None:
        """The call's HTTP exchange is over; an untagged call was a program of its own."""
        if pending.quota_entered and pending.tenant is not None:
            pending.quota_entered = False
            self.quotas.leave(pending.tenant, pending.call.sequences)
        if not pending.tagged:
            self._end_program(pending.call.program, one_call=True)

    # --- sessions and programs (docs/protocol.md) --------------------------------------------
    # Every event names its tenant (the authenticated caller, never a client header): a key is
    # (tenant, session, program), so a tenant reaches only its own programs, and a program
    # that is not the caller's answers 404 exactly like one that does not exist.

    def start_session(self, tenant: Tenant, event: SessionStart) -> SessionStarted:
        """Register a session (its id proposed by the client, or made here)."""
        session_id = self.sessions.open(tenant.name, event.session_id, event.client, self.clock())
        return SessionStarted(
            session_id=session_id,
            idle_timeout_s=self.config.program_idle_timeout_s / self.config.time_scale,
        )

    def end_session(self, tenant: Tenant, session_id: str) -> int:
        """End the session and every program of it *of ``tenant``*; returns how many ended."""
        self.sessions.close(tenant.name, session_id)
        programs = self.dispatcher.table.keys()  # a list: ending programs changes the table
        ended = [k for k in programs if k.session_id == session_id and k.tenant == tenant.name]
        for key in ended:
            self._end_program(key)
        return len(ended)

    def _live(self, tenant: Tenant, session_id: str, program_id: str) -> ProgramKey:
        """The key of a live program of ``tenant``; :class:`ProgramNotFound` (404) else."""
        key = ProgramKey(tenant=tenant.name, session_id=session_id, program_id=program_id)
        if key not in self.dispatcher.table:
            self.metrics.tenant_refusals.inc(1.0, tenant.name, "404")
            raise ProgramNotFound(
                f"no live program {program_id!r} in session {session_id!r}",
                param="program_id",
                code="program_not_found",
            )
        return key

    def start_program(self, tenant: Tenant, program_id: str, event: ProgramStart) -> None:
        """A program starts (or is refreshed): program quotas apply as to a first call."""
        key = ProgramKey(tenant=tenant.name, session_id=event.session_id, program_id=program_id)
        self._check_program(key, tenant)
        now = self.clock()
        deadline = deadline_after(event.timeout_ms, now, self.config.time_scale)
        self.dispatcher.on_program_start(key, now, name=event.name, deadline_s=deadline)
        if self.retention is not None:
            self.retention.on_program_start(key)
        self.wake()

    def end_program(self, tenant: Tenant, program_id: str, event: ProgramEnd) -> None:
        """End a live program of ``tenant``; :class:`ProgramNotFound` otherwise."""
        self._end_program(self._live(tenant, event.session_id, program_id))
        self.wake()

    def max_predicted_wait_s(self) -> float:
        """The longest predicted wait an event may announce (seconds of the core's clock)."""
        configured = self.config.max_predicted_wait_s
        return self.config.program_idle_timeout_s if configured is None else configured

    def start_tool_wait(self, tenant: Tenant, program_id: str, event: ToolWaitStart) -> None:
        """A thread of a live program of ``tenant`` waits on a tool or a human: the process
        table records it (its predicted duration clamped to :meth:`max_predicted_wait_s`),
        retention decides whether to keep the thread's KV (Continuum, arXiv 2511.02230) when
        the table honours the wait (``ToolWait.honoured``: after a finished call of the thread,
        once per node; docs/security.md). :class:`ProgramNotFound` for a program that is not
        live; :class:`Conflict` for a new wait beyond ``max_tool_waits_per_program`` open ones
        (a repeated one replaces its own)."""
        key = self._live(tenant, event.session_id, program_id)
        table, cap = self.dispatcher.table, self.config.max_tool_waits_per_program
        if table.open_tool_waits(key) >= cap and not table.has_tool_wait(
            key, event.thread_id, event.node_id
        ):
            raise Conflict(f"program {program_id} has {cap} open tool waits, the cap")
        predicted = event.predicted_duration_s
        if predicted is not None:  # wall seconds to the core's, then clamped
            predicted = min(
                max(0.0, predicted * self.config.time_scale), self.max_predicted_wait_s()
            )
        recorded = self.dispatcher.on_tool_wait_start(
            key,
            self.clock(),
            thread_id=event.thread_id,
            node_id=event.node_id,
            tool_name=event.tool_name,
            predicted_duration_s=predicted,
            kind=event.kind,
        )
        if self.retention is not None and recorded.honoured:
            entry = self.dispatcher.table.get(key)
            self.retention.on_tool_start(
                key,
                thread_id=event.thread_id,
                node_id=event.node_id,
                tool_name=event.tool_name,
                predicted_duration_s=predicted,
                kind=event.kind,
                program_kind=entry.name if entry is not None else "",
            )
        self.wake()

    def end_tool_wait(self, tenant: Tenant, program_id: str, event: ToolWaitEnd) -> None:
        """The wait is over after ``event.duration_s`` (measured by the client, wall seconds);
        :class:`ProgramNotFound` for a program of ``tenant`` that is not live."""
        key = self._live(tenant, event.session_id, program_id)
        ended = self.dispatcher.on_tool_wait_end(
            key, self.clock(), thread_id=event.thread_id, node_id=event.node_id
        )
        if self.retention is not None and ended is not None and ended.honoured:
            self.retention.on_tool_end(
                key,
                thread_id=event.thread_id,
                node_id=event.node_id,
                duration_s=event.duration_s * self.config.time_scale,
            )
        self.wake()

    def expire_programs(self) -> None:
        """Drop programs idle past ``program_idle_timeout_s`` (and what retention holds)."""
        for key in self.dispatcher.expire(self.clock()):
            if self.retention is not None:
                self.retention.on_program_end(key)

    def _end_program(
        self, key: ProgramKey, *, evicted: bool = False, one_call: bool = False
    ) -> None:
        """``one_call``: the program of an untagged call, whose id is the call's own. It held
        no retention, wait or kept context (retention hears only of tagged calls' returns,
        finishes and waits), and nothing can name it once it is gone (an event for it answers
        404), so retention is told only while it retains something anywhere (its expiry and
        relief then run as at any program end); otherwise the end would only add the id to
        the ended programs it remembers (``RetentionTracker.remember_ended``), where it would
        push out a tagged program's."""
        now = self.clock()
        entry = self.dispatcher.table.get(key)
        if entry is not None and not evicted:
            self.metrics.program_e2e.observe(max(0.0, now - entry.created_s))
        self.dispatcher.on_program_end(key, now)
        retention = self.retention
        if retention is not None and (not one_call or retention.driver.retains()):
            retention.on_program_end(key)

    # --- backends ----------------------------------------------------------------------------

    def healthy(self) -> bool:
        return self.pool.any_healthy()

    def backend_health(self) -> dict[str, bool]:
        """Whether each backend takes calls, by id."""
        return {backend_id: state.healthy for backend_id, state in self.pool.states.items()}

    def models(self) -> list[dict[str, object]]:
        """The union of the live backends' ``/v1/models`` entries, and the aliases of the
        models among them."""
        return self.catalog.listed(self.pool.model_list())

    def describe_backends(self) -> list[dict[str, object]]:
        """Each backend's state for the admin listing."""
        now = self.clock()
        return [state.describe(now) for state in self.pool.states.values()]

    def _credential_of(self, backend_id: str) -> str | None:
        """The controller's own credential for ``backend_id``, as the backend holds it (for
        the KV-events feed's ``/tokenize``, which goes around the backend)."""
        state = self.pool.states.get(backend_id)
        return None if state is None else credential_of(state.backend)

    def backends_for_model(self, model: str | None) -> list[Backend]:
        """Healthy backends that serve ``model`` (``None``, or a backend whose model list is
        unknown: any), least loaded first — for requests that are routed but not scheduled
        (``/v1/embeddings``, ``/tokenize``, ``/detokenize``)."""
        fits = [
            state
            for state in self.pool.states.values()
            if state.healthy and (model is None or not state.model_ids or model in state.model_ids)
        ]
        fits.sort(key=lambda state: state.in_flight)
        return [state.backend for state in fits]

    def has_backend(self, backend_id: str) -> bool:
        return backend_id in self.pool.states

    async def add_backend(self, backend: Backend) -> dict[str, object]:
        """Add a backend, probed once; returns its description. Raises
        :class:`~agentrt.errors.ConfigError` for an id in use."""
        state = await self.pool.add(backend)
        return state.describe(self.clock())

    def remove_backend(self, backend_id: str) -> dict[str, object] | None:
        """Drain ``backend_id``: ``None`` when it was idle and is gone, else its description
        (``draining``). Raises :class:`KeyError` for an unknown id."""
        state = self.pool.remove(backend_id)
        self.wake()
        if backend_id not in self.pool.states:
            return None
        return state.describe(self.clock())

    # --- introspection -----------------------------------------------------------------------

    def programs_snapshot(
        self, limit: int, *, tenant: Tenant | None, after: int = -1
    ) -> dict[str, object]:
        """The process table as JSON: up to ``limit`` programs created after cursor ``after``
        (``next_cursor`` names the next page), those of ``tenant`` only (``None`` = every
        tenant's: the admin's view), and the session count."""
        now_s = self.clock()
        snapshot = self.dispatcher.table.snapshot(
            now_s,
            limit=max(0, limit),
            tenant=None if tenant is None else tenant.name,
            all_tenants=tenant is None,
            after=after,
        )
        if tenant is None:
            snapshot["sessions"] = len(self.sessions)
        return with_wall_times(snapshot, now_s, time_scale=self.config.time_scale)

    def queues_snapshot(self, *, full: bool) -> dict[str, object]:
        """Queues, policies, retention and backends, as JSON; ``full=False`` (a tenant that is
        not the admin, with keys configured) leaves out every call, program and backend: the
        policy names and queue lengths remain."""
        now_s = self.clock()
        snapshot = with_wall_times(
            queues_snapshot(self.dispatcher, self.pool, self.retention, now_s),
            now_s,
            time_scale=self.config.time_scale,
        )
        if full:
            return snapshot
        queues = [
            {k: v for k, v in q.items() if k != "calls"}
            for q in snapshot.get("queues", [])
            if isinstance(q, dict)
        ]
        kept = ("policy", "queued", "admission", "router")
        return {**{k: snapshot[k] for k in kept if k in snapshot}, "queues": queues}

    def collect_metrics(self) -> None:
        """Fill the scrape-time gauges from live state."""
        collect_metrics(self.metrics, self.dispatcher, self.pool, self.clock())
