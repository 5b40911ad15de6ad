"""Mutable per-run state of programs, calls and engines (private to the event loop).

Plain ``__slots__`` classes: the event loop touches them millions of times per simulated hour.
"""

from __future__ import annotations

from agentrt_controller.keys import ProgramKey
from agentrt_controller.scheduling.call import CallEntry
from agentrt_emulator.core.engine import EngineCore
from agentrt_sim.plan import ProgramPlan
from agentrt_sim.tokens import ProgramTokens

__all__ = ["CallRun", "EngineSlot", "ProgramRun"]


class ProgramRun:
    """One program being replayed."""

    __slots__ = (
        "cached_tokens",
        "call_wait_s",
        "calls_finished",
        "controller_wait_s",
        "exec_s",
        "finish_s",
        "index",
        "key",
        "measured",
        "missing_parents",
        "nodes_left",
        "oracle_remaining_s",
        "oracle_s",
        "plan",
        "prompt_tokens",
        "rejected_calls",
        "release_s",
        "replica",
        "replica_mask",
        "thread_engine",
        "tokens",
        "ttft_s",
    )

    def __init__(
        self,
        index: int,
        plan: ProgramPlan,
        tokens: ProgramTokens,
        oracle_s: list[float],
        measured: bool,
    ) -> None:
        self.index = index
        self.plan = plan
        self.tokens = tokens
        #: The program's key in the controller's process table, router and retention policy
        #: (built once here; its calls carry it).
        self.key = ProgramKey.untagged(plan.program.program_id, plan.program.tenant)
        #: The controller replica all its requests go to when sharded by program; -1 = none
        #: (sharded by call).
        self.replica = -1
        #: Bit r set: replica r got one of its requests.
        self.replica_mask = 0
        count = len(plan.program.nodes)
        #: Parents not finished yet, per node.
        self.missing_parents = list(plan.num_parents)
        self.nodes_left = count
        #: When each node was released / finished (seconds); -1 = not yet.
        self.release_s = [-1.0] * count
        self.finish_s = [-1.0] * count
        #: Engine time of each LLM call: sum of the durations of the steps it was in (seconds).
        self.exec_s = [0.0] * count
        self.oracle_s = oracle_s
        self.oracle_remaining_s = sum(oracle_s)
        self.calls_finished = 0
        #: Thread id -> index of the engine that served its last call.
        self.thread_engine: dict[str, int] = {}
        #: Whether the program counts in the metrics (arrived after the warm-up).
        self.measured = measured
        #: Per finished call: time to first token (seconds), cached and prompt tokens.
        self.ttft_s: list[float] = []
        self.cached_tokens = 0
        self.prompt_tokens = 0
        self.rejected_calls = 0
        #: Summed over finished calls: time from release to finish not spent in engine steps,
        #: and the part of it spent in the controller's queue (seconds).
        self.call_wait_s = 0.0
        self.controller_wait_s = 0.0


class CallRun:
    """One LLM call between its release and its finish."""

    __slots__ = (
        "admitted_s",
        "arrival_s",
        "call",
        "engine",
        "engine_hashes",
        "exec_s",
        "first_token_s",
        "node",
        "output",
        "program",
        "prompt",
        "replica",
        "started",
    )

    def __init__(self, call: CallEntry, program: ProgramRun, node: int, arrival_s: float) -> None:
        #: The dispatcher's entry for the call (the handle for its events).
        self.call = call
        self.program = program
        self.node = node
        self.arrival_s = arrival_s
        self.engine = -1
        #: When the controller admitted it to an engine (seconds); -1 = still queued.
        self.admitted_s = -1.0
        self.first_token_s = -1.0
        #: Sum of the durations of the engine steps the call was part of (seconds).
        self.exec_s = 0.0
        self.started = False
        #: The controller replica that queued and admitted it (and hears its tokens).
        self.replica = 0
        self.prompt: list[int] = []
        self.output: list[int] = []
        #: The engine chain of ``prompt`` (``EngineRequest.prompt_hashes``).
        self.engine_hashes: list[int] = []


class EngineSlot:
    """One simulated engine and the controller's bookkeeping about it."""

    __slots__ = (
        "backend_id",
        "busy",
        "core",
        "cpu_tier_tokens",
        "in_flight",
        "index",
        "kv_cache_usage",
        "metrics_at_s",
        "num_running",
        "num_waiting",
        "supports_priority",
        "wake_s",
    )

    def __init__(self, index: int, core: EngineCore) -> None:
        self.index = index
        self.backend_id = f"engine-{index}"
        self.core = core
        #: A step is in progress (its completion event is in the heap).
        self.busy = False
        #: Calls the controller admitted here that have not finished.
        self.in_flight = 0
        self.supports_priority = core.config.scheduling_policy == "priority"
        #: Tokens of KV its CPU tier holds (0 = no tier), as the engine would publish it.
        self.cpu_tier_tokens = core.stats().num_cpu_blocks * core.config.block_size
        #: Last scraped gauges (BackendView), and when (seconds); -inf = never.
        self.num_running = 0
        self.num_waiting = 0
        self.kv_cache_usage = 0.0
        self.metrics_at_s = -float("inf")
        #: A wake-up event for a pin-blocked engine is pending at this time; inf = none.
        self.wake_s = float("inf")

    def scrape(self, now: float) -> None:
        """Read the engine's gauges at ``now``, as the controller's scrape does."""
        core = self.core
        self.num_running = core.num_running
        self.num_waiting = core.num_waiting
        self.kv_cache_usage = 1.0 - core.num_free_blocks / core.num_blocks
        self.metrics_at_s = now
