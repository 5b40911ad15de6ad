"""Request state inside the engine and the waiting queue (``fcfs`` or ``priority``)."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from agentrt_emulator.core.kv_cache import BlockPool, extend_hashes
from agentrt_emulator.core.types import SchedulingPolicy

__all__ = ["RequestState", "WaitingQueue"]


class RequestState:
    """Mutable progress of one request. Tokens are ids only; the repr hides them."""

    __slots__ = (
        "arrival_s",
        "blocks",
        "hashes",
        "high_water",
        "num_cached_blocks",
        "num_cached_tokens",
        "num_computed",
        "num_output",
        "num_tokens",
        "output_len",
        "priority",
        "prompt_len",
        "request_id",
        "seed",
        "tokens",
    )

    def __init__(
        self,
        request_id: str,
        tokens: tuple[int, ...],
        prompt_len: int,
        arrival_s: float,
        priority: int,
        seed: int,
    ) -> None:
        self.request_id = request_id
        #: Prompt followed by every output token the request will generate.
        self.tokens = tokens
        self.prompt_len = prompt_len
        self.output_len = len(tokens) - prompt_len
        self.arrival_s = arrival_s
        self.priority = priority
        #: Prefix-hash chain seed (from the cache salt).
        self.seed = seed
        #: Output tokens generated so far.
        self.num_output = 0
        #: Known tokens: prompt + generated output (vLLM ``num_tokens``).
        self.num_tokens = prompt_len
        #: Tokens whose KV is computed (or served from cache) (vLLM ``num_computed_tokens``).
        self.num_computed = 0
        #: KV blocks held, in token order.
        self.blocks: list[int] = []
        #: Chain hashes of the full blocks of ``tokens`` computed so far (lazily extended).
        self.hashes: list[int] = []
        #: Leading blocks already registered in (or taken from) the prefix cache.
        self.num_cached_blocks = 0
        #: Prompt tokens hit in the prefix cache at first scheduling; -1 = not scheduled yet.
        self.num_cached_tokens = -1
        #: Largest ``num_computed`` reached before a preemption (recompute accounting).
        self.high_water = 0

    def cache_full_blocks(self, pool: BlockPool, block_size: int, upto: int) -> None:
        """Register full blocks ``num_cached_blocks .. upto-1`` in the prefix cache."""
        hashes = self.hashes
        if len(hashes) < upto:
            extend_hashes(hashes, self.tokens, block_size, self.seed, upto)
        register = pool.register
        blocks = self.blocks
        for b in range(self.num_cached_blocks, upto):
            register(blocks[b], hashes[b])
        self.num_cached_blocks = upto

    def __repr__(self) -> str:
        return (
            f"RequestState(id={self.request_id!r}, prompt_len={self.prompt_len}, "
            f"output={self.num_output}/{self.output_len}, computed={self.num_computed}, "
            f"blocks={len(self.blocks)})"
        )


class WaitingQueue:
    """Requests not running. ``fcfs``: order of arrival at the engine, preempted requests go
    back to the front (vLLM ``prepend_request``). ``priority``: a heap on
    ``(priority, arrival_s, request_id)`` — lower priority value first, ties by arrival then
    id (vLLM ``PriorityRequestQueue``)."""

    __slots__ = ("_fifo", "_heap", "_policy")

    def __init__(self, policy: SchedulingPolicy) -> None:
        self._policy = policy
        self._fifo: deque[RequestState] = deque()
        self._heap: list[tuple[int, float, str, RequestState]] = []

    def __len__(self) -> int:
        return len(self._fifo) if self._policy == "fcfs" else len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._fifo) or bool(self._heap)

    def __iter__(self) -> Iterator[RequestState]:
        if self._policy == "fcfs":
            return iter(list(self._fifo))
        return iter([entry[3] for entry in sorted(self._heap)])

    def add(self, req: RequestState) -> None:
        """A new arrival."""
        if self._policy == "fcfs":
            self._fifo.append(req)
        else:
            heapq.heappush(self._heap, (req.priority, req.arrival_s, req.request_id, req))

    def prepend(self, req: RequestState) -> None:
        """A preempted request: next in line under fcfs, by its key under priority."""
        if self._policy == "fcfs":
            self._fifo.appendleft(req)
        else:
            heapq.heappush(self._heap, (req.priority, req.arrival_s, req.request_id, req))

    def peek(self) -> RequestState:
        """The next request to admit (the queue must not be empty)."""
        return self._fifo[0] if self._policy == "fcfs" else self._heap[0][3]

    def pop(self) -> RequestState:
        """Remove and return :meth:`peek`."""
        if self._policy == "fcfs":
            return self._fifo.popleft()
        return heapq.heappop(self._heap)[3]

    def remove(self, req: RequestState) -> None:
        """Remove ``req`` (O(n); used by aborts only)."""
        if self._policy == "fcfs":
            self._fifo.remove(req)
        else:
            self._heap = [entry for entry in self._heap if entry[3] is not req]
            heapq.heapify(self._heap)
