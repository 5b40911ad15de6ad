"""Fused pure-decode steps: k identical decode iterations computed at once.

In a pure-decode batch nothing changes from one iteration to the next except that every
request gains one token: same requests, same order, no admission, no preemption. k such
iterations can therefore be applied in O(batch + blocks allocated) instead of O(batch · k).
The result must equal k single steps *exactly* — same tokens, same finishing step, same
blocks allocated from the LRU queue in the same order, same prefix-cache registrations —
which the property tests check. Block events are replayed in single-step order:
step index, then position in the running list, allocation before cache registration.
"""

from __future__ import annotations

from agentrt_emulator.core.kv_cache import BlockPool, extend_hashes
from agentrt_emulator.core.profiles import step_time_s
from agentrt_emulator.core.queues import RequestState
from agentrt_emulator.core.types import RequestProgress
from agentrt_serving.hardware import HardwareProfile

__all__ = ["plan_fused_decode", "run_fused_decode"]

#: Relative margin kept before a pin expiry, so float rounding of the caller's clock
#: (single steps add durations one by one) can never put an expiry inside a fused run.
_EXPIRY_MARGIN = 1e-9


def plan_fused_decode(
    running: list[RequestState],
    num_free_blocks: int,
    block_size: int,
    max_num_batched_tokens: int,
    profile: HardwareProfile,
    max_steps: int,
    horizon_s: float,
    now_s: float,
    next_pin_expiry_s: float,
) -> tuple[int, float] | None:
    """How many identical decode steps (>= 2) can be fused now, and their total duration
    (seconds); None when fewer than 2. The caller has checked that no waiting request can
    be admitted during them."""
    batch = len(running)
    if batch == 0 or batch > max_num_batched_tokens:
        return None
    k = max_steps
    kv_tokens = 0
    for req in running:
        c = req.num_computed
        if c != req.num_tokens - 1 or req.num_output == 0:
            return None  # a prefill chunk, or the step that would sample the first token
        remaining = req.output_len - req.num_output
        if remaining < k:
            k = remaining
        kv_tokens += c + 1
    if k < 2:
        return None
    k = _fit_blocks(running, num_free_blocks, block_size, k)
    if k < 2:
        return None
    total_s = 0.0
    steps = 0
    while steps < k:
        d = step_time_s(profile, 0, batch, kv_tokens + steps * batch)
        if steps:
            start_s = now_s + total_s
            if start_s + _EXPIRY_MARGIN * max(1.0, abs(start_s)) >= next_pin_expiry_s:
                break
            if total_s + d > horizon_s:
                break
        total_s += d
        steps += 1
    if steps < 2:
        return None
    return steps, total_s


def _blocks_needed(starts: list[int], block_size: int, k: int) -> int:
    """Blocks allocated over k decode steps, given each request's first allocating step."""
    return sum((k - 1 - j0) // block_size + 1 for j0 in starts if j0 < k)


def _fit_blocks(running: list[RequestState], num_free: int, block_size: int, k: int) -> int:
    """Largest k' <= k whose block growth fits in the free blocks (0 if not even one step)."""
    # A decoding request computing token position c + j needs block (c + j) // bs; it holds
    # len(blocks) blocks, so it allocates at steps j0, j0 + bs, ... with j0 = len·bs − c.
    starts = [len(r.blocks) * block_size - r.num_computed for r in running]
    if _blocks_needed(starts, block_size, k) <= num_free:
        return k
    lo, hi = 0, k  # invariant: lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _blocks_needed(starts, block_size, mid) <= num_free:
            lo = mid
        else:
            hi = mid
    return lo


def run_fused_decode(
    running: list[RequestState], pool: BlockPool, block_size: int, caching: bool, k: int
) -> tuple[list[RequestProgress], list[RequestState]]:
    """Apply k decode steps to every running request (planned by :func:`plan_fused_decode`).

    Returns the per-request progress (in running order) and the requests that finished at
    the last step (their blocks are still held; the caller frees them in that order).
    """
    bs = block_size
    # Block events encoded as ints that sort in single-step order:
    # key = (step · batch + position) · 2 + (0 allocate | 1 register a full block).
    stride = 2 * len(running)
    keys: list[int] = []
    append_key = keys.append
    for idx, req in enumerate(running):
        c = req.num_computed
        base = 2 * idx
        j = len(req.blocks) * bs - c  # computing position c + j needs a new block
        while j < k:
            append_key(j * stride + base)
            j += bs
        if caching:
            j = (-c - 1) % bs  # computing position c + j fills a block
            if j < k:
                # all hashes of the blocks this run fills, in one go
                extend_hashes(req.hashes, req.tokens, bs, req.seed, (c + k) // bs)
                while j < k:
                    append_key(j * stride + base + 1)
                    j += bs
    if keys:
        keys.sort()
        popitem = pool.free.popitem
        block_hash = pool.block_hash
        ref = pool.ref
        register = pool.register
        for key in keys:
            j, rest = divmod(key, stride)
            req = running[rest >> 1]
            if rest & 1:
                upto = (req.num_computed + j + 1) // bs
                hashes = req.hashes
                blocks = req.blocks
                for b in range(req.num_cached_blocks, upto):
                    register(blocks[b], hashes[b])
                req.num_cached_blocks = upto
            else:
                block = popitem(last=False)[0]
                h = block_hash[block]
                if h is not None:
                    pool.evict(block, h)
                ref[block] = 1
                req.blocks.append(block)
    progress: list[RequestProgress] = []
    finished: list[RequestState] = []
    append = progress.append
    for req in running:
        req.num_computed += k
        req.num_tokens += k
        g = req.num_output + k
        req.num_output = g
        done = g == req.output_len
        append(RequestProgress(req.request_id, k, False, done, req.num_cached_tokens, k))
        if done:
            finished.append(req)
    return progress, finished
