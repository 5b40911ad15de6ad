"""Paged KV blocks with a prefix cache, LRU eviction and retention pins (the block pool).

A block is in exactly one of these states:

* **in use** — referenced by at least one running request (``ref[b] > 0``);
* **pinned** — held by at least one retention pin (``pin[b] > 0``) and by no request;
* **free** — in the LRU free queue. A free block may still carry a *cached* prefix (its hash
  is in ``cached``); it is reused, and its hash forgotten, only when it reaches the head of the
  queue (LRU eviction, as vLLM's free block queue).

Prefix-cache keys chain over full blocks: ``h_0 = hash((seed, tokens[0:bs]))``,
``h_i = hash((h_{i-1}, tokens[i·bs:(i+1)·bs]))``, where ``seed`` depends on the request's
``cache_salt`` (:func:`salt_seed`), so requests with different salts never share a block.
Python's ``hash`` of a tuple of ints is deterministic across processes (``PYTHONHASHSEED``
only randomises ``str``/``bytes``); the salt string is hashed once with BLAKE2b for the same
reason. Hash values live in a space of about 2**61, so two different prefixes collide with
probability ~n²/2**62 (n = distinct blocks ever seen): negligible, and a collision only
produces a false cache hit in this model. A block whose hash is already cached by another
block (two identical prompts computed in the same step) is not registered a second time; it
is freed as a plain block.

**CPU tier** (off unless ``num_cpu_blocks > 0``, vLLM's KV offloading): the chain hashes of
blocks copied to host memory, in LRU order (``cpu``, head = next to drop). A cached block is
copied there when it is evicted from the GPU (:meth:`evict`) and when its request is
preempted (:meth:`offload`); a hash already there only moves to the tail. The tier holds
hashes only — what the model needs to decide "reload instead of recompute".
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence

__all__ = ["NO_SALT_SEED", "BlockPool", "extend_hashes", "salt_seed"]

#: Chain seed of unsalted requests (any fixed int; salted seeds are BLAKE2b digests).
NO_SALT_SEED = 0x6167656E7472


def salt_seed(cache_salt: str | None) -> int:
    """The chain seed for ``cache_salt``: deterministic across runs and processes."""
    if cache_salt is None:
        return NO_SALT_SEED
    digest = hashlib.blake2b(cache_salt.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") | 1 << 64  # | 2**64 keeps it apart from NO_SALT_SEED


def extend_hashes(
    hashes: list[int], tokens: Sequence[int], block_size: int, seed: int, num_blocks: int
) -> None:
    """Append the chain hashes of blocks ``len(hashes) .. num_blocks-1`` of ``tokens``.

    ``tokens`` must hold at least ``num_blocks · block_size`` tokens (a tuple for speed).
    """
    i = len(hashes)
    if i >= num_blocks:
        return
    parent = hashes[-1] if i else seed
    start = i * block_size
    append = hashes.append
    for _ in range(num_blocks - i):
        end = start + block_size
        parent = hash((parent, tokens[start:end]))
        append(parent)
        start = end


class BlockPool:
    """KV blocks, their reference and pin counts, the LRU free queue and the prefix cache.

    All methods are O(number of blocks touched). Callers check capacity (:attr:`num_free`)
    before :meth:`allocate`; the pool never preempts anybody itself.
    """

    __slots__ = (
        "block_hash",
        "cached",
        "cpu",
        "cpu_capacity",
        "evicted",
        "evicted_capacity",
        "free",
        "num_blocks",
        "num_offloaded",
        "num_pinned_blocks",
        "pin",
        "ref",
    )

    def __init__(self, num_blocks: int, num_cpu_blocks: int = 0) -> None:
        #: Total blocks.
        self.num_blocks = num_blocks
        #: Requests referencing each block.
        self.ref = [0] * num_blocks
        #: Retention pins holding each block.
        self.pin = [0] * num_blocks
        #: Prefix-cache hash of each block, None when the block holds no cached full block.
        self.block_hash: list[int | None] = [None] * num_blocks
        #: LRU free queue (head = next to reuse). OrderedDict gives O(1) pop-front and delete.
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        #: Prefix cache: chain hash -> block id.
        self.cached: dict[int, int] = {}
        #: Recently evicted hashes (FIFO memory of bounded size), for evicted-prefix stats.
        self.evicted: OrderedDict[int, None] = OrderedDict()
        self.evicted_capacity = 4 * num_blocks
        #: Distinct blocks with ``pin > 0``.
        self.num_pinned_blocks = 0
        #: CPU tier: chain hashes held in host memory, LRU order (head = next to drop).
        self.cpu: OrderedDict[int, None] = OrderedDict()
        #: Blocks the CPU tier holds at most; 0 = no CPU tier.
        self.cpu_capacity = num_cpu_blocks
        #: Blocks copied to the CPU tier so far (a hash already there is not copied again).
        self.num_offloaded = 0

    @property
    def num_free(self) -> int:
        """Blocks that can be allocated now (free, cached-but-evictable included)."""
        return len(self.free)

    def allocate(self, out: list[int], n: int) -> None:
        """Append ``n`` blocks taken from the head of the free queue to ``out`` (evicting any
        cached content); the caller guarantees ``n <= num_free``."""
        popitem = self.free.popitem
        ref = self.ref
        block_hash = self.block_hash
        for _ in range(n):
            block = popitem(last=False)[0]
            h = block_hash[block]
            if h is not None:
                self.evict(block, h)
            ref[block] = 1
            out.append(block)

    def evict(self, block: int, h: int) -> None:
        """Forget the cached content ``h`` of ``block`` (taken from the free queue)."""
        self.block_hash[block] = None
        del self.cached[h]
        evicted = self.evicted
        evicted[h] = None
        if len(evicted) > self.evicted_capacity:
            evicted.popitem(last=False)
        if self.cpu_capacity:
            self.offload(h)

    def offload(self, h: int) -> None:
        """Copy the block with chain hash ``h`` to the CPU tier (most recently used), dropping
        the tier's least recently used block when it is full; no-op without a tier."""
        cpu = self.cpu
        if h in cpu:
            cpu.move_to_end(h)
            return
        if not self.cpu_capacity:
            return
        cpu[h] = None
        self.num_offloaded += 1
        if len(cpu) > self.cpu_capacity:
            cpu.popitem(last=False)

    def lookup_cpu(self, hashes: Sequence[int], first: int, limit: int) -> int:
        """How many of ``hashes[first:limit]``, from ``first`` on, the CPU tier holds (a
        leading run); marks them most recently used."""
        cpu = self.cpu
        i = first
        while i < limit and hashes[i] in cpu:
            cpu.move_to_end(hashes[i])
            i += 1
        return i - first

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference from each block; blocks reaching zero (and not pinned) join the
        free queue's tail in reverse order, so a request's tail blocks are evicted first."""
        ref = self.ref
        pin = self.pin
        free = self.free
        for block in reversed(blocks):
            r = ref[block] - 1
            ref[block] = r
            if r == 0 and pin[block] == 0:
                free[block] = None

    def lookup(self, hashes: Sequence[int], max_blocks: int) -> list[int]:
        """Blocks caching the longest prefix of ``hashes[:max_blocks]`` (no side effects)."""
        cached = self.cached
        hits: list[int] = []
        for h in hashes[:max_blocks]:
            block = cached.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def num_evictable(self, blocks: Iterable[int]) -> int:
        """How many of ``blocks`` sit in the free queue (touching them shrinks it)."""
        ref = self.ref
        pin = self.pin
        return sum(1 for b in blocks if ref[b] == 0 and pin[b] == 0)

    def touch(self, blocks: Iterable[int]) -> None:
        """Take a reference on cache-hit blocks (removing free ones from the free queue)."""
        ref = self.ref
        pin = self.pin
        free = self.free
        for block in blocks:
            if ref[block] == 0 and pin[block] == 0:
                del free[block]
            ref[block] += 1

    def register(self, block: int, h: int) -> None:
        """Record that ``block`` now holds the full block with chain hash ``h``."""
        if h in self.cached:
            return  # an identical block is already cached: keep the first one
        self.cached[h] = block
        self.block_hash[block] = h
        if self.evicted:
            self.evicted.pop(h, None)

    def pin_blocks(self, blocks: Iterable[int]) -> None:
        """Add one pin to each block; pinned blocks leave the free queue (never evicted)."""
        ref = self.ref
        pin = self.pin
        for block in blocks:
            p = pin[block]
            if p == 0:
                self.num_pinned_blocks += 1
                if ref[block] == 0:
                    del self.free[block]
            pin[block] = p + 1

    def unpin_blocks(self, blocks: Sequence[int]) -> None:
        """Remove one pin from each block; unreferenced blocks rejoin the free queue's tail
        (most recently used), in reverse order like :meth:`release`."""
        ref = self.ref
        pin = self.pin
        for block in reversed(blocks):
            p = pin[block] - 1
            pin[block] = p
            if p == 0:
                self.num_pinned_blocks -= 1
                if ref[block] == 0:
                    self.free[block] = None
