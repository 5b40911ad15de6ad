"""Tool and think waits, and how the simulator realises retention decisions on its engines.

A wait start is reported to the dispatcher (``on_tool_wait_start``, with the tool's predicted
duration: the mean of that name's finished waits so far in this run, as the SDK predicts from
history) and to the retention policy. A positive TTL becomes ``dispatcher.set_retention`` (the
returning call goes to the engine that served the thread's last call, ahead of the scheduler's
order: docs/simulator.md) and, when the decision says ``pin``, a native pin on that engine holding
the prefix the thread's next call will extend. The pin is released when the thread's next
call is first scheduled on an engine, when it expires, or at program end.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from agentrt_controller.retention import RetentionPolicy, ToolWaitFacts
from agentrt_controller.scheduling.api import Call
from agentrt_sim.state import CallRun, EngineSlot, ProgramRun
from agentrt_sim.workloads.program import WaitNode

if TYPE_CHECKING:
    from agentrt_sim.sim import Simulation

__all__ = ["WaitHandler"]


class WaitHandler:
    """Wait events and retention pins for one :class:`~agentrt_sim.sim.Simulation`."""

    def __init__(self, sim: Simulation, retention: RetentionPolicy) -> None:
        self._sim = sim
        self.retention = retention
        #: Per wait name: (finished waits, their total duration in seconds).
        self._history: dict[str, tuple[int, float]] = {}
        #: Retention pins that were placed (count) and that held blocks (count).
        self.pins_placed = 0
        self.pinned_blocks = 0

    def _predict(self, name: str) -> float | None:
        count, total = self._history.get(name, (0, 0.0))
        return total / count if count else None

    def start(self, run: ProgramRun, node: int, now: float) -> None:
        """A wait node was released: report it, maybe retain, schedule its end."""
        sim = self._sim
        spec = run.plan.program.nodes[node]
        assert isinstance(spec, WaitNode)
        program_id = run.plan.program.program_id
        predicted = self._predict(spec.name)
        sim.replica_of(run).on_tool_wait_start(
            run.key,
            now,
            thread_id=spec.thread_id,
            node_id=spec.node_id,
            tool_name=spec.name,
            predicted_duration_s=predicted,
            kind="tool" if spec.kind == "tool" else "human",
        )
        engine = run.thread_engine.get(spec.thread_id)
        prefix = run.tokens.pin_prefix(node)
        slot = sim.engines[engine] if engine is not None else None
        decision = self.retention.on_wait_start(
            ToolWaitFacts(
                program=run.key,
                thread_id=spec.thread_id,
                node_id=spec.node_id,
                kind=spec.kind,
                name=spec.name,
                predicted_duration_s=predicted,
                context_tokens=len(prefix) if prefix is not None else 0,
                backend_id=slot.backend_id if slot is not None else None,
                kv_cache_usage=slot.kv_cache_usage if slot is not None else None,
                calls_finished=run.calls_finished,
                program_kind=run.plan.program.kind,
                kv_capacity_tokens=(
                    slot.core.num_blocks * slot.core.config.block_size if slot is not None else None
                ),
            ),
            now,
        )
        if decision.ttl_s > 0 and slot is not None and prefix is not None:
            pin_id = f"{program_id}/{spec.thread_id}"
            until = now + decision.ttl_s
            if decision.pin:
                self.pinned_blocks += slot.core.pin(
                    pin_id, prefix, cache_salt=None, ttl_s=decision.ttl_s, now_s=now
                )
                self.pins_placed += 1
            run.pins[spec.thread_id] = (slot.index, pin_id, until)
            sim.replica_of(run).set_retention(run.key, max(p[2] for p in run.pins.values()))
        sim.wait_ends_at(now + spec.duration_s, run, node)

    def done(self, run: ProgramRun, node: int, now: float) -> None:
        """A wait ended: report it, extend the program's context, release children."""
        sim = self._sim
        spec = run.plan.program.nodes[node]
        assert isinstance(spec, WaitNode)
        duration = now - run.release_s[node]
        count, total = self._history.get(spec.name, (0, 0.0))
        self._history[spec.name] = (count + 1, total + duration)
        sim.replica_of(run).on_tool_wait_end(
            run.key, now, thread_id=spec.thread_id, node_id=spec.node_id
        )
        self.retention.on_wait_end(run.key, spec.thread_id, spec.node_id, duration, now)
        run.tokens.finish_wait(node)
        sim.node_finished(run, node, now)

    def annotate(self, run: ProgramRun, call: Call, now: float) -> None:
        """Tag a released call whose thread is retained with the engine holding its KV."""
        self.retention.on_call_arrived(run.key, call.thread_id, now)
        pin = run.pins.get(call.thread_id)
        if pin is not None and pin[2] > now:
            call.retained_backend = self._sim.engines[pin[0]].backend_id

    def call_started(self, run: CallRun, slot: EngineSlot, now: float) -> None:
        """A call was scheduled on an engine for the first time: its thread's pin is done."""
        program = run.program
        if program.pins:
            pin = program.pins.pop(run.call.thread_id, None)
            if pin is not None:
                self._release(program, pin, now)

    def program_end(self, run: ProgramRun, now: float) -> None:
        """Release every pin of an ended program (a TTL never outlives its program)."""
        for pin in list(run.pins.values()):
            self._release(run, pin, now)
        run.pins.clear()
        self.retention.on_program_end(run.key, now)

    def _release(self, run: ProgramRun, pin: tuple[int, str, float], now: float) -> None:
        sim = self._sim
        sim.engines[pin[0]].core.unpin(pin[1])
        remaining = [p[2] for p in run.pins.values() if p[1] != pin[1]]
        until = max(remaining) if remaining else -math.inf
        sim.replica_of(run).set_retention(run.key, until if until > now else None)
