"""A tiny step-level replay of chain programs through the real Scheduler objects (Fig. 2).

Autellix (arXiv 2502.13965) Fig. 2, as docs/scheduling.md ("Fig. 2") tells it: programs arrive
at t=0; an engine runs at most ``slots`` calls at once; a call's duration is a number of decode
steps (one token each); a program's next call is released when its previous call finishes;
calls released at the same time are submitted in program-name order. Service is charged in
decode steps (1 step = 1 s of service), so the queue boundaries of a :class:`SchedulerConfig`
read as steps here.

Two engine models:

* ``preemptive=False`` — the proxy's view: a call runs to completion once admitted (what the
  controller can do in front of vLLM).
* ``preemptive=True`` — the paper's engine: before every step, running calls are put back with
  ``requeue`` (keeping their place) and the scheduler picks again, so a demoted call (its
  quantum used up, counted by ``on_tokens``) can be overtaken. With one-token quanta and
  one-step queue boundaries (:func:`unit_config`) PLAS becomes program-level least attained
  service, preemptive at step granularity.

The waiting time of a call is ``finish - release - duration``. Pure and fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.api import Scheduler
from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.scheduling.srpt import OracleBook, OracleFigures

__all__ = [
    "FIG2_PROGRAMS",
    "ReplayResult",
    "fig2",
    "fig2_report",
    "replay_chains",
    "unit_config",
]

#: Fig. 2: four programs, durations of their calls in decode steps.
FIG2_PROGRAMS: Mapping[str, tuple[int, ...]] = {
    "A": (4, 3, 1, 1),
    "B": (3, 3, 4),
    "C": (1, 2),
    "D": (4,),
}


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """Outcome of :func:`replay_chains` (all times in steps)."""

    policy: str
    preemptive: bool
    #: Sum of the waiting time of every call.
    total_wait: int
    #: Waiting time per call, keyed ``<program><call number>`` (``A1``, ``A2``...).
    waits: dict[str, int]
    #: Finish time of each program.
    finish: dict[str, int]

    def to_json(self) -> dict[str, object]:
        return {
            "total_wait": self.total_wait,
            "preemptive": self.preemptive,
            "waits": {k: v for k, v in self.waits.items() if v},
            "program_finish": self.finish,
            "mean_program_latency": sum(self.finish.values()) / max(1, len(self.finish)),
        }


def unit_config(max_service_steps: int) -> SchedulerConfig:
    """One queue per step of service up to ``max_service_steps`` and one-token quanta."""
    bounds = tuple(float(i) for i in range(1, max_service_steps + 1))
    return SchedulerConfig(boundaries_s=bounds, quanta_tokens=(1,) * (len(bounds) + 1))


def replay_chains(
    programs: Mapping[str, Sequence[int]],
    scheduler: Scheduler,
    *,
    slots: int = 2,
    preemptive: bool = False,
    oracle: OracleBook | None = None,
) -> ReplayResult:
    """Run chain ``programs`` (name -> call durations in steps) through ``scheduler``.
    ``oracle``: the one ``scheduler`` was built with (SRPT), filled here; ``None`` = none."""
    oracle = oracle if oracle is not None else OracleBook()
    names = sorted(programs)
    keys = {p: ProgramKey.untagged(p) for p in names}
    remaining_work = {p: sum(programs[p]) for p in names}
    progress: dict[str, int] = {}
    released: dict[str, int] = {}
    waits: dict[str, int] = {}
    finish: dict[str, int] = {}
    running: list[CallEntry] = []
    #: call id -> the call's position in its program's chain.
    index_of: dict[str, int] = {}

    def release(program: str, index: int, now: int) -> None:
        duration = programs[program][index]
        call_id = f"{program}{index + 1}"
        facts = CallFacts(
            call_id=call_id,
            program=keys[program],
            node_id=call_id,
            arrival_s=float(now),
            max_tokens=duration,
        )
        oracle.figures[call_id] = OracleFigures(float(duration), float(remaining_work[program]))
        index_of[call_id] = index
        progress[call_id] = 0
        released[call_id] = now
        scheduler.submit(CallEntry(facts), float(now))

    now = 0
    for program in names:
        release(program, 0, now)
    while running or scheduler.queued():
        while len(running) < slots:
            call_or_none = scheduler.pop(float(now))
            if call_or_none is None:
                break
            running.append(call_or_none)
        if preemptive:
            running = _preempt(scheduler, running, remaining_work, float(now), oracle)
        now += 1
        done: list[CallEntry] = []
        for call in running:
            call_id, program = call.facts.call_id, call.facts.program.program_id
            progress[call_id] += 1
            remaining_work[program] -= 1
            scheduler.on_tokens(call, 1, float(now))
            if progress[call_id] == programs[program][index_of[call_id]]:
                done.append(call)
        running = [c for c in running if c not in done]
        for call in sorted(done, key=lambda c: c.facts.program.program_id):
            call_id, program = call.facts.call_id, call.facts.program.program_id
            duration = progress[call_id]
            scheduler.on_finish(call, float(duration), float(now))
            waits[call_id] = now - released[call_id] - duration
            index = index_of[call_id] + 1
            if index < len(programs[program]):
                release(program, index, now)
            else:
                finish[program] = now
                scheduler.on_program_end(call.facts.program, float(now))
    return ReplayResult(
        policy=scheduler.name,
        preemptive=preemptive,
        total_wait=sum(waits.values()),
        waits=waits,
        finish=finish,
    )


def _preempt(
    scheduler: Scheduler,
    running: list[CallEntry],
    remaining_work: Mapping[str, int],
    now_s: float,
    oracle: OracleBook,
) -> list[CallEntry]:
    """Engine-side preemption before a step: while the head of the queues is in a strictly
    better level than the worst running call, swap them (ties keep the running call, as a
    priority-scheduling engine does). Uses only ``pop`` and ``requeue``."""
    figures = oracle.figures
    for call in running:
        own = figures[call.facts.call_id].service_s
        remaining = float(remaining_work[call.facts.program.program_id])
        figures[call.facts.call_id] = OracleFigures(own, remaining)

    def rank(call: CallEntry) -> tuple[float, ...]:
        return _rank(scheduler, call, oracle)

    while running:
        candidate = scheduler.pop(now_s)
        if candidate is None:
            break
        worst = max(running, key=lambda c: (rank(c), c.seq))
        if rank(candidate) >= rank(worst):
            scheduler.requeue(candidate, now_s)
            break
        running.remove(worst)
        scheduler.requeue(worst, now_s)
        running.append(candidate)
    return running


def _rank(scheduler: Scheduler, call: CallEntry, oracle: OracleBook) -> tuple[float, ...]:
    # SRPT compares remaining work; every other policy compares queue levels.
    if scheduler.name == "srpt":
        figures = oracle(call.facts.call_id)
        remaining = figures.program_remaining_s if figures is not None else None
        return (remaining or 0.0,)
    return (float(call.level),)


def fig2(policy: str, *, preemptive: bool = False) -> ReplayResult:
    """Fig. 2 under ``policy`` (any :data:`~agentrt_controller.scheduling.factory.SCHEDULER_NAMES`).

    Non-preemptive runs use the default queues (docs/scheduling.md, boundaries read as steps);
    preemptive runs use :func:`unit_config` so that priorities move by single steps, as in the
    paper's engine.
    """
    longest = max(sum(d) for d in FIG2_PROGRAMS.values())
    config = (
        None if policy == "fcfs" else (unit_config(longest) if preemptive else SchedulerConfig())
    )
    oracle = OracleBook()
    scheduler = build_scheduler(policy, config, oracle=oracle)
    return replay_chains(FIG2_PROGRAMS, scheduler, slots=2, preemptive=preemptive, oracle=oracle)


def fig2_report(
    policies: Sequence[str] = ("fcfs", "mlfq", "plas", "atlas", "srpt"),
) -> dict[str, dict[str, object]]:
    """``{policy: {"total_wait": ..., ...}}`` for Fig. 2: ``total_wait`` is the proxy regime
    (no preemption, default queues); ``engine_preemptive`` holds the step-preemptive run."""
    report: dict[str, dict[str, object]] = {}
    for policy in policies:
        entry = fig2(policy).to_json()
        entry["engine_preemptive"] = fig2(policy, preemptive=True).to_json()
        report[policy] = entry
    return report
