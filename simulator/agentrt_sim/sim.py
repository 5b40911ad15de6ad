"""The discrete-event simulator: virtual clock, event heap, N engines, clients, a controller.

One :class:`Simulation` replays a list of programs once, with one set of policy objects:

* **clients** release a program's nodes when all their parents have finished: an LLM call is
  sent to the controller at once; a tool or think wait ends ``duration_s`` later;
* the **controller** is the real :class:`~agentrt_controller.scheduling.dispatcher.Dispatcher`
  around the scheduler, router and admission policy under test (docs/architecture.md, design
  rule 1): it is told of program starts / ends, tool waits, streamed tokens and finishes with
  the service charged by the cost model (``agentrt_sim.costs``); retention decisions come from
  a :class:`~agentrt_controller.retention.api.RetentionPolicy`;
* the **engines** are :class:`agentrt_emulator.core.engine.EngineCore` objects, stepped on the
  virtual clock; a step's effects (tokens, finishes) are delivered at its end.

**Time and order.** All events at the same instant are handled before any decision: engine
steps first, then waits, then program arrivals; the calls released at that instant are
submitted in ``(program_id, node order)`` order, then the dispatcher admits, then idle engines
step. Everything is deterministic: no wall clock, no unseeded randomness, ties broken by
sequence numbers.

**Scrapes.** With ``SimConfig.scrape_interval_s`` 0 the engines' gauges are read afresh at
every decision. Above 0 they are read only at a scrape, one at each multiple of the interval
(the first at t = 0) while anything else is still to happen, and each scrape is an instant
like the others: the dispatchers then admit. That is the served controller: each backend's
probe loop reads its gauges and calls the pool's ``on_change``, the service's ``wake``, and
its dispatch loop runs ``Dispatcher.admit`` — the adaptive window reacts at the scrapes, not
only when a call arrives or finishes.

**Tenants.** A program's ``tenant`` is put on its calls and its key (the controller's
fair shares between tenants read it); a program with ``rotate_call_ids`` sends every call under
a fresh program id ``<program id>#<node id>``, started by the call and ended when it finishes,
so the controller sees one-call programs while the client still runs the whole DAG. The service
charged to each tenant's calls finishing inside the measurement window is recorded
(``RunRecord.tenant_service_s``).

**Controller replicas.** ``Policies.replicas`` adds further dispatchers, each with its own
process table, queues, router (prefix index) and admission state, over the same engines: what
N controller processes behind a load balancer would hold. A
:class:`~agentrt_controller.replicas.ReplicaBalancer` sends every request to one replica:
by program (consistent hash of the program id: a program's calls, tool events and retention
all meet one process-table entry) or by call (round robin over every request: a program's
calls, its start / end and its tool events land on different replicas). A call's tokens and
finish are reported to the replica that admitted it (its stream runs there). Each replica's
admission sees the engines' scraped gauges (``num_waiting``, shared by all) and its *own*
calls in flight; with ``Policies.split_window`` the batch size it sees is its share,
``max_num_seqs // N`` (at least 1). Replicas admit in turn, the first one rotating per instant.

**Speed.** An idle engine steps with ``max_steps`` large and a horizon up to the next event,
so the engine fuses identical pure-decode iterations; a simulated hour costs roughly one
Python step per external event instead of one per decode iteration. Each call hands the
engine its prompt's block-hash chain (``EngineRequest.prompt_hashes``), kept per program and
extended over the new blocks only (``agentrt_sim.tokens``): a long agent context is not
hashed again at every call.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrt.errors import InvalidRequest
from agentrt_controller.cost_model import CostFunction
from agentrt_controller.keys import ProgramKey
from agentrt_controller.replicas import ReplicaBalancer
from agentrt_controller.retention import RetentionPolicy
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallFacts
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.srpt import OracleBook, OracleFigures
from agentrt_emulator.core.engine import EngineCore
from agentrt_emulator.core.profiles import get_profile
from agentrt_emulator.core.types import EngineConfig, EngineRequest, EngineStats, StepResult
from agentrt_sim.costs import oracle_costs, roofline_cost_model
from agentrt_sim.metrics import ProgramRecord, RunRecord, critical_path
from agentrt_sim.plan import ProgramPlan
from agentrt_sim.retention import NoRetention
from agentrt_sim.state import CallRun, EngineSlot, ProgramRun
from agentrt_sim.tokens import ProgramTokens, TokenSpace
from agentrt_sim.waits import WaitHandler
from agentrt_sim.workloads.program import LLMNode

__all__ = ["SimConfig", "Simulation"]

_STEP_DONE, _REJECTED, _WAIT_DONE, _ARRIVAL, _WAKE, _SCRAPE = 0, 1, 2, 3, 4, 5


@dataclass(frozen=True)
class SimConfig:
    """How to simulate (not what: the programs come separately)."""

    #: Hardware profile name of every engine (emulator/core/profiles.py).
    profile: str = "a100-llama3-8b"
    #: Number of engines.
    engines: int = 1
    #: Engine limits. The simulator default allows Llama-3.1-8B's 128k context.
    engine: EngineConfig = field(default_factory=lambda: EngineConfig(max_model_len=131072))
    #: Programs arriving before this time are run but not measured (seconds).
    warmup_s: float = 0.0
    #: End of the measurement window for throughput (seconds); ``inf`` = the run's end.
    window_end_s: float = math.inf
    #: Stop simulating at this time even if programs are unfinished (seconds).
    stop_s: float = math.inf
    #: ``max_steps`` passed to ``EngineCore.step`` (fused decode iterations per call).
    max_fused_steps: int = 1 << 20
    #: How often the controller's view of engine gauges is refreshed (seconds); 0 = at every
    #: decision. Above 0 a scrape at each multiple of it refreshes the gauges and runs an
    #: admission round, as a served controller's probe wakes its dispatcher.
    scrape_interval_s: float = 0.0


@dataclass
class Policies:
    """The policy objects of one run (fresh objects per run: they keep state)."""

    dispatcher: Dispatcher
    retention: RetentionPolicy = field(default_factory=NoRetention)
    #: Service charged per finished call; ``None`` = the profile's roofline cost.
    cost_model: CostFunction | None = None
    #: Fill ``CallFacts.block_hashes`` (prefix hash chains at the engines' block size) for
    #: prefix-aware routers; costs hashing every prompt's new blocks once.
    block_hashes: bool = False
    #: Further controller replicas (fresh dispatchers of the same configuration); replica 0
    #: is ``dispatcher``. Empty = one controller.
    replicas: tuple[Dispatcher, ...] = ()
    #: How the balancer spreads requests over replicas: ``program`` or ``call``
    #: (:data:`agentrt_controller.replicas.SHARD_MODES`).
    shard: str = "program"
    #: Each replica's admission sees its share of an engine's batch (``max_num_seqs // N``,
    #: at least 1) instead of the whole batch.
    split_window: bool = False
    #: The true figures per call (clairvoyant SRPT reads them; the dispatchers' schedulers
    #: were built with it): the simulation fills it as it creates calls.
    oracle: OracleBook = field(default_factory=OracleBook)


ProgressFn = Callable[[float], None]


class Simulation:
    """Replays ``plans`` once under ``policies``; call :meth:`run` once."""

    def __init__(self, plans: Sequence[ProgramPlan], config: SimConfig, policies: Policies) -> None:
        profile = get_profile(config.profile)
        self.config = config
        self.dispatcher = policies.dispatcher
        #: Every controller replica's dispatcher; ``dispatchers[0] is dispatcher``.
        self.dispatchers = [policies.dispatcher, *policies.replicas]
        self.balancer = ReplicaBalancer(len(self.dispatchers), policies.shard)
        self._split_window = policies.split_window and len(self.dispatchers) > 1
        self.cost = policies.cost_model or roofline_cost_model(profile)
        self.oracle = policies.oracle
        self.engines = [
            EngineSlot(i, EngineCore(config.engine, profile)) for i in range(config.engines)
        ]
        #: Per replica, per engine: the calls that replica admitted there and has not seen
        #: finish (what its own ``BackendView.in_flight`` counts).
        self._replica_in_flight = [[0] * config.engines for _ in self.dispatchers]
        self.waits = WaitHandler(
            self.engines,
            policies.retention,
            dispatchers=self.dispatchers,
            replica_of=self.replica_of,
            wait_ends_at=self.wait_ends_at,
            node_finished=self.node_finished,
        )
        for dispatcher in self.dispatchers:  # admission counts the contexts retention pins
            if dispatcher.memory is not None:
                dispatcher.memory.pinned = self.waits.driver.pinned
        self._hash_block_size = config.engine.block_size if policies.block_hashes else None
        self.plans = plans
        self.now_s = 0.0
        self.calls: dict[str, CallRun] = {}
        self.tokens = TokenSpace(config.engine.block_size)
        self.record = RunRecord(replica_calls=[0] * len(self.dispatchers))
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._released: list[tuple[str, int, ProgramRun, int]] = []
        self._warm_stats: list[EngineStats] | None = None
        self._live = 0
        self._live_by_tenant: dict[str, int] = {}
        #: Scrapes done (``scrape_interval_s > 0``): the next one is at ``_scrapes * interval``.
        self._scrapes = 0
        #: A scrape event is in the heap.
        self._scrape_pending = False
        for index, plan in enumerate(plans):
            self.push(plan.program.arrival_s, _ARRIVAL, index)
        if config.scrape_interval_s > 0 and plans:  # the controller probes as it starts
            self._scrape_pending = True
            self.push(0.0, _SCRAPE, None)

    # -- the loop -----------------------------------------------------------------------------

    def push(self, time_s: float, kind: int, payload: Any) -> None:
        """Schedule an event (ties: kind, then insertion order)."""
        self._seq += 1
        heapq.heappush(self._heap, (time_s, kind, self._seq, payload))

    def wait_ends_at(self, time_s: float, run: ProgramRun, node: int) -> None:
        """Schedule the end of wait ``node`` of ``run``."""
        self.push(time_s, _WAIT_DONE, (run, node))

    def run(self, progress: ProgressFn | None = None, progress_every: int = 4096) -> RunRecord:
        """Run to completion (or ``stop_s``) and return what was recorded."""
        heap = self._heap
        pop = heapq.heappop
        config = self.config
        scrape_interval = config.scrape_interval_s
        batches = 0
        while heap:
            now = heap[0][0]
            if now > config.stop_s:
                break
            if self._warm_stats is None and now >= config.warmup_s:
                self._warm_stats = [slot.core.stats() for slot in self.engines]
            self.now_s = now
            while heap and heap[0][0] == now:
                _, kind, _, payload = pop(heap)
                if kind == _STEP_DONE:
                    self._step_done(payload, now)
                elif kind == _REJECTED:
                    self._call_finished(payload[0], payload[1], now, cached=0, rejected=True)
                elif kind == _WAIT_DONE:
                    self.waits.done(payload[0], payload[1], now)
                elif kind == _ARRIVAL:
                    self._arrive(payload, now)
                elif kind == _WAKE:  # a pin-blocked engine may run again
                    self.engines[payload].wake_s = math.inf
                else:  # _SCRAPE: fresh gauges, then the admission round below
                    self._scrape_pending = False
                    self._scrape(now)
            if self._released:
                self._submit_released(now)
            dispatchers = self.dispatchers
            if len(dispatchers) == 1:
                if self.dispatcher.queued():
                    self._admit(now, 0)
            else:
                first = batches % len(dispatchers)  # no replica always admits first
                for offset in range(len(dispatchers)):
                    replica = (first + offset) % len(dispatchers)
                    if dispatchers[replica].queued():
                        self._admit(now, replica)
            for slot in self.engines:
                if not slot.busy:
                    self._step(slot, now)
            if scrape_interval > 0:
                self._schedule_scrape(now, scrape_interval)
            batches += 1
            if progress is not None and batches % progress_every == 0:
                progress(now)
        self._finish_record()
        return self.record

    def _schedule_scrape(self, now: float, interval: float) -> None:
        """Keep the next scrape in the heap while anything else may still happen; drop it when
        it is all that is left and no call waits (the run is over: its end is the last real
        event, not a scrape)."""
        heap = self._heap
        if not self._scrape_pending:
            if heap:  # something else will happen: the controller goes on scraping
                self._scrapes = max(self._scrapes, math.floor(now / interval) + 1)
                self._scrape_pending = True
                self.push(self._scrapes * interval, _SCRAPE, None)
        elif len(heap) == 1 and not any(d.queued() for d in self.dispatchers):
            heap.pop()
            self._scrape_pending = False

    def _scrape(self, now: float) -> None:
        """A scrape of every engine's gauges (the served controller's probe loop); the run
        loop then admits, as the probe's ``on_change`` wakes the controller's dispatcher."""
        self._scrapes += 1
        for slot in self.engines:
            slot.scrape(now)

    # -- clients ------------------------------------------------------------------------------

    def _arrive(self, index: int, now: float) -> None:
        plan = self.plans[index]
        program = plan.program
        measured = program.arrival_s >= self.config.warmup_s
        run = ProgramRun(
            index,
            plan,
            ProgramTokens(plan, self.tokens, self._hash_block_size),
            oracle_costs(plan, self.cost),
            measured,
        )
        if self.balancer.by_program:
            run.replica = self.balancer.pick(program.program_id)
        self._live += 1
        tenant = "" if program.tenant is None else program.tenant
        self._live_by_tenant[tenant] = self._live_by_tenant.get(tenant, 0) + 1
        self.replica_of(run).on_program_start(run.key, now, name=program.kind)
        for node in plan.roots:
            self.release(run, node, now)

    def replica_of(self, run: ProgramRun) -> Dispatcher:
        """The replica that gets a program-level request of ``run`` (its start or end, a tool
        wait, a retention mark): its home replica when sharded by program, else the next in
        turn."""
        if run.replica >= 0:
            return self.dispatchers[run.replica]
        replica = self.balancer.pick(run.plan.program.program_id)
        run.replica_mask |= 1 << replica
        return self.dispatchers[replica]

    def release(self, run: ProgramRun, node: int, now: float) -> None:
        """All parents of ``node`` finished: send the call, or start the wait."""
        run.release_s[node] = now
        if run.plan.is_llm[node]:
            self._released.append((run.plan.program.program_id, node, run, node))
        else:
            self.waits.start(run, node, now)

    def node_finished(self, run: ProgramRun, node: int, now: float) -> None:
        """Record ``node``'s finish and release the children it completes."""
        run.finish_s[node] = now
        run.nodes_left -= 1
        missing = run.missing_parents
        for child in run.plan.children[node]:
            missing[child] -= 1
            if missing[child] == 0:
                self.release(run, child, now)
        if run.nodes_left == 0:
            self._program_end(run, now)

    def _program_end(self, run: ProgramRun, now: float) -> None:
        program = run.plan.program
        self.waits.program_end(run, now)
        self.replica_of(run).on_program_end(run.key, now)
        if run.replica_mask & (run.replica_mask - 1):  # more than one bit: split over replicas
            self.record.programs_on_several_replicas += 1
        self._live -= 1
        self._live_by_tenant["" if program.tenant is None else program.tenant] -= 1
        wait_s, exec_s, tool_s, think_s = critical_path(run)
        self.record.programs.append(
            ProgramRecord(
                program_id=program.program_id,
                kind=program.kind,
                arrival_s=program.arrival_s,
                finish_s=now,
                tenant=program.tenant,
                output_tokens=run.plan.total_output_tokens,
                calls=run.calls_finished,
                wait_s=wait_s,
                exec_s=exec_s,
                tool_s=tool_s,
                think_s=think_s,
                measured=run.measured,
                ttft_s=run.ttft_s,
                prompt_tokens=run.prompt_tokens,
                cached_tokens=run.cached_tokens,
                rejected_calls=run.rejected_calls,
                call_wait_s=run.call_wait_s,
                controller_wait_s=run.controller_wait_s,
            )
        )

    # -- controller ---------------------------------------------------------------------------

    def _submit_released(self, now: float) -> None:
        released = self._released
        released.sort(key=lambda item: (item[0], item[1]))
        dispatchers = self.dispatchers
        balancer = self.balancer
        replica_calls = self.record.replica_calls
        calls = self.calls
        for program_id, _, run, node in released:
            program = run.plan.program
            spec = program.nodes[node]
            assert isinstance(spec, LLMNode)
            key = run.key
            if program.rotate_call_ids:  # a client that gives every call a fresh program id
                key = ProgramKey.untagged(f"{program_id}#{spec.node_id}", program.tenant)
            prompt: list[int] = []
            output: list[int] = []
            hashes: tuple[int, ...] = ()
            engine_hashes: list[int] = []
            if self._hash_block_size is not None:  # the router needs the chain now
                prompt, output, hashes, engine_hashes = run.tokens.prompt_and_output(node)
            facts = CallFacts(
                call_id=f"{program_id}/{spec.node_id}",
                program=key,
                thread_id=spec.thread_id,
                node_id=spec.node_id,
                parent_ids=spec.parents,
                arrival_s=now,
                prompt_tokens=run.plan.prompt_len[node],
                block_hashes=hashes,
                block_tokens=self.config.engine.block_size,
            )
            retained = self.waits.on_call(run, spec.thread_id, now)
            self.oracle.figures[facts.call_id] = OracleFigures(
                run.oracle_s[node], run.oracle_remaining_s
            )
            # The balancer sees the call's own program id (a rotating client's fresh ids).
            replica = run.replica
            if replica < 0 or program.rotate_call_ids:
                replica = balancer.pick(key.program_id)
            run.replica_mask |= 1 << replica
            replica_calls[replica] += 1
            entry = dispatchers[replica].submit(facts, now, retained_backend=retained)
            call_run = calls[facts.call_id] = CallRun(entry, run, node, now)
            call_run.prompt, call_run.output = prompt, output
            call_run.engine_hashes = engine_hashes
            call_run.replica = replica
        released.clear()

    def _views(self, now: float, replica: int) -> list[BackendView]:
        """What ``replica`` sees of the engines: the scraped gauges (shared), its own calls
        in flight, and the batch size (its share of it under ``split_window``)."""
        interval = self.config.scrape_interval_s
        in_flight = self._replica_in_flight[replica]
        share = len(self.dispatchers) if self._split_window else 1
        views = []
        for slot in self.engines:
            if interval == 0:  # fresh gauges at every decision (above 0: at scrapes only)
                slot.scrape(now)
            views.append(
                BackendView(
                    backend_id=slot.backend_id,
                    in_flight=in_flight[slot.index],
                    num_running=slot.num_running,
                    num_waiting=slot.num_waiting,
                    kv_cache_usage=slot.kv_cache_usage,
                    supports_priority=slot.supports_priority,
                    metrics_at_s=slot.metrics_at_s,
                    max_num_seqs=max(1, slot.core.config.max_num_seqs // share),
                    kv_capacity_tokens=slot.core.num_blocks * slot.core.config.block_size,
                    cpu_kv_capacity_tokens=slot.cpu_tier_tokens,
                )
            )
        return views

    def _admit(self, now: float, replica: int) -> None:
        by_id = {slot.backend_id: slot for slot in self.engines}
        in_flight = self._replica_in_flight[replica]
        for admission in self.dispatchers[replica].admit(now, self._views(now, replica)):
            slot = by_id[admission.backend_id]
            call_id = admission.call.facts.call_id
            run = self.calls[call_id]
            program = run.program
            self.waits.call_admitted(program, admission.call.facts.thread_id, now)
            if not run.prompt:  # built lazily: queued calls hold no token lists
                run.prompt, run.output, _, run.engine_hashes = program.tokens.prompt_and_output(
                    run.node
                )
            run.engine = slot.index
            run.admitted_s = now
            slot.in_flight += 1
            in_flight[slot.index] += 1
            try:
                slot.core.add_request(
                    EngineRequest(
                        request_id=call_id,
                        prompt_token_ids=run.prompt,
                        output_token_ids=run.output,
                        arrival_s=run.arrival_s,
                        priority=admission.backend_priority or 0,
                        prompt_hashes=run.engine_hashes,
                    )
                )
            except InvalidRequest:  # longer than the engine accepts: the client gets an error
                program.rejected_calls += 1
                self.push(now, _REJECTED, (run, slot))  # handled at this instant, in order

    # -- engines ------------------------------------------------------------------------------

    def _step(self, slot: EngineSlot, now: float) -> None:
        core = slot.core
        if not core.has_unfinished():
            return
        heap = self._heap
        horizon = heap[0][0] - now if heap else math.inf
        result = core.step(now, max_steps=self.config.max_fused_steps, horizon_s=horizon)
        # Blocked by pinned memory: the retention driver's deadlock guard unpins, newest first.
        while result is None and self.waits.relieve(slot, now):
            result = core.step(now, max_steps=self.config.max_fused_steps, horizon_s=horizon)
        if result is None:  # blocked by pinned memory until a pin expires
            expiry = core.next_pin_expiry_s
            if expiry < slot.wake_s:
                slot.wake_s = expiry
                self.push(expiry, _WAKE, slot.index)
            return
        slot.busy = True
        self.push(now + result.duration_s, _STEP_DONE, (slot, result))

    def _step_done(self, payload: tuple[EngineSlot, StepResult], now: float) -> None:
        slot, result = payload
        slot.busy = False
        calls = self.calls
        duration = result.duration_s
        dispatchers = self.dispatchers
        finished: list[tuple[CallRun, int]] = []
        for item in result.progress:
            run = calls[item.request_id]
            run.exec_s += duration
            if not run.started:
                run.started = True
            if item.new_tokens:
                if item.first_token:
                    run.first_token_s = now
                dispatchers[run.replica].on_tokens(run.call, item.new_tokens, now)
                if item.finished:
                    finished.append((run, item.num_cached_tokens))
        if result.preempted:
            self.record.preempted_calls += len(result.preempted)
        for run, cached in finished:
            self._call_finished(run, slot, now, cached=cached)

    def _call_finished(
        self, run: CallRun, slot: EngineSlot, now: float, *, cached: int, rejected: bool = False
    ) -> None:
        program = run.program
        node = run.node
        spec = program.plan.program.nodes[node]
        assert isinstance(spec, LLMNode)
        prompt_len = program.plan.prompt_len[node]
        call_id = run.call.facts.call_id
        del self.calls[call_id]
        del self.oracle.figures[call_id]
        slot.in_flight -= 1
        self._replica_in_flight[run.replica][slot.index] -= 1
        service_s = 0.0 if rejected else self.cost(prompt_len - cached, spec.output_tokens)
        # The router's index learns the chain over prompt + output: what the next call extends.
        chain = program.tokens.finish_call(
            node, run.prompt, run.output, run.call.facts.block_hashes, run.engine_hashes
        )
        dispatcher = self.dispatchers[run.replica]
        dispatcher.on_finish(run.call, slot.backend_id, service_s, now, block_hashes=chain)
        tenant = program.plan.program.tenant
        if program.plan.program.rotate_call_ids:  # the call was its own one-call program
            dispatcher.on_program_end(run.call.facts.program, now)
        if self.config.warmup_s <= now < self.config.window_end_s:
            charged = self.record.tenant_service_s
            name = "" if tenant is None else tenant
            charged[name] = charged.get(name, 0.0) + service_s
        program.calls_finished += 1
        program.oracle_remaining_s -= program.oracle_s[node]
        program.thread_engine[spec.thread_id] = slot.index
        program.exec_s[node] = run.exec_s
        if not rejected:
            program.call_wait_s += now - run.arrival_s - run.exec_s
            program.controller_wait_s += run.admitted_s - run.arrival_s
            program.ttft_s.append(run.first_token_s - run.arrival_s)
            program.prompt_tokens += prompt_len
            program.cached_tokens += cached
        self.node_finished(program, node, now)

    # -- end ----------------------------------------------------------------------------------

    def _finish_record(self) -> None:
        record = self.record
        record.end_s = self.now_s
        record.unfinished_programs = self._live
        record.tenant_unfinished = {t: n for t, n in self._live_by_tenant.items() if n}
        record.engine_stats_start = self._warm_stats or [s.core.stats() for s in self.engines]
        record.engine_stats_end = [slot.core.stats() for slot in self.engines]
