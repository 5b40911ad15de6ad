"""Peer-like configurations: what an operator would run instead of us, as simulator presets
(``benchmarks/agents.py``; docs/benchmarks.md, "Agents", says what each one models and what it
cannot).

Each preset follows its paper's rule as written, with the settings its authors recommend:

* ``direct`` — a stock vLLM behind a plain load balancer: engine FCFS with prefix caching,
  every call sent at once (no controller queue), round robin per call, no retention.
  ``direct+cpu`` adds the KV CPU tier (vLLM's ``--kv-offloading-size``; Continuum's LMCache
  baseline holds 100–200 GB of DRAM per GPU, arXiv 2511.02230).
* ``continuum`` — Continuum (arXiv 2511.02230): program-level FCFS inside the engine (each
  call carries its program's arrival rank as its vLLM priority, the engine runs ``priority``)
  and a TTL pin per tool wait by :class:`ContinuumRetention`; a program stays on its engine.
  Its engines have the KV CPU tier, as Continuum is evaluated (its rule prices ``reload(r)``
  "if CPU offloading enabled"; its baselines run LMCache's offload): what its TTL does not
  keep on the GPU is reloaded instead of recomputed.
* ``llm-d`` — llm-d's flow control with ``program-aware-fairness`` (least attained service
  over per-session queues, held in the gateway while the pods are saturated) and its session
  affinity: PLAS in the controller's queue, the adaptive admission window, ``autellix``
  routing (a program stays on the engine of its first call), no retention.
* ``thunderagent`` — ThunderAgent (arXiv 2602.13692): a program-aware queue in front of the
  engines (programs in progress before new ones: :class:`ProgramFcfsScheduler` behind the
  adaptive window), a program stays on its engine, and when memory thrashes the engine evicts
  the shortest context first (``EngineConfig.preemption_order = "shortest"``).
* ``defaults`` — ``agentrt controller serve`` with no flags (:mod:`agentrt_controller.defaults`).

Not in the default grid (:data:`EXTRA`; ``benchmarks/agents.py --configs`` names them):

* ``continuum-gpu`` — ``continuum`` on engines without the CPU tier (what its rule does on
  the same engines as ``direct`` and ``defaults``).
* ``program-fcfs+cpu`` — an ablation, not a product: the defaults (memory-aware admission, the
  adaptive window, ``prefix`` routing, retention on) with :class:`ProgramFcfsScheduler` in the
  controller's queue instead of PLAS, on engines with the CPU tier: Continuum's order in our
  controller (docs/benchmarks.md, "Agents: the CPU tier on one engine").
* ``oracle`` / ``oracle+cpu`` — a bound, not a product: the defaults with clairvoyant SRPT at
  program level (:class:`~agentrt_controller.scheduling.srpt.SrptScheduler`: the program with
  the least remaining service first, known from the simulator's plans) instead of PLAS,
  without / with the CPU tier. No scheduler that has to guess the remaining work orders
  programs better by mean JCT; what it cannot beat is the engines' capacity.

Policies are pure, as every policy here (docs/architecture.md, "Design rules"): no clock, no
I/O; ``now_s`` comes in.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from agentrt.errors import ConfigError
from agentrt_controller.cost_model import CostFunction, CostModel
from agentrt_controller.keys import ProgramKey
from agentrt_controller.policies import (
    PolicyConfig,
    build_admission,
    build_router,
    needs_block_hashes,
)
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.retention.api import RetentionDecision, WaitInfo
from agentrt_controller.scheduling.basic import FcfsScheduler
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.srpt import OracleBook
from agentrt_emulator.core.types import EngineConfig
from agentrt_sim.registry import PolicySpec, build_policies
from agentrt_sim.retention import NoRetention
from agentrt_sim.sim import Policies

__all__ = [
    "CPU_TIER_GIB",
    "EXTRA",
    "PEERS",
    "ContinuumRetention",
    "Peer",
    "ProgramFcfsScheduler",
    "peer",
]

#: KV CPU tier of ``direct+cpu`` (GiB per engine): the low end of the 100–200 GB of DRAM per
#: GPU Continuum gives its LMCache baseline, within every GPU profile's host memory.
CPU_TIER_GIB = 100.0


class ProgramFcfsScheduler(FcfsScheduler):
    """First come, first served **by program**: a call queues behind every call of programs
    that arrived before its own (Continuum's program-level FCFS, arXiv 2511.02230; in
    ThunderAgent, arXiv 2602.13692, programs in progress resume before new ones start).

    :meth:`backend_priority` is the program's arrival rank, so an engine running vLLM's
    ``priority`` policy orders (and preempts: the newest program goes first) by program too.
    """

    name = "program-fcfs"

    def __init__(self, table: ProcessTable | None = None) -> None:
        super().__init__(table)
        #: program -> (its first call's arrival time in seconds, its arrival rank).
        self._programs: dict[ProgramKey, tuple[float, int]] = {}
        self._ranks = 0

    def _program_of(self, call: CallEntry) -> tuple[float, int]:
        program = call.facts.program
        known = self._programs.get(program)
        if known is None:
            known = self._programs[program] = (call.facts.arrival_s, self._ranks)
            self._ranks += 1
        return known

    def submit(self, call: CallEntry, now_s: float) -> None:
        self.table.call_arrived(call.facts, now_s)
        call.seq = next(self._seq)
        call.enqueued_s = now_s
        call.level_entered_s = now_s
        heapq.heappush(self._heap, (self._program_of(call)[0], call.seq, call))

    def requeue(self, call: CallEntry, now_s: float) -> None:
        call.enqueued_s = now_s
        heapq.heappush(self._heap, (self._program_of(call)[0], call.seq, call))
        self.table.call_requeued(call.facts, now_s)

    def backend_priority(self, call: CallEntry) -> int:
        return self._program_of(call)[1]

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        self._programs.pop(program, None)
        super().on_program_end(program, now_s)


@dataclass(frozen=True, slots=True)
class ContinuumConfig:
    """Parameters of :class:`ContinuumRetention` (Continuum, arXiv 2511.02230, §4)."""

    #: ``T``: the recent queueing delay of an evicted request's next call (seconds): what a
    #: program loses by going back to the queue. Used when the wait's facts carry no
    #: ``queue_wait_s`` (``benchmarks/agents.py`` passes the mean per-call queueing delay a
    #: stock vLLM shows at the same load).
    queueing_delay_s: float = 0.0
    #: ``η``: how much of that delay a pin saves (the "memoryfulness" correlation), in [0, 1].
    eta: float = 1.0
    #: Seconds to bring one token of context back when the wait's facts carry no
    #: ``reload_s_per_token`` (a CPU tier's PCIe reload): recompute, the cost model's prefill
    #: seconds per token.
    reload_s_per_token: float = 1.0e-4
    #: Below this many samples of a tool, the TTL comes from every tool's durations together.
    min_tool_samples: int = 100
    #: Durations kept per tool (and overall), most recent first out.
    history_size: int = 1000

    def __post_init__(self) -> None:
        if not (self.queueing_delay_s >= 0 and math.isfinite(self.queueing_delay_s)):
            raise ConfigError(f"queueing_delay_s must be >= 0, got {self.queueing_delay_s!r}")
        if not 0 <= self.eta <= 1:
            raise ConfigError(f"eta must be in [0, 1], got {self.eta!r}")
        if not (self.reload_s_per_token >= 0 and math.isfinite(self.reload_s_per_token)):
            raise ConfigError(f"reload_s_per_token must be >= 0, got {self.reload_s_per_token!r}")
        if self.min_tool_samples < 1 or self.history_size < 1:
            raise ConfigError("min_tool_samples and history_size must be >= 1")


class ContinuumRetention:
    """Continuum's TTL rule (arXiv 2511.02230, §4): at a tool call, pin the program's KV for

        τ* = argmax_τ  P(τ, f) · (T·η + reload(r)) − τ

    where ``P(τ, f)`` is the empirical CDF of tool ``f``'s durations (every tool's together
    below :attr:`ContinuumConfig.min_tool_samples` samples of ``f``), ``T·η`` the queueing
    delay a pin saves (``T``: the facts' ``queue_wait_s``, else the configured one) and
    ``reload(r)`` the cost of bringing the context back (the facts' or the configured
    ``reload_s_per_token`` × context tokens). Pin for ``τ*`` when its value is positive; no
    pin before any duration was seen. The deadlock guard: no pin when the context would not
    fit beside what the engine already holds (usage + context ≥ capacity), which leaves the
    latest program unpinned when memory is full. A :class:`RetentionPolicy`; pure."""

    name = "continuum"

    def __init__(self, config: ContinuumConfig | None = None) -> None:
        self.config = config = config or ContinuumConfig()
        #: tool name -> durations (seconds), sorted, and their arrival order for trimming.
        self._sorted: dict[str, list[float]] = {}
        self._order: dict[str, deque[float]] = {}
        #: program -> (thread, node) -> tool name, for waits not ended yet.
        self._open: dict[ProgramKey, dict[tuple[str, str], str]] = {}
        #: Decisions so far by reason.
        self.decisions: dict[str, int] = {}

    def ttl_for(self, samples: list[float], benefit_s: float) -> tuple[float, float]:
        """(τ*, P(τ*)) over sorted ``samples``: the CDF jumps at each sample, so the best τ
        is one of them (just after it the value only falls)."""
        best, best_value, best_p = 0.0, 0.0, 0.0
        count = len(samples)
        for index, tau in enumerate(samples):
            if index + 1 < count and samples[index + 1] == tau:
                continue  # the CDF's value at tau counts every equal sample
            p = (index + 1) / count
            value = p * benefit_s - tau
            if value > best_value:
                best, best_value, best_p = tau, value, p
        return best, best_p

    def on_wait_start(self, facts: WaitInfo, now_s: float) -> RetentionDecision:
        self._open.setdefault(facts.program, {})[(facts.thread_id, facts.node_id)] = facts.name
        decision = self._decide(facts)
        self.decisions[decision.reason] = self.decisions.get(decision.reason, 0) + 1
        return decision

    def _decide(self, facts: WaitInfo) -> RetentionDecision:
        config = self.config
        samples = self._sorted.get(facts.name, [])
        if len(samples) < config.min_tool_samples:
            samples = self._sorted.get("", [])
        if not samples:
            return RetentionDecision(reason="no_history")
        context = facts.context_tokens
        capacity = getattr(facts, "kv_capacity_tokens", None)
        usage = facts.kv_cache_usage
        if capacity and usage is not None and usage + context / capacity >= 1.0:
            return RetentionDecision(reason="memory_full")
        # T and reload(r) from the wait's facts where the driver knows them (the backend's
        # recent queueing delay, its CPU tier's reload speed), else from the configuration
        queue_wait_s = getattr(facts, "queue_wait_s", None)
        delay_s = config.queueing_delay_s if queue_wait_s is None else queue_wait_s
        reload_s = getattr(facts, "reload_s_per_token", None)
        per_token_s = config.reload_s_per_token if reload_s is None else reload_s
        benefit_s = delay_s * config.eta + per_token_s * context
        tau, p = self.ttl_for(samples, benefit_s)
        if tau <= 0:
            return RetentionDecision(reason="not_worth_it")
        return RetentionDecision(
            ttl_s=tau,
            pin=True,
            reason="pin",
            p_return_in_ttl=p,
            expected_benefit_s=p * benefit_s,
            expected_cost_s=tau,
        )

    def on_wait_end(
        self, program: ProgramKey, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        waits = self._open.get(program)
        name = waits.pop((thread_id, node_id), None) if waits else None
        if name is None:
            return
        for key in (name, ""):  # "" = every tool together
            self._record(key, duration_s)

    def _record(self, key: str, duration_s: float) -> None:
        ordered = self._sorted.setdefault(key, [])
        order = self._order.setdefault(key, deque())
        if len(order) >= self.config.history_size:
            oldest = order.popleft()
            del ordered[bisect.bisect_left(ordered, oldest)]
        order.append(duration_s)
        bisect.insort(ordered, duration_s)

    def on_call_arrived(self, program: ProgramKey, thread_id: str, now_s: float) -> None:
        return None

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        self._open.pop(program, None)


@dataclass(frozen=True)
class Peer:
    """One configuration of ``benchmarks/agents.py``: its engines and its controller."""

    name: str
    #: What it models, in a line (docs/benchmarks.md).
    summary: str
    #: The ``agentrt bench sim`` flags that give the same run, or where none exist, what the
    #: preset builds instead.
    flags: str
    #: Engine settings over the run's ``EngineConfig`` (field -> value).
    engine: Mapping[str, object]
    #: ``(cost model, cost function, T) -> Policies``: fresh policy objects for one run; ``T``
    #: is the queueing delay estimate Continuum's rule reads (seconds).
    build: Callable[[CostModel, CostFunction | None, float], Policies]

    def engine_config(self, base: EngineConfig) -> EngineConfig:
        """``base`` with this configuration's engine settings."""
        return replace(base, **self.engine)  # type: ignore[arg-type]


def _from_spec(spec: PolicySpec) -> Callable[[CostModel, CostFunction | None, float], Policies]:
    def build(cost: CostModel, charge: CostFunction | None, queueing_delay_s: float) -> Policies:
        return build_policies(spec, charge)

    return build


def _custom(
    scheduler: Callable[[], FcfsScheduler],
    *,
    router: str,
    window: int | str | None,
    continuum: bool,
) -> Callable[[CostModel, CostFunction | None, float], Policies]:
    def build(cost: CostModel, charge: CostFunction | None, queueing_delay_s: float) -> Policies:
        config = PolicyConfig(router=router, admission_window=window, cost=cost)  # type: ignore[arg-type]
        dispatcher = Dispatcher(scheduler(), build_router(config), build_admission(config))
        retention = (
            ContinuumRetention(
                ContinuumConfig(
                    queueing_delay_s=queueing_delay_s,
                    reload_s_per_token=cost.prefill_s_per_token,
                )
            )
            if continuum
            else NoRetention()
        )
        return Policies(
            dispatcher=dispatcher,
            retention=retention,
            cost_model=charge,
            block_hashes=needs_block_hashes(dispatcher.router),
            oracle=OracleBook(),
        )

    return build


def _defaults_with(
    scheduler: Callable[[], FcfsScheduler],
) -> Callable[[CostModel, CostFunction | None, float], Policies]:
    """The defaults' policies with ``scheduler`` in the controller's queue (the router, the
    admission window, the memory rule and retention as built for the defaults)."""

    def build(cost: CostModel, charge: CostFunction | None, queueing_delay_s: float) -> Policies:
        policies = build_policies(PolicySpec(), charge)
        built = policies.dispatcher
        policies.dispatcher = Dispatcher(
            scheduler(), built.router, built.admission, memory=built.memory
        )
        return policies

    return build


_DIRECT = PolicySpec("fcfs", "round_robin", "off", None)

#: Every configuration by name, in the order the benchmark reports them.
PEERS: Mapping[str, Peer] = {
    p.name: p
    for p in (
        Peer(
            "direct",
            "stock vLLM: FCFS, prefix caching, every call sent at once, round robin",
            "--policy fcfs --router round_robin --retention off --admission-window unlimited",
            {},
            _from_spec(_DIRECT),
        ),
        Peer(
            "direct+cpu",
            f"stock vLLM with the KV CPU tier ({CPU_TIER_GIB:g} GiB per engine)",
            "--policy fcfs --router round_robin --retention off --admission-window unlimited "
            f"--kv-offloading-size {CPU_TIER_GIB:g}",
            {"kv_offloading_size": CPU_TIER_GIB},
            _from_spec(_DIRECT),
        ),
        Peer(
            "continuum",
            "Continuum: program FCFS in the engine, a TTL pin per tool wait (its rule), "
            f"the KV CPU tier ({CPU_TIER_GIB:g} GiB per engine) as in its evaluation",
            "--engine-policy priority --router autellix --admission-window unlimited "
            f"--kv-offloading-size {CPU_TIER_GIB:g}; scheduler ProgramFcfsScheduler, retention "
            "ContinuumRetention (no flag: agentrt_sim/peers.py)",
            {"scheduling_policy": "priority", "kv_offloading_size": CPU_TIER_GIB},
            _custom(ProgramFcfsScheduler, router="autellix", window=None, continuum=True),
        ),
        Peer(
            "llm-d",
            "llm-d: least attained service per program in the gateway, session affinity",
            "--policy plas --router autellix --retention off --admission-window adaptive; "
            "memory-aware admission off (ours, not llm-d's: agentrt_sim/peers.py)",
            {},
            _from_spec(
                PolicySpec(
                    "plas", "autellix", "off", "adaptive", memory_admission={"enabled": False}
                )
            ),
        ),
        Peer(
            "thunderagent",
            "ThunderAgent: program-aware queue, programs kept on their engine, shortest-first "
            "eviction",
            "--router autellix --retention off --admission-window adaptive "
            "--preemption-order shortest; scheduler ProgramFcfsScheduler (no flag: "
            "agentrt_sim/peers.py)",
            {"preemption_order": "shortest"},
            _custom(ProgramFcfsScheduler, router="autellix", window="adaptive", continuum=False),
        ),
        Peer(
            "defaults",
            "the product defaults: agentrt controller serve with no flags",
            "(none)",
            {},
            _from_spec(PolicySpec()),
        ),
        Peer(
            "defaults+cpu",
            f"the product defaults in front of engines with the KV CPU tier ({CPU_TIER_GIB:g} GiB "
            "per engine): what to compare with direct+cpu and continuum",
            f"(no controller flag) --kv-offloading-size {CPU_TIER_GIB:g}",
            {"kv_offloading_size": CPU_TIER_GIB},
            _from_spec(PolicySpec()),
        ),
    )
}


_CPU = {"kv_offloading_size": CPU_TIER_GIB}

#: Configurations outside the default grid: a peer-like on other engines and the bounds
#: (module docstring).
EXTRA: Mapping[str, Peer] = {
    p.name: p
    for p in (
        Peer(
            "continuum-gpu",
            "Continuum as `continuum`, on engines without the KV CPU tier",
            "--engine-policy priority --router autellix --admission-window unlimited; "
            "scheduler ProgramFcfsScheduler, retention ContinuumRetention "
            "(no flag: agentrt_sim/peers.py)",
            {"scheduling_policy": "priority"},
            _custom(ProgramFcfsScheduler, router="autellix", window=None, continuum=True),
        ),
        Peer(
            "gittins",
            "the defaults with the program-level Gittins index (learned sizes) instead of PLAS",
            "--policy gittins",
            {},
            _from_spec(PolicySpec(policy="gittins")),
        ),
        Peer(
            "gittins+cpu",
            f"`gittins` on engines with the KV CPU tier ({CPU_TIER_GIB:g} GiB per engine)",
            f"--policy gittins --kv-offloading-size {CPU_TIER_GIB:g}",
            _CPU,
            _from_spec(PolicySpec(policy="gittins")),
        ),
        Peer(
            "program-fcfs+cpu",
            "an ablation: the defaults with Continuum's program FCFS in the controller's queue "
            f"instead of PLAS, on engines with the KV CPU tier ({CPU_TIER_GIB:g} GiB per engine)",
            f"--kv-offloading-size {CPU_TIER_GIB:g}; scheduler ProgramFcfsScheduler "
            "(no flag: agentrt_sim/peers.py)",
            _CPU,
            _defaults_with(ProgramFcfsScheduler),
        ),
        Peer(
            "oracle",
            "a bound: the defaults with clairvoyant program SRPT instead of PLAS",
            "--policy srpt (simulator only: it reads the plans' remaining service)",
            {},
            _from_spec(PolicySpec(policy="srpt")),
        ),
        Peer(
            "oracle+cpu",
            f"a bound: `oracle` on engines with the KV CPU tier ({CPU_TIER_GIB:g} GiB per engine)",
            f"--policy srpt --kv-offloading-size {CPU_TIER_GIB:g} (simulator only)",
            _CPU,
            _from_spec(PolicySpec(policy="srpt")),
        ),
    )
}


def peer(name: str) -> Peer:
    """The :data:`PEERS` or :data:`EXTRA` entry ``name``; :class:`ConfigError` naming the
    valid ones."""
    found = PEERS.get(name) or EXTRA.get(name)
    if found is None:
        valid = ", ".join([*PEERS, *EXTRA])
        raise ConfigError(f"unknown configuration {name!r}; valid: {valid}")
    return found
