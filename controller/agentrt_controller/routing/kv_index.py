"""An exact per-backend prefix index fed by vLLM's KV-cache events (docs/routing.md, "The exact
prefix index").

vLLM started with ``--kv-events-config`` publishes, per engine step, a batch of events with a
sequence number: ``BlockStored`` (full blocks entered the prefix cache, with their token ids),
``BlockRemoved`` (blocks evicted) and ``AllBlocksCleared`` (the cache was reset). Applied in
order they give exactly the blocks a backend caches. This object applies them per backend and
answers "how many leading blocks of this prompt does backend B cache" — or ``None`` when it
cannot know, and the router then falls back to the estimate
(:class:`~agentrt_controller.routing.prefix_index.PrefixIndex`) for that backend.

**Keys.** vLLM's block hashes are its own (SHA-256 over CBOR, or Python's hash; seeded per
process). The index keys each cached block by *our* chain hash of its tokens instead —
:func:`~agentrt_controller.routing.hashing.token_block_hashes` over the event's ``token_ids``,
chained through the parent block, seeded by the request's ``cache_salt`` (vLLM publishes it in
the first block's ``extra_keys``) — so a driver that knows a prompt's token ids hashes them the
same way and compares integers. vLLM's hash of each block is kept only to resolve parents and
removals. A block whose extra keys are not a plain salt (LoRA, multimodal, prompt embeddings)
gets a key no plain prompt chain can produce: it is counted, never matched.

**Sequence numbers** (one publisher per backend, numbered from 0 when it starts):

* the next expected batch is applied, later ones are held (at most ``max_pending``) until the
  gap is filled by a replay — meanwhile the backend is *unsynced* (:meth:`match` says
  ``None``);
* a batch already applied (a replay overlapping the live stream) is ignored;
* a *live* batch numbered at or below the last live one means the publisher restarted (a new
  vLLM process, empty cache): the backend's blocks are dropped and numbering starts over;
* a replay that cannot reach back to the expected batch (vLLM keeps ``buffer_steps`` batches)
  is a *hole*: the backend's blocks are dropped (what the missing batches removed is unknown,
  so keeping them could claim evicted blocks) and the index resumes at the first batch it
  has. After a hole the index can only under-count (blocks stored before it and still cached
  are not known) — counted in :attr:`BackendKvStats.holes`.

Memory: one entry per cached block per backend (≈ :data:`BYTES_PER_BLOCK` bytes), at most
``capacity_blocks`` per backend (stores past it are dropped and counted: an under-count, never
a false claim); held batches at most ``max_pending`` per backend. Pure: no clock, no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentrt.errors import ConfigError
from agentrt_controller.routing.hashing import leading_matches, token_block_hashes

__all__ = [
    "BYTES_PER_BLOCK",
    "AllBlocksCleared",
    "ApplyOutcome",
    "BackendKvStats",
    "BlockRemoved",
    "BlockStored",
    "ExactPrefixIndex",
    "KvEvent",
    "KvEventBatch",
]

#: vLLM's hash of a block as published: an int (Python hash / 64-bit) or bytes (SHA-256).
VllmBlockHash = int | bytes

#: Approximate bytes one cached block costs the index (two dict entries, a tuple key and two
#: ints; measured with tracemalloc in tests/routing/test_kv_event_index.py).
BYTES_PER_BLOCK = 300


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Full blocks entered a backend's prefix cache (vLLM ``BlockStored``)."""

    #: vLLM's hashes of the stored blocks, in chain order.
    block_hashes: tuple[VllmBlockHash, ...]
    #: vLLM's hash of the block before the first one; ``None`` = they start the prompt.
    parent_block_hash: VllmBlockHash | None
    #: The blocks' tokens: ``block_size`` per block, concatenated (prompt content).
    token_ids: tuple[int, ...] = field(repr=False)
    #: Tokens per block.
    block_size: int
    #: Where the blocks live (``"GPU"``, ``"CPU"`` for an offloading tier); ``None`` = unset.
    medium: str | None = None
    #: The LoRA adapter's name; ``None`` = the base model.
    lora_name: str | None = None
    #: Per block, the extra keys vLLM hashed with it (cache salt, LoRA, multimodal ids);
    #: ``None`` = none for any block.
    extra_keys: tuple[tuple[object, ...] | None, ...] | None = field(default=None, repr=False)
    #: vLLM's KV-cache group (hybrid models have several); ``None`` = unset.
    group_idx: int | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks left a backend's prefix cache (vLLM ``BlockRemoved``)."""

    block_hashes: tuple[VllmBlockHash, ...]
    medium: str | None = None
    group_idx: int | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The backend's prefix cache was reset (vLLM ``AllBlocksCleared``)."""


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class KvEventBatch:
    """One published batch (an engine step's events)."""

    #: The publisher's sequence number (0 for its first batch).
    seq: int
    #: The publisher's timestamp (seconds since the epoch, its clock; informational).
    ts: float
    events: tuple[KvEvent, ...]
    #: vLLM's data-parallel rank, when it sets one.
    data_parallel_rank: int | None = None


