"""Tool and think waits, and the simulator's executor of the controller's retention driver.

A wait start is reported to the dispatcher (``on_tool_wait_start``, with the tool's predicted
duration: what the SDK's one predictor, :class:`agentrt.tools.durations.DurationHistory`,
says from that name's finished waits so far in this run — the median of the recent ones) and
to the controller's own
:class:`~agentrt_controller.retention.driver.RetentionDriver` — the object the controller
service drives (docs/routing.md, "KV retention"). This module only carries out what it returns,
on the engine cores: a ``pin`` holds the prefix the thread's next call extends
(``EngineCore.pin``, the driver's pin id), an ``unpin`` releases it. The simulated engines have
native pins, so the driver never asks them for a re-warm. The release points are therefore the
controller's: the thread's next call *admitted*, the TTL's end (the engine expires its pin; the
window ends), the program's end. Windows go to the dispatcher(s) that hold the program.

The facts the driver's policy weighs an eviction with come from the engines exactly: the KV CPU
tier (its size and ``kv_bytes_per_token / pcie_bytes_per_s``), and the recent queueing delay on
each engine (:class:`~agentrt_controller.retention.recent.RecentMeans`, fed at each wait's start
with the program's calls finished since its last wait: the time they spent neither in engine
steps nor in a tool — controller queue, engine queue, preempted). When an engine cannot run
because pinned memory leaves no room for any waiting request, the simulation asks
:meth:`WaitHandler.relieve`: the driver's deadlock guard unpins the most recent pin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentrt.tools.durations import DurationHistory
from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention import RetentionPolicy
from agentrt_controller.retention.driver import (
    BackendTraits,
    RetentionAction,
    RetentionDriver,
    ThreadContext,
    ToolWait,
)
from agentrt_controller.retention.recent import RecentMeans
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_sim.state import EngineSlot, ProgramRun
from agentrt_sim.workloads.program import WaitNode

__all__ = ["WaitHandler"]

#: ``(program, wait node, now_s)``: what the simulation does next for a wait node.
NodeHook = Callable[[ProgramRun, int, float], None]


class WaitHandler:
    """Wait events, and retention on the engines, for one simulation.

    It gets what it needs of the simulation as callables (no reference back to it):
    ``replica_of`` (the dispatcher receiving a program-level event), ``wait_ends_at`` (schedule
    a wait's end: ``(time_s, run, node)``) and ``node_finished``.
    """

    def __init__(
        self,
        engines: Sequence[EngineSlot],
        retention: RetentionPolicy,
        *,
        dispatchers: Sequence[Dispatcher],
        replica_of: Callable[[ProgramRun], Dispatcher],
        wait_ends_at: Callable[[float, ProgramRun, int], None],
        node_finished: NodeHook,
    ) -> None:
        self._slots = list(engines)
        self._engines = {slot.backend_id: slot for slot in engines}
        self._dispatchers = dispatchers
        self._replica_of = replica_of
        self._wait_ends_at = wait_ends_at
        self._node_finished = node_finished
        self.retention = retention
        self.driver = RetentionDriver(retention, self._traits, self._set_window)
        #: Programs that waited and have not ended (the driver names programs by key).
        self._runs: dict[ProgramKey, ProgramRun] = {}
        #: Finished waits per name: the SDK's own predictor (the median of the recent ones).
        self._history = DurationHistory()
        #: Retention pins that were placed (count) and the blocks they held (summed), and the
        #: unpins carried out (count).
        self.pins_placed = 0
        self.pinned_blocks = 0
        self.unpins = 0
        #: Recent queueing delay per engine, and per program what it had seen of its own calls
        #: (summed wait, calls finished) at its last wait's start.
        self._queue_waits = RecentMeans()
        self._seen: dict[ProgramKey, tuple[float, int]] = {}
        #: Per engine: the CPU tier (tokens) and its reload cost (seconds per token); fixed.
        self._tiers: dict[str, tuple[int, float | None]] = {}
        for slot in engines:
            core = slot.core
            tier_blocks = core.stats().num_cpu_blocks
            hardware = core.profile
            reload = (
                hardware.kv_bytes_per_token / hardware.pcie_bytes_per_s
                if tier_blocks and hardware.kv_bytes_per_token
                else 0.0
            )
            self._tiers[slot.backend_id] = (
                tier_blocks * core.config.block_size,
                reload if tier_blocks else None,
            )

    def start(self, run: ProgramRun, node: int, now: float) -> None:
        """A wait node was released: report it, maybe retain, schedule its end."""
        spec = run.plan.program.nodes[node]
        assert isinstance(spec, WaitNode)
        predicted = self._history.predict(spec.name)
        self._replica_of(run).on_tool_wait_start(
            run.key,
            now,
            thread_id=spec.thread_id,
            node_id=spec.node_id,
            tool_name=spec.name,
            predicted_duration_s=predicted,
            kind="tool" if spec.kind == "tool" else "human",
        )
        self._runs[run.key] = run
        engine = run.thread_engine.get(spec.thread_id)
        self._observe_queue_wait(run, engine)
        prefix = run.tokens.pin_prefix(node)
        # The simulator knows the exact prefix the thread's next call extends (the driver's
        # on_finish would only know the last call's).
        context = (
            ThreadContext(
                self._slots[engine].backend_id,
                len(prefix) if prefix is not None else 0,
                payload=prefix,
            )
            if engine is not None
            else None
        )
        wait = ToolWait(
            program=run.key,
            thread_id=spec.thread_id,
            node_id=spec.node_id,
            kind=spec.kind,
            name=spec.name,
            predicted_duration_s=predicted,
            program_kind=run.plan.program.kind,
            calls_finished=run.calls_finished,
        )
        self._carry_out(self.driver.on_tool_start(wait, now, context=context), now)
        self._wait_ends_at(now + spec.duration_s, run, node)

    def done(self, run: ProgramRun, node: int, now: float) -> None:
        """A wait ended: report it, extend the program's context, release children."""
        spec = run.plan.program.nodes[node]
        assert isinstance(spec, WaitNode)
        duration = now - run.release_s[node]
        self._history.record(spec.name, duration)
        self._replica_of(run).on_tool_wait_end(
            run.key, now, thread_id=spec.thread_id, node_id=spec.node_id
        )
        self.driver.on_tool_end(run.key, spec.thread_id, spec.node_id, duration, now)
        run.tokens.finish_wait(node)
        self._node_finished(run, node, now)

    def on_call(self, run: ProgramRun, thread_id: str, now: float) -> str | None:
        """A released call of ``thread_id``: the engine holding its retained KV, or ``None``."""
        backend, actions = self.driver.on_return(run.key, thread_id, now)
        self._carry_out(actions, now)
        return backend

    def call_admitted(self, run: ProgramRun, thread_id: str, now: float) -> None:
        """A call of ``thread_id`` left the controller's queues: its thread's pin is done."""
        self._carry_out(self.driver.on_admitted(run.key, thread_id, now), now)

    def program_end(self, run: ProgramRun, now: float) -> None:
        """Release every pin of an ended program (a TTL never outlives its program)."""
        self._carry_out(self.driver.on_program_end(run.key, now), now)
        self._runs.pop(run.key, None)
        self._seen.pop(run.key, None)

    def relieve(self, slot: EngineSlot, now: float) -> bool:
        """``slot``'s engine cannot run: pins leave no room for its waiting requests. The
        driver's deadlock guard releases its most recent pin; False when it holds none."""
        actions = self.driver.relieve(slot.backend_id, now)
        self._carry_out(actions, now)
        return bool(actions)

    # --- the executor ----------------------------------------------------------------------

    def _carry_out(self, actions: list[RetentionAction], now: float) -> None:
        for action in actions:
            core = self._engines[action.backend_id].core
            retention = action.retention
            if action.kind == "pin":
                prefix = retention.payload
                assert isinstance(prefix, list)
                self.pinned_blocks += core.pin(
                    action.pin_id,
                    prefix,
                    cache_salt=None,
                    ttl_s=retention.until_s - now,
                    now_s=now,
                )
                self.pins_placed += 1
            elif action.kind == "unpin":
                core.unpin(action.pin_id)
                self.unpins += 1
            # "rewarm" is asked only of backends without pins; every simulated engine pins.

    def _observe_queue_wait(self, run: ProgramRun, engine: int | None) -> None:
        """The program's calls finished since its last wait: their mean queueing delay, one
        observation of the engine that served the last one."""
        seen_wait, seen_calls = self._seen.get(run.key, (0.0, 0))
        self._seen[run.key] = (run.call_wait_s, run.calls_finished)
        calls = run.calls_finished - seen_calls
        if engine is not None and calls > 0:
            mean = (run.call_wait_s - seen_wait) / calls
            self._queue_waits.observe(self._slots[engine].backend_id, mean)

    def _traits(self, backend_id: str) -> BackendTraits | None:
        slot = self._engines.get(backend_id)
        if slot is None:
            return None
        core = slot.core
        tier_tokens, reload = self._tiers[backend_id]
        # No running / waiting gauges: the simulation calls relieve() when an engine is
        # blocked, which it knows exactly.
        return BackendTraits(
            healthy=True,
            kv_cache_usage=slot.kv_cache_usage,
            in_flight=slot.in_flight,
            pins=True,
            kv_capacity_tokens=core.num_blocks * core.config.block_size,
            reload_s_per_token=reload,
            cpu_kv_capacity_tokens=tier_tokens,
            queue_wait_s=self._queue_waits.get(backend_id),
        )

    def _set_window(self, program: ProgramKey, until_s: float | None) -> None:
        run = self._runs.get(program)
        if run is None:
            return
        if run.replica >= 0:
            self._dispatchers[run.replica].set_retention(program, until_s)
            return
        # Sharded by call: every replica that holds the program's calls (no balancer pick).
        for replica, dispatcher in enumerate(self._dispatchers):
            if run.replica_mask >> replica & 1:
                dispatcher.set_retention(program, until_s)
