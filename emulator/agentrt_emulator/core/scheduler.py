"""The scheduler state and one engine iteration (the hot path of the engine model).

See :mod:`agentrt_emulator.core.engine` for the semantics; this module holds the mutable state
(running list, waiting queue, block pool, counters) and the step itself, kept in a few long
functions on purpose: it runs millions of times in the simulator, and local-variable access
is the cheapest thing Python has.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrt.errors import ConfigError
from agentrt_emulator.core.fusion import plan_fused_decode, run_fused_decode
from agentrt_emulator.core.kv_cache import BlockPool, extend_hashes
from agentrt_emulator.core.profiles import step_time_s
from agentrt_emulator.core.queues import RequestState, WaitingQueue
from agentrt_emulator.core.types import EngineConfig, RequestProgress, StepResult
from agentrt_serving.hardware import HardwareProfile

__all__ = ["Counters", "Scheduler"]


@dataclass(slots=True)
class Counters:
    """Monotonic counters, named and defined as the :class:`EngineStats` fields."""

    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    num_preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    recomputed_prompt_tokens: int = 0
    evicted_prefix_tokens: int = 0
    num_steps: int = 0
    cpu_cache_queries: int = 0
    reloaded_tokens: int = 0
    reload_s: float = 0.0


class Scheduler:
    """Running list, waiting queue and block pool of one engine, and the step over them."""

    __slots__ = (
        "block_size",
        "caching",
        "counters",
        "fcfs",
        "max_num_batched_tokens",
        "max_num_seqs",
        "pool",
        "profile",
        "reload_s_per_token",
        "requests",
        "running",
        "shortest_first",
        "step_reloaded",
        "waiting",
    )

    def __init__(self, config: EngineConfig, profile: HardwareProfile, pool: BlockPool) -> None:
        self.profile = profile
        self.pool = pool
        self.block_size = config.block_size
        self.caching = config.enable_prefix_caching
        self.fcfs = config.scheduling_policy == "fcfs"
        if config.preemption_order not in ("newest", "shortest"):
            raise ConfigError(
                f"preemption_order must be 'newest' or 'shortest', got {config.preemption_order!r}"
            )
        self.shortest_first = config.preemption_order == "shortest"
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        #: Admitted requests in admission order (vLLM ``running``).
        self.running: list[RequestState] = []
        self.waiting = WaitingQueue(config.scheduling_policy)
        #: Every unfinished request by id (running or waiting).
        self.requests: dict[str, RequestState] = {}
        self.counters = Counters()
        #: Seconds to copy one token's KV from the CPU tier over PCIe.
        self.reload_s_per_token = (
            profile.kv_bytes_per_token / profile.pcie_bytes_per_s
            if profile.kv_bytes_per_token
            else 0.0
        )
        #: Tokens reloaded from the CPU tier by the step being built.
        self.step_reloaded = 0

    def try_fused(
        self, max_steps: int, horizon_s: float, now_s: float, next_pin_expiry_s: float
    ) -> StepResult | None:
        """Up to ``max_steps`` fused pure-decode steps, or None when fusion does not apply."""
        running = self.running
        if (
            self.waiting
            and len(running) < self.max_num_seqs
            and len(running) < self.max_num_batched_tokens
        ):
            return None  # a waiting request might be admitted by one of the steps
        plan = plan_fused_decode(
            running,
            self.pool.num_free,
            self.block_size,
            self.max_num_batched_tokens,
            self.profile,
            max_steps,
            horizon_s,
            now_s,
            next_pin_expiry_s,
        )
        if plan is None:
            return None
        return self.run_fused(*plan)

    def run_fused(self, num_steps: int, duration_s: float) -> StepResult:
        """Apply a plan of :func:`plan_fused_decode`."""
        progress, finished = run_fused_decode(
            self.running, self.pool, self.block_size, self.caching, num_steps
        )
        self.counters.generation_tokens += num_steps * len(progress)
        self.counters.num_steps += num_steps
        if finished:
            self.drop_finished(finished)
        return StepResult(duration_s, num_steps, progress, [])

    def drop_finished(self, finished: list[RequestState]) -> None:
        """Free the blocks of finished requests and forget them."""
        requests = self.requests
        release = self.pool.release
        for req in finished:
            release(req.blocks)
            req.blocks = []
            del requests[req.request_id]
        self.running = [r for r in self.running if r.request_id in requests]

    def step_once(self) -> StepResult | None:
        """One engine iteration (see the engine module docstring); None if nothing ran."""
        pool = self.pool
        free = pool.free
        bs = self.block_size
        caching = self.caching
        running = self.running
        budget = self.max_num_batched_tokens
        sched: list[RequestState] = []
        sched_n: list[int] = []
        preempted: list[RequestState] = []
        self.step_reloaded = 0

        # 1. running requests (decodes and unfinished prefills), in admission order
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            c = req.num_computed
            n = req.num_tokens - c
            if n > budget:
                n = budget
            end = c + n
            if end > len(req.blocks) * bs:
                need = (end + bs - 1) // bs - len(req.blocks)
                if need > len(free):
                    i = self._preempt_until_fits(req, need, i, sched, sched_n, preempted)
                    if i < 0:
                        break  # the request preempted itself
                    # unscheduled victims give their tokens back; n and need stay as computed
                    budget = self.max_num_batched_tokens - sum(sched_n)
                pool.allocate(req.blocks, need)
            if caching and end // bs > req.num_cached_blocks:
                req.cache_full_blocks(pool, bs, end // bs)
            sched.append(req)
            sched_n.append(n)
            budget -= n
            i += 1

        # 2. waiting requests, only when nobody was preempted (vLLM)
        if not preempted and budget > 0 and self.waiting:
            budget = self._admit_waiting(budget, sched, sched_n)

        if not sched:
            if preempted:
                return StepResult(0.0, 0, [], [r.request_id for r in preempted])
            return None

        # 3. run the batch
        prefill_tokens = 0
        decode_seqs = 0
        kv_tokens = 0
        progress: list[RequestProgress] = []
        emit = progress.append
        new_progress = RequestProgress
        finished: list[RequestState] = []
        sampled = 0
        for req, n in zip(sched, sched_n, strict=True):
            c = req.num_computed
            num_tokens = req.num_tokens
            if n == 1 and c == num_tokens - 1:
                decode_seqs += 1
            else:
                prefill_tokens += n
            if req.high_water > c:
                self.counters.recomputed_prompt_tokens += min(c + n, req.high_water) - c
            c += n
            req.num_computed = c
            kv_tokens += c
            if c == num_tokens:
                sampled += 1
                g = req.num_output + 1
                req.num_output = g
                req.num_tokens = num_tokens + 1
                if g == 1:
                    self.counters.prompt_tokens += req.prompt_len
                done = g == req.output_len
                emit(new_progress(req.request_id, 1, g == 1, done, req.num_cached_tokens, n))
                if done:
                    finished.append(req)
            else:
                emit(new_progress(req.request_id, 0, False, False, req.num_cached_tokens, n))
        self.counters.generation_tokens += sampled
        self.counters.num_steps += 1
        if finished:
            self.drop_finished(finished)
        duration_s = step_time_s(self.profile, prefill_tokens, decode_seqs, kv_tokens)
        if self.step_reloaded:
            # the reload precedes the forward pass that reads it: not overlapped
            reload_s = self.step_reloaded * self.reload_s_per_token
            self.counters.reload_s += reload_s
            duration_s += reload_s
        return StepResult(duration_s, 1, progress, [r.request_id for r in preempted])

    def _preempt_until_fits(
        self,
        req: RequestState,
        need: int,
        i: int,
        sched: list[RequestState],
        sched_n: list[int],
        preempted: list[RequestState],
    ) -> int:
        """Preempt running requests until ``need`` blocks are free; returns the new index of
        ``req`` in the running list, or -1 when ``req`` itself was preempted."""
        running = self.running
        pool = self.pool
        while need > pool.num_free:
            victim_index = self._victim_index(running)
            victim = running.pop(victim_index)
            if victim_index < i:  # already scheduled this step: unschedule it
                i -= 1
                j = sched.index(victim)
                del sched[j]
                del sched_n[j]
            self._preempt(victim)
            preempted.append(victim)
            if victim is req:
                return -1
        return i

    def _victim_index(self, running: list[RequestState]) -> int:
        """Index in ``running`` of the request to preempt (``EngineConfig.preemption_order``).

        vLLM (``newest``): under FCFS the most recently admitted; under priority the largest
        (priority, arrival), later admission breaking ties. ``shortest`` (ThunderAgent,
        arXiv 2602.13692, shortest-first eviction): the fewest tokens of context
        (``num_tokens``: prompt plus output so far), because recomputing it costs least; a
        tie goes to the most recently admitted."""
        if self.shortest_first:
            return min(range(len(running)), key=lambda k: (running[k].num_tokens, -k))
        if self.fcfs:
            return len(running) - 1
        return max(
            range(len(running)),
            key=lambda k: (running[k].priority, running[k].arrival_s, -k),
        )

    def _preempt(self, req: RequestState) -> None:
        pool = self.pool
        if pool.cpu_capacity:
            block_hash = pool.block_hash
            for block in req.blocks[: req.num_cached_blocks]:
                h = block_hash[block]
                if h is not None:
                    pool.offload(h)
        pool.release(req.blocks)
        req.blocks = []
        if req.num_computed > req.high_water:
            req.high_water = req.num_computed
        req.num_computed = 0
        req.num_cached_blocks = 0
        self.counters.num_preemptions += 1
        self.waiting.prepend(req)

    def _admit_waiting(self, budget: int, sched: list[RequestState], sched_n: list[int]) -> int:
        pool = self.pool
        bs = self.block_size
        caching = self.caching
        waiting = self.waiting
        running = self.running
        max_seqs = self.max_num_seqs
        while waiting and budget > 0 and len(running) < max_seqs:
            req = waiting.peek()
            num_tokens = req.num_tokens
            hits: list[int] = []
            num_reload = 0
            if caching:
                hashes = req.hashes
                full = num_tokens // bs
                if len(hashes) < full:
                    extend_hashes(hashes, req.tokens, bs, req.seed, full)
                limit = (num_tokens - 1) // bs
                hits = pool.lookup(hashes, limit)
                if pool.cpu and len(hits) < limit:
                    num_reload = pool.lookup_cpu(hashes, len(hits), limit)
            num_hits = len(hits)
            hit_tokens = (num_hits + num_reload) * bs
            n = num_tokens - hit_tokens
            if n > budget:
                n = budget
            end = hit_tokens + n
            need = (end + bs - 1) // bs - num_hits
            if need + pool.num_evictable(hits) > pool.num_free:
                break  # head-of-line: nothing behind it is admitted either (vLLM)
            waiting.pop()
            if caching:
                self.counters.prefix_cache_queries += num_tokens
                self.counters.prefix_cache_hits += num_hits * bs
                if pool.cpu_capacity:
                    self.counters.cpu_cache_queries += num_tokens
                    self.counters.reloaded_tokens += num_reload * bs
                    self.step_reloaded += num_reload * bs
                if req.num_cached_tokens < 0 and pool.evicted:
                    self._count_evicted_prefix(req, num_hits + num_reload, (num_tokens - 1) // bs)
            pool.touch(hits)
            pool.allocate(hits, need)
            req.blocks = hits
            req.num_computed = hit_tokens
            req.num_cached_blocks = num_hits
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = hit_tokens
            if caching and end // bs > req.num_cached_blocks:
                req.cache_full_blocks(pool, bs, end // bs)
            running.append(req)
            sched.append(req)
            sched_n.append(n)
            budget -= n
        return budget

    def _count_evicted_prefix(self, req: RequestState, first: int, limit: int) -> None:
        evicted = self.pool.evicted
        hashes = req.hashes
        i = first
        while i < limit and hashes[i] in evicted:
            i += 1
        self.counters.evicted_prefix_tokens += (i - first) * self.block_size