class ApplyOutcome(enum.Enum):
    """What :meth:`ExactPrefixIndex.apply` did with a batch."""

    #: Applied (and any held batches it unblocked).
    APPLIED = "applied"
    #: Already applied before (replay overlap): ignored.
    DUPLICATE = "duplicate"
    #: Ahead of the expected batch: held until a replay fills the gap (backend unsynced).
    HELD = "held"
    #: The publisher restarted: its blocks were dropped, then the batch was applied or held.
    RESTARTED = "restarted"


@dataclass(slots=True)
class BackendKvStats:
    """Counters of one backend's event stream (for metrics and introspection)."""

    batches_applied: int = 0
    events_applied: int = 0
    #: Times a batch arrived ahead of the expected one (a gap in the live stream).
    gaps: int = 0
    #: Times a replay could not reach back to the expected batch (history lost).
    holes: int = 0
    #: Publisher restarts seen (live sequence numbers went back).
    restarts: int = 0
    #: ``AllBlocksCleared`` events applied.
    clears: int = 0
    #: Stored blocks whose parent was unknown (stored before the index's history): not indexed.
    unresolved_blocks: int = 0
    #: Stored blocks dropped because the backend was at ``capacity_blocks``.
    overflow_blocks: int = 0
    #: Held batches dropped because ``max_pending`` were held already.
    dropped_batches: int = 0


@dataclass(slots=True)
class _BackendKv:
    """One backend's cache as its events describe it."""

    #: (medium, group, vLLM hash) -> our chain hash of that block.
    blocks: dict[tuple[str | None, int | None, VllmBlockHash], int] = field(default_factory=dict)
    #: our chain hash -> how many (medium, group, vLLM hash) entries have it.
    present: dict[int, int] = field(default_factory=dict)
    #: Next sequence number to apply; ``None`` = no baseline yet (nothing applied).
    expected: int | None = None
    #: The last sequence number seen on the live stream (restart detection).
    last_live: int | None = None
    #: Batches ahead of ``expected``, by sequence number.
    held: dict[int, KvEventBatch] = field(default_factory=dict)
    #: Connected and caught up: answers are exact.
    synced: bool = False
    #: The event stream is up (cleared by :meth:`ExactPrefixIndex.disconnected`, set again by
    #: the replay that follows a reconnect).
    connected: bool = True
    #: Tokens per block (from the last BlockStored); ``None`` = not seen yet.
    block_size: int | None = None
    stats: BackendKvStats = field(default_factory=BackendKvStats)

    def clear(self) -> None:
        self.blocks.clear()
        self.present.clear()


def _opaque_key(parent: int, tokens: tuple[int, ...], keys: object) -> int:
    """A key no plain prompt chain produces (blocks hashed with LoRA/multimodal extra keys)."""
    return hash(("agentrt-opaque", parent, tokens, repr(keys)))


def _root_salt(event: BlockStored) -> tuple[bool, str | None]:
    """``(plain, salt)`` for the first block of a prompt: plain when its extra keys are
    nothing or one ``cache_salt`` string (vLLM publishes the salt bare)."""
    keys = event.extra_keys[0] if event.extra_keys else None
    if event.lora_name is not None:
        return False, None
    if not keys:
        return True, None
    if len(keys) == 1 and isinstance(keys[0], str):
        return True, keys[0]
    return False, None


