"""The engine model: one vLLM-v1-like engine iteration per :meth:`EngineCore.step`.

Each step (vLLM v1 ``Scheduler.schedule`` + ``update_from_output``, simplified):

1. Running requests first, in the order they were admitted: each gets
   ``min(num_tokens − num_computed, remaining budget)`` tokens (1 for a decode, a chunk for a
   prompt still being prefilled). If its new KV blocks do not fit, the running request with
   the largest ``(priority, arrival)`` (``priority`` policy) or the last admitted (``fcfs``)
   is preempted — blocks freed, put back at the front of the waiting queue, recomputed later
   — until it fits or the request preempted itself.
2. Then, only if nobody was preempted, waiting requests in queue order while there is budget
   and fewer than ``max_num_seqs`` run: prefix-cache lookup (full blocks only, never the last
   prompt token), chunked prefill of the rest. A request that does not fit stops admission
   (head-of-line, as vLLM). A better-priority waiting request never preempts a running one.
3. Run: every scheduled request advances; a request whose known tokens are all computed
   samples one output token (so the first token comes in the step that finishes the
   prompt); a request that produced its last token leaves and frees its blocks.

Full blocks are registered in the prefix cache when they are scheduled (as vLLM does, so
requests admitted later in the same step share them); prompt and output blocks alike, so a
next turn whose prompt extends this one hits. Preemption frees the blocks; they are
recomputed on resumption, unless the KV CPU tier (``kv_offloading_size``, off by default)
still holds them: cached blocks evicted from the GPU or freed by a preemption are copied to
it (LRU, bounded), and an admission whose prefix continues there reloads those blocks at
PCIe bandwidth instead of recomputing them (docs/engine-model.md, "The KV CPU tier").

Nothing here reads a clock: ``now_s`` is only used to expire retention pins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agentrt.errors import ConfigError, InvalidRequest
from agentrt_emulator.core.kv_cache import BlockPool, extend_hashes, salt_seed
from agentrt_emulator.core.pins import PinTable
from agentrt_emulator.core.profiles import num_gpu_blocks_for
from agentrt_emulator.core.queues import RequestState
from agentrt_emulator.core.scheduler import Scheduler
from agentrt_emulator.core.types import EngineConfig, EngineRequest, EngineStats, StepResult
from agentrt_serving.hardware import HardwareProfile

__all__ = ["EngineCore"]


class EngineCore:
    """A pure, clock-agnostic model of one vLLM engine (see the module docstring).

    Raises:
        ConfigError: from the constructor, on invalid limits or a KV cache of zero blocks.
    """

    def __init__(self, config: EngineConfig, profile: HardwareProfile) -> None:
        _validate_config(config)
        num_blocks = config.num_gpu_blocks
        if num_blocks is None:
            num_blocks = num_gpu_blocks_for(
                profile, config.block_size, config.gpu_memory_utilization
            )
        if num_blocks < 1:
            raise ConfigError(
                f"no room for a KV cache: profile {profile.name!r} leaves {num_blocks} blocks"
            )
        self._config = config
        self._profile = profile
        self._block_size = config.block_size
        self._caching = config.enable_prefix_caching
        self._pool = BlockPool(num_blocks, _num_cpu_blocks(config, profile))
        self._pins = PinTable(self._pool)
        self._sched = Scheduler(config, profile, self._pool)

    # -- properties ---------------------------------------------------------------------------

    @property
    def config(self) -> EngineConfig:
        """The configuration the engine was built with."""
        return self._config

    @property
    def profile(self) -> HardwareProfile:
        """The hardware profile of the step-time model."""
        return self._profile

    @property
    def num_blocks(self) -> int:
        """Total KV blocks."""
        return self._pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        """Blocks allocatable now (free, including cached-but-evictable ones)."""
        return self._pool.num_free

    @property
    def num_running(self) -> int:
        """Requests in the running batch."""
        return len(self._sched.running)

    @property
    def num_waiting(self) -> int:
        """Requests waiting (new or preempted)."""
        return len(self._sched.waiting)

    @property
    def next_pin_expiry_s(self) -> float:
        """Earliest retention-pin expiry (caller's clock, seconds); ``math.inf`` if none.

        When :meth:`step` returns None while :meth:`has_unfinished` is True, the waiting
        requests are blocked by pinned memory: nothing changes before this time (or an
        unpin / abort)."""
        return self._pins.next_expiry_s

    # -- requests -----------------------------------------------------------------------------

    def add_request(self, request: EngineRequest) -> None:
        """Queue a request.

        Raises:
            InvalidRequest: empty prompt or output, duplicate id, empty ``cache_salt``,
                prompt + output longer than ``max_model_len`` or than the whole KV cache.
        """
        request_id = request.request_id
        requests = self._sched.requests
        if request_id in requests:
            raise InvalidRequest(f"duplicate request id {request_id!r}", param="request_id")
        prompt = tuple(request.prompt_token_ids)
        output = tuple(request.output_token_ids)
        if not prompt:
            raise InvalidRequest("the prompt must have at least one token", param="prompt")
        if not output:
            raise InvalidRequest("a request must generate at least one token", param="max_tokens")
        if request.cache_salt is not None and not request.cache_salt:
            raise InvalidRequest("cache_salt must be a non-empty string", param="cache_salt")
        max_len = self._config.max_model_len
        total = len(prompt) + len(output)
        if total > max_len:
            param = "prompt" if len(prompt) >= max_len else "max_tokens"
            raise InvalidRequest(
                f"prompt ({len(prompt)} tokens) + output ({len(output)} tokens) exceeds the "
                f"maximum context length of {max_len} tokens",
                param=param,
            )
        # The last output token is never fed back, so total - 1 tokens need KV.
        blocks_needed = -(-(total - 1) // self._block_size)
        if blocks_needed > self._pool.num_blocks:
            raise InvalidRequest(
                f"the request needs {blocks_needed} KV blocks but the engine has only "
                f"{self._pool.num_blocks}",
                param="max_tokens",
            )
        known = request.prompt_hashes
        if len(known) > len(prompt) // self._block_size:
            raise InvalidRequest(
                f"{len(known)} prompt hashes given for {len(prompt) // self._block_size} full "
                "blocks",
                param="prompt_hashes",
            )
        state = RequestState(
            request_id,
            prompt + output,
            len(prompt),
            request.arrival_s,
            request.priority,
            salt_seed(request.cache_salt),
        )
        if known:
            state.hashes = list(known)
        requests[request_id] = state
        self._sched.waiting.add(state)

    def abort_request(self, request_id: str) -> bool:
        """Drop a request wherever it is and free its blocks; True if it was known."""
        sched = self._sched
        state = sched.requests.pop(request_id, None)
        if state is None:
            return False
        if state in sched.running:
            sched.running.remove(state)
            self._pool.release(state.blocks)
            state.blocks = []
        else:
            sched.waiting.remove(state)
        return True

    def has_unfinished(self) -> bool:
        """True while any request is running or waiting."""
        return bool(self._sched.requests)

    # -- retention pins -----------------------------------------------------------------------

    def pin(
        self,
        pin_id: str,
        token_ids: Sequence[int],
        *,
        cache_salt: str | None,
        ttl_s: float,
        now_s: float,
    ) -> int:
        """Hold the cached full blocks of the prefix ``token_ids`` until ``now_s + ttl_s``.

        Only blocks already in the prefix cache are pinned (the leading run of cached full
        blocks). Pinned blocks are never evicted. Pinning an existing ``pin_id`` replaces it
        (new prefix, new expiry). ``ttl_s = math.inf`` pins until :meth:`unpin`.

        Returns:
            Blocks pinned (0 when nothing is cached or prefix caching is off).

        Raises:
            InvalidRequest: negative or NaN ``ttl_s``, empty ``cache_salt``.
        """
        if not ttl_s >= 0.0:
            raise InvalidRequest(f"ttl_s must be >= 0, got {ttl_s!r}", param="ttl_s")
        if cache_salt is not None and not cache_salt:
            raise InvalidRequest("cache_salt must be a non-empty string", param="cache_salt")
        self.expire_pins(now_s)
        blocks: list[int] = []
        if self._caching:
            blocks = self._pool.lookup(self.prefix_hashes(token_ids, cache_salt), len(token_ids))
        self._pins.add(pin_id, blocks, now_s + ttl_s)
        return len(blocks)

    def unpin(self, pin_id: str) -> bool:
        """Release a pin now; True if it existed."""
        return self._pins.remove(pin_id)

    def expire_pins(self, now_s: float) -> int:
        """Release the pins whose expiry is ``<= now_s``; returns how many."""
        if not len(self._pins):
            return 0
        return self._pins.expire(now_s)

    def cached_prefix_tokens(self, token_ids: Sequence[int], cache_salt: str | None) -> int:
        """Leading tokens of ``token_ids`` whose full blocks are cached now (read-only probe).

        Counts whole blocks, so the result is a multiple of ``block_size``. A request with
        this prompt would reuse at most ``((len − 1) // block_size) · block_size`` of them
        (the last prompt token is always computed).
        """
        if not self._caching:
            return 0
        return self.cached_prefix_tokens_for(self.prefix_hashes(token_ids, cache_salt))

    def prefix_hashes(self, token_ids: Sequence[int], cache_salt: str | None) -> list[int]:
        """Chain hashes of the full blocks of ``token_ids`` for this engine's block size.

        Pure function of its inputs and ``block_size``: a caller probing many engines (or the
        same growing context again and again) computes them once and extends them with
        :func:`agentrt_emulator.core.kv_cache.extend_hashes`, then asks
        :meth:`cached_prefix_tokens_for`.
        """
        tokens = tuple(token_ids)
        hashes: list[int] = []
        bs = self._block_size
        extend_hashes(hashes, tokens, bs, salt_seed(cache_salt), len(tokens) // bs)
        return hashes

    def cached_prefix_tokens_for(self, hashes: Sequence[int]) -> int:
        """:meth:`cached_prefix_tokens` from precomputed :meth:`prefix_hashes` (read-only)."""
        if not self._caching:
            return 0
        return len(self._pool.lookup(hashes, len(hashes))) * self._block_size

    # -- stats --------------------------------------------------------------------------------

    def stats(self) -> EngineStats:
        """Current gauges and counters (vLLM meanings, see :class:`EngineStats`)."""
        pool = self._pool
        sched = self._sched
        counters = sched.counters
        return EngineStats(
            num_running=len(sched.running),
            num_waiting=len(sched.waiting),
            kv_cache_usage=1.0 - pool.num_free / pool.num_blocks,
            prefix_cache_queries=counters.prefix_cache_queries,
            prefix_cache_hits=counters.prefix_cache_hits,
            num_preemptions=counters.num_preemptions,
            prompt_tokens=counters.prompt_tokens,
            generation_tokens=counters.generation_tokens,
            recomputed_prompt_tokens=counters.recomputed_prompt_tokens,
            pinned_blocks=pool.num_pinned_blocks,
            num_blocks=pool.num_blocks,
            evicted_prefix_tokens=counters.evicted_prefix_tokens,
            num_steps=counters.num_steps,
            num_cpu_blocks=pool.cpu_capacity,
            cpu_blocks_used=len(pool.cpu),
            cpu_cache_queries=counters.cpu_cache_queries,
            reloaded_tokens=counters.reloaded_tokens,
            offloaded_tokens=pool.num_offloaded * self._block_size,
            reload_s=counters.reload_s,
        )

    # -- the step -----------------------------------------------------------------------------

    def step(
        self, now_s: float, *, max_steps: int = 1, horizon_s: float = math.inf
    ) -> StepResult | None:
        """Run one engine iteration at ``now_s`` (caller's clock, seconds).

        With ``max_steps > 1`` the engine may fuse up to ``max_steps`` consecutive identical
        pure-decode iterations into one result (``num_steps = k``, every running request
        gaining k tokens) when that is exactly what k single steps would do: every running
        request is decoding, no waiting request could be admitted (none waiting, or
        ``max_num_seqs`` reached, or no token budget left), no request finishes before the
        last fused step, the free blocks cover the growth, no pin expires in between, and
        the fused duration stays ``<= horizon_s`` (a duration in seconds, not a clock time;
        the first step always runs whatever its duration).

        Returns:
            What happened, or None when nothing could be scheduled (idle, or every waiting
            request is blocked by pinned memory — see :attr:`next_pin_expiry_s`).
        """
        pins = self._pins
        if len(pins):
            pins.expire(now_s)
        sched = self._sched
        if not sched.requests:
            return None
        if max_steps > 1:
            fused = sched.try_fused(
                max_steps, horizon_s, now_s, pins.next_expiry_s if len(pins) else math.inf
            )
            if fused is not None:
                return fused
        return sched.step_once()


_GIB = 1024**3


def _num_cpu_blocks(config: EngineConfig, profile: HardwareProfile) -> int:
    """Blocks of the KV CPU tier (0 = none); refuses a size the profile's host cannot hold."""
    size = config.kv_offloading_size
    if not (math.isfinite(size) and size >= 0.0):
        raise ConfigError(f"kv_offloading_size must be a finite number of GiB >= 0, got {size!r}")
    if size > 0.0 and size * _GIB > profile.host_mem_bytes:
        raise ConfigError(
            f"kv_offloading_size {size:g} GiB exceeds the host memory of profile "
            f"{profile.name!r} ({profile.host_mem_bytes / _GIB:g} GiB)"
        )
    blocks = config.num_cpu_blocks
    if blocks is None:
        per_block = profile.kv_bytes_per_token * config.block_size
        blocks = int(size * _GIB // per_block) if size > 0.0 and per_block > 0 else 0
    if blocks < 0:
        raise ConfigError("num_cpu_blocks must be >= 0 (or None to derive it from the size)")
    if blocks and not config.enable_prefix_caching:
        raise ConfigError("the KV CPU tier (kv_offloading_size) needs prefix caching on")
    return blocks


def _validate_config(config: EngineConfig) -> None:
    checks = (
        (config.block_size >= 1, "block_size must be >= 1"),
        (config.max_num_seqs >= 1, "max_num_seqs must be >= 1"),
        (config.max_num_batched_tokens >= 1, "max_num_batched_tokens must be >= 1"),
        (config.max_model_len >= 2, "max_model_len must be >= 2"),
        (
            config.num_gpu_blocks is None or config.num_gpu_blocks >= 1,
            "num_gpu_blocks must be >= 1 (or None to derive it from the profile)",
        ),
        (
            0.0 < config.gpu_memory_utilization <= 1.0,
            "gpu_memory_utilization must be in (0, 1]",
        ),
        (
            config.scheduling_policy in ("fcfs", "priority"),
            f"scheduling_policy must be 'fcfs' or 'priority', got {config.scheduling_policy!r}",
        ),
    )
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