class ExactPrefixIndex:
    """Cached blocks per backend, from vLLM's KV events (module docstring).

    ``capacity_blocks``: most blocks indexed per backend (>= 1); ``max_pending``: most
    batches held per backend while a gap is open (>= 1). Raises :class:`ConfigError`.
    """

    def __init__(self, *, capacity_blocks: int = 1_000_000, max_pending: int = 4096) -> None:
        for name, value in (("capacity_blocks", capacity_blocks), ("max_pending", max_pending)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"exact prefix index {name} must be an integer >= 1")
        self.capacity_blocks = capacity_blocks
        self.max_pending = max_pending
        self._backends: dict[str, _BackendKv] = {}

    # --- queries ----------------------------------------------------------------------------

    def match(self, backend_id: str, chain: Sequence[int], block_size: int) -> int | None:
        """Leading elements of ``chain`` (our token chain with ``block_size`` tokens per
        block) cached on ``backend_id``; ``None`` when the index cannot say — the backend
        is unsynced or uses another block size (one that never stored a block caches
        nothing: 0)."""
        state = self._backends.get(backend_id)
        if state is None or not state.synced:
            return None
        if state.block_size is not None and state.block_size != block_size:
            return None
        return leading_matches(chain, state.present)

    def is_synced(self, backend_id: str) -> bool:
        """Whether :meth:`match` answers for ``backend_id`` (block size aside)."""
        state = self._backends.get(backend_id)
        return state is not None and state.synced

    def any_synced(self) -> bool:
        """Whether :meth:`match` may answer for some backend (one is synced)."""
        return any(s.synced for s in self._backends.values())

    def block_size(self, backend_id: str) -> int | None:
        """Tokens per block of ``backend_id`` (``None`` until a ``BlockStored`` told)."""
        state = self._backends.get(backend_id)
        return None if state is None else state.block_size

    def block_sizes(self) -> set[int]:
        """Block sizes of the synced backends (what a driver hashes prompts with)."""
        return {
            s.block_size for s in self._backends.values() if s.synced and s.block_size is not None
        }

    def replay_from(self, backend_id: str) -> int:
        """The sequence number a replay of ``backend_id`` starts at: the first batch not
        applied (0 without a baseline)."""
        state = self._backends.get(backend_id)
        if state is None or state.expected is None:
            return 0
        return state.expected

    def cached_blocks(self, backend_id: str | None = None) -> int:
        """Blocks indexed (one backend, or all)."""
        if backend_id is not None:
            state = self._backends.get(backend_id)
            return 0 if state is None else len(state.blocks)
        return sum(len(s.blocks) for s in self._backends.values())

    def memory_bytes(self) -> int:
        """Approximate bytes held (blocks and held batches' events)."""
        total = 0
        for state in self._backends.values():
            total += len(state.blocks) * BYTES_PER_BLOCK
            for batch in state.held.values():
                total += 200 + sum(
                    100 + 40 * len(e.token_ids) + 40 * len(e.block_hashes)
                    if isinstance(e, BlockStored)
                    else 100
                    for e in batch.events
                )
        return total

    def stats(self, backend_id: str) -> BackendKvStats:
        """The counters of ``backend_id`` (a fresh zero set for an unknown backend)."""
        state = self._backends.get(backend_id)
        return BackendKvStats() if state is None else state.stats

    def backends(self) -> list[str]:
        """Backends the index has heard of, sorted."""
        return sorted(self._backends)

    # --- the event stream --------------------------------------------------------------------

    def apply(
        self, backend_id: str, batch: KvEventBatch, *, replayed: bool = False
    ) -> ApplyOutcome:
        """Apply one batch received live (``replayed=False``) or from the replay socket."""
        state = self._state(backend_id)
        outcome = ApplyOutcome.APPLIED
        if not replayed:
            if state.last_live is not None and batch.seq <= state.last_live:
                self._restart(state)
                outcome = ApplyOutcome.RESTARTED
            state.last_live = batch.seq
        if state.expected is None:
            if batch.seq == 0:  # the publisher's first batch: nothing came before it
                state.expected = 0
            elif not replayed:  # no baseline: what came before is unknown until a replay
                self._hold(state, batch)
                self._refresh(state)
                return ApplyOutcome.HELD if outcome is ApplyOutcome.APPLIED else outcome
            else:  # the replay buffer no longer reaches back to the first batch
                state.stats.holes += 1
                state.expected = batch.seq
        if batch.seq < state.expected:
            return ApplyOutcome.DUPLICATE if outcome is ApplyOutcome.APPLIED else outcome
        if batch.seq > state.expected:
            if not state.held:
                state.stats.gaps += 1
            self._hold(state, batch)
            self._refresh(state)
            return ApplyOutcome.HELD if outcome is ApplyOutcome.APPLIED else outcome
        self._apply_in_order(state, batch)
        self._drain(state)
        self._refresh(state)
        return outcome

    def replay_done(self, backend_id: str) -> None:
        """A replay ended (its end marker came). Whatever gap is still open cannot be filled:
        a hole — drop the backend's blocks, resume at the first held batch. Then the backend
        is synced (also when nothing was ever published: an empty cache)."""
        state = self._state(backend_id)
        if state.held and (state.expected is None or min(state.held) > state.expected):
            if state.expected is not None or min(state.held) > 0:
                state.stats.holes += 1
                state.clear()
            state.expected = min(state.held)
            self._drain(state)
        if state.expected is None:
            state.expected = 0
        state.connected = True
        self._refresh(state)

    def disconnected(self, backend_id: str) -> None:
        """The event stream broke (or was never up): unsynced until the replay that follows
        the reconnect (:meth:`replay_done`). The blocks are kept (the replay brings what
        changed meanwhile; a restarted publisher shows as a restart or a hole)."""
        state = self._state(backend_id)
        state.connected = False
        state.last_live = None
        self._refresh(state)

    def forget_backend(self, backend_id: str) -> None:
        """Drop everything about ``backend_id`` (it was removed from the pool)."""
        self._backends.pop(backend_id, None)

    # --- internals ---------------------------------------------------------------------------

    def _state(self, backend_id: str) -> _BackendKv:
        state = self._backends.get(backend_id)
        if state is None:
            state = self._backends[backend_id] = _BackendKv()
        return state

    @staticmethod
    def _refresh(state: _BackendKv) -> None:
        state.synced = state.connected and state.expected is not None and not state.held

    def _restart(self, state: _BackendKv) -> None:
        state.stats.restarts += 1
        state.clear()
        state.held.clear()
        state.expected = 0  # a new publisher numbers from 0; its cache starts empty

    def _hold(self, state: _BackendKv, batch: KvEventBatch) -> None:
        if batch.seq in state.held:
            return
        if len(state.held) >= self.max_pending:
            state.held.pop(max(state.held))  # the newest: a replay brings it back
            state.stats.dropped_batches += 1
        state.held[batch.seq] = batch

    def _drain(self, state: _BackendKv) -> None:
        expected = state.expected
        held = state.held
        while expected is not None and expected in held:
            self._apply_in_order(state, held.pop(expected))
            expected = state.expected
        for seq in [s for s in held if expected is not None and s < expected]:
            del held[seq]

    def _apply_in_order(self, state: _BackendKv, batch: KvEventBatch) -> None:
        for event in batch.events:
            if isinstance(event, BlockStored):
                self._store(state, event)
            elif isinstance(event, BlockRemoved):
                self._remove(state, event)
            else:
                state.clear()
                state.stats.clears += 1
        state.expected = batch.seq + 1
        state.stats.batches_applied += 1
        state.stats.events_applied += len(batch.events)

    def _store(self, state: _BackendKv, event: BlockStored) -> None:
        size = event.block_size
        if size < 1 or len(event.token_ids) < size * len(event.block_hashes):
            return  # malformed: the subscriber's decoder rejects these; never index them
        state.block_size = size
        blocks, present = state.blocks, state.present
        medium, group = event.medium, event.group_idx
        parent: int | None = None
        plain, salt = _root_salt(event)
        if event.parent_block_hash is not None:
            parent = blocks.get((medium, group, event.parent_block_hash))
            if parent is None:
                state.stats.unresolved_blocks += len(event.block_hashes)
                return
        keys = event.extra_keys
        for i, vllm_hash in enumerate(event.block_hashes):
            tokens = tuple(event.token_ids[i * size : (i + 1) * size])
            block_keys = keys[i] if keys and i < len(keys) else None
            if parent is None:
                ours = (
                    token_block_hashes(tokens, size, salt=salt)[0]
                    if plain
                    else _opaque_key(0, tokens, block_keys)
                )
            elif block_keys:
                ours = _opaque_key(parent, tokens, block_keys)
            else:
                ours = hash((parent, tokens))  # the chaining of hashing.token_block_hashes
            key = (medium, group, vllm_hash)
            old = blocks.get(key)
            if old is None:
                if len(blocks) >= self.capacity_blocks:
                    state.stats.overflow_blocks += len(event.block_hashes) - i
                    return
                blocks[key] = ours
                present[ours] = present.get(ours, 0) + 1
            elif old != ours:  # same vLLM hash, other tokens: trust the newest
                self._unref(present, old)
                blocks[key] = ours
                present[ours] = present.get(ours, 0) + 1
            parent = ours

    def _remove(self, state: _BackendKv, event: BlockRemoved) -> None:
        blocks, present = state.blocks, state.present
        for vllm_hash in event.block_hashes:
            ours = blocks.pop((event.medium, event.group_idx, vllm_hash), None)
            if ours is not None:
                self._unref(present, ours)

    @staticmethod
    def _unref(present: dict[int, int], ours: int) -> None:
        left = present.get(ours, 0) - 1
        if left > 0:
            present[ours] = left
        else:
            present.pop(ours, None)
