"""Memory-aware admission: do not start a prefill the backend's KV memory cannot hold
(docs/scheduling.md, "Admission under memory pressure").

A long-context agent (a coding agent: 12 K → 85 K tokens of context over 30 calls, tool waits
between them) keeps its context in the engine's prefix cache from one call to the next. One
A100 with Llama-3-8B holds ~470 K tokens of KV: about five such programs. A stock engine admits
every call first come, first served, so past that point each new program's prefill evicts the
context of a program that is waiting on a tool; that one recomputes its 80 K tokens when it comes
back, evicting another: the engine thrashes (preemptions, recompute), and every program slows
down. ThunderAgent (arXiv 2602.13692, §4) limits the programs *active* on an engine to what its
memory holds; this module does the same at the controller, before a call reaches the engine.

**The ledger.** Per backend, the programs *resident* there: a program becomes resident when one
of its calls is admitted to the backend, and holds ``tokens`` of KV — the largest context of its
calls there (prompt, then prompt + streamed output). It stops being resident when it ends, when
its calls go elsewhere, or when it has had no call running there for ``idle_release_s`` while no
retention pin holds it (the engine may evict an idle context; we stop reserving room for it).
The *demand* on a backend is the sum of its residents' tokens plus the tokens of the contexts
pinned there (retention, :data:`PinnedSource`) of programs not resident. A prefix several
residents hold — a shared repository, a system prompt: the same leading blocks of their prompts'
hash chains (``CallFacts.block_hashes``; the engine caches it once) — is counted once. The
ledger counts shared blocks and turns them into tokens at use, at the tokens per chain element
of the latest call admitted there (``CallFacts.block_tokens``: the controller's chains are over
text, and how many tokens 64 characters make is learned per model from the backends' usage).

**The rule** (:meth:`MemoryAdmission.fits`), for a call of program ``P`` on a backend of KV
capacity ``C`` tokens (``BackendView.kv_capacity_tokens``, else the configured
``kv_capacity_tokens``; unknown = no rule):

* a call whose growth is below the backend's *short-context threshold* is admitted: a short
  context is cheap to recompute, so holding anyone back for it costs more than it saves
  (residents holding less than that reserve nothing either). The threshold
  (:meth:`MemoryAdmissionConfig.min_context`) is ``min_context_tokens`` when set; by default a
  thirty-second of ``C``, within 2,048 and 8,192 tokens: 8,192 on a full-size engine (an
  A100's 470 K tokens), 2,048 on one of 65 K tokens, where a 4 K-token context is 6 % of the
  memory and worth its place in the ledger;
* ``P`` resident there: its growth is what the call adds, ``prompt_tokens - tokens(P)``; it is
  admitted while ``demand + growth <= C``;
* ``P`` not resident (a new program, or one whose context was released): its growth is its
  prompt past the prefix the residents hold there; it is admitted while
  ``demand + growth <= start_watermark x C`` — the rest is kept for the residents' contexts to
  grow;
* a backend with a KV CPU tier (``BackendView.cpu_kv_capacity_tokens``: vLLM's native
  offloading) has that much more room in both comparisons: what its memory cannot hold is
  offloaded and reloaded at host-link bandwidth, not recomputed — and a recompute thrash is
  what the rule prevents;
* deadlock guard: a call is always admitted to a backend where none of our calls run
  (``in_flight == 0``) — nothing of ours could free memory there.

A call that fits nowhere waits in the controller's queue, in its program-level order; the
Dispatcher passes over it to the calls that fit (mostly the residents': their context is on the
engine), and starts no other program's prefill before it unless that program has more invested
(:meth:`MemoryAdmission.invested_key`: a starvation promotion first, then attained service) —
the order under memory pressure that stops thrashing: programs that already hold the most go
first.

**Priority under pressure** (:meth:`MemoryAdmission.backend_priority`). On a backend that honours
a per-request priority (vLLM ``--scheduling-policy priority``) and whose demand is above
``start_watermark x C``, the call is sent with a priority from its program's resident KV,
``max(0, 8 - floor(log2(tokens / 1024)))``: 85 K tokens → 2, 12 K → 5, so when the engine must
preempt it preempts the program cheapest to recompute (ThunderAgent's shortest-first eviction).

Pure: no clock, no I/O; ``now_s`` is passed in.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Protocol

from pydantic import Field

from agentrt_controller.config_check import SECTION, check_fields, parse_section
from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.chain_counts import ChainCounts
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallEntry, CallFacts

__all__ = [
    "AUTO_MIN_CONTEXT_SHARE",
    "AUTO_MIN_CONTEXT_TOKENS",
    "MemoryAdmission",
    "MemoryAdmissionConfig",
    "PinnedContextLike",
    "PinnedSource",
    "Resident",
    "RunningCall",
    "memory_priority",
]

#: Priorities under memory pressure: ``max(0, _PRIORITY_TOP - floor(log2(tokens / 1024)))``.
_PRIORITY_TOP = 8
#: The default short-context threshold (``min_context_tokens`` unset): this share of the
#: backend's KV capacity, within :data:`AUTO_MIN_CONTEXT_TOKENS` (docs/scheduling.md,
#: "The short-context threshold").
AUTO_MIN_CONTEXT_SHARE = 1 / 32
#: Its bounds (tokens): 2,048, under which a context is cheap to recompute on any engine (0.2 s
#: of prefill at the cost model's 1e-4 s per token), and 8,192 (under a second), the threshold
#: that served the full-size engines measured (an A100's 470 K tokens) — also the threshold
#: while the capacity is unknown.
AUTO_MIN_CONTEXT_TOKENS = (2048, 8192)


@dataclass(frozen=True, slots=True)
class MemoryAdmissionConfig:
    """The ``memory_admission`` parameters; validated on construction (:class:`ConfigError`)."""

    __pydantic_config__ = SECTION

    #: Apply the rule (it acts only on backends whose KV capacity is known).
    enabled: bool = True
    #: Fraction of the KV capacity a new program's prefill may fill (in (0, 1]); the rest is
    #: kept for the resident programs' contexts to grow.
    start_watermark: Annotated[float, Field(gt=0, le=1)] = 0.9
    #: A resident program with no call running on the backend for this long, and no pin
    #: there, stops reserving memory (seconds, > 0).
    idle_release_s: Annotated[float, Field(gt=0)] = 10.0
    #: Calls the Dispatcher may pass over per admission round when they do not fit (>= 1):
    #: bounds the round's cost when many wait for memory.
    max_passed: Annotated[int, Field(ge=1)] = 64
    #: The short-context threshold (tokens, >= 0): a resident holding less reserves nothing,
    #: and a call adding less is never held. ``None`` (the default): per backend, a
    #: thirty-second of its KV capacity within 2,048 and 8,192 tokens (:meth:`min_context`).
    min_context_tokens: Annotated[int, Field(ge=0)] | None = None
    #: KV capacity (tokens) of a backend that publishes none (``BackendView.kv_capacity_tokens``
    #: unknown: e.g. an OpenAI-compatible server without metrics); ``None`` = the rule acts
    #: only on backends that publish theirs.
    kv_capacity_tokens: Annotated[int, Field(ge=1)] | None = None

    def __post_init__(self) -> None:
        check_fields(self)

    def min_context(self, capacity_tokens: int | None) -> int:
        """The short-context threshold on a backend of ``capacity_tokens`` of KV (``None``:
        unknown) — ``min_context_tokens``, or by default :data:`AUTO_MIN_CONTEXT_SHARE` of
        the capacity within :data:`AUTO_MIN_CONTEXT_TOKENS` (tokens)."""
        if self.min_context_tokens is not None:
            return self.min_context_tokens
        low, high = AUTO_MIN_CONTEXT_TOKENS
        if capacity_tokens is None:
            return high
        return min(high, max(low, int(capacity_tokens * AUTO_MIN_CONTEXT_SHARE)))

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> MemoryAdmissionConfig:
        """From a config table; unknown keys raise :class:`ConfigError`."""
        return parse_section(cls, values, "memory_admission")


class PinnedContextLike(Protocol):
    """A context a backend holds with a retention pin (the retention driver's
    ``PinnedContext``)."""

    @property
    def program(self) -> ProgramKey: ...

    #: Context length held (tokens).
    @property
    def tokens(self) -> int: ...

    #: When its thread is expected back (seconds, driver's clock).
    @property
    def due_s(self) -> float: ...


#: The contexts pinned on a backend now, by backend id (the retention driver's ``pinned``).
PinnedSource = Callable[[str], Sequence[PinnedContextLike]]


@dataclass(slots=True)
class Resident:
    """A program's context on one backend."""

    #: KV the program holds there: the largest context of its calls there (tokens).
    tokens: int
    #: Its calls running there now.
    running: int
    #: Last admission or finish of one of its calls there (seconds).
    last_active_s: float
    #: The block-hash chain of its longest prompt there (``CallFacts.block_hashes``; empty
    #: when unknown): the prefix it shares with other residents is counted once.
    chain: tuple[int, ...] = ()


def memory_priority(tokens: int) -> int:
    """The backend priority of a call whose program holds ``tokens`` of KV (lower runs first
    and is preempted last): ``max(0, 8 - floor(log2(tokens / 1024)))``, 8 below 2 K tokens."""
    if tokens < 2048:
        return _PRIORITY_TOP
    return max(0, _PRIORITY_TOP - int(math.log2(tokens / 1024)))


class _Ledger:
    """The residents of one backend, least recently touched first; the total of those
    holding at least ``min_tokens``, less the prefix blocks they share (counted once)."""

    __slots__ = ("block_tokens", "min_tokens", "refs", "residents", "shared_blocks", "total")

    def __init__(self, min_tokens: int) -> None:
        self.min_tokens = min_tokens
        self.residents: OrderedDict[ProgramKey, Resident] = OrderedDict()
        #: The sum of the tokens of the residents holding at least ``min_tokens``.
        self.total = 0
        #: Block hash -> how many counted residents' chains hold it (kept per run of blocks:
        #: a resident's arrival and end cost its new blocks, not its whole chain).
        self.refs = ChainCounts()
        #: Blocks held by more than one counted resident, beyond the first.
        self.shared_blocks = 0
        #: Tokens per chain element: the latest admitted call's ``CallFacts.block_tokens``
        #: (0 before one with a chain, when nothing is shared). One value for the ledger: a
        #: correction learned later applies to the chains counted before (the same text).
        self.block_tokens = 0.0

    def set_min_tokens(self, min_tokens: int) -> None:
        """Count the residents holding at least ``min_tokens`` from now on (the backend's
        threshold moved with its capacity: rare, so every resident is counted again)."""
        if min_tokens == self.min_tokens:
            return
        residents = list(self.residents.values())
        for entry in residents:
            if self.counted(entry.tokens):
                self._count(entry, -1)
        self.min_tokens = min_tokens
        for entry in residents:
            if self.counted(entry.tokens):
                self._count(entry, 1)

    def counted(self, tokens: int) -> int:
        """What a context of ``tokens`` adds to :attr:`total`."""
        return tokens if tokens >= self.min_tokens else 0

    def demand(self) -> int:
        """The counted residents' KV, each shared prefix block once (tokens)."""
        return max(0, self.total - int(self.shared_blocks * self.block_tokens))

    def touch(
        self,
        program: ProgramKey,
        tokens: int,
        running: int,
        now_s: float,
        chain: tuple[int, ...] = (),
    ) -> None:
        """The program's call was admitted (``running`` +1, its prompt's ``chain``) or
        finished (-1) at ``now_s``; it holds at least ``tokens``."""
        entry = self.residents.get(program)
        if entry is None:
            if running <= 0:
                return
            entry = self.residents[program] = Resident(tokens, running, now_s, chain)
            if self.counted(tokens):
                self._count(entry, 1)
            return
        old = entry.chain
        if len(chain) > len(old):
            if self.counted(entry.tokens):
                if old and chain[len(old) - 1] == old[-1]:
                    self._share(chain, 1, counted=len(old))  # the usual next turn: it extends
                else:
                    self._share(old, -1)
                    self._share(chain, 1)
            entry.chain = chain
        if tokens > entry.tokens:  # grow()'s test first: a finish (tokens 0) grows nothing
            self.grow(entry, tokens)
        entry.running = max(0, entry.running + running)
        entry.last_active_s = now_s
        self.residents.move_to_end(program)

    def grow(self, entry: Resident, tokens: int) -> None:
        """``entry`` holds ``tokens`` now, more than it held (its callers' test). Per streamed
        read of a growing context: one :meth:`counted` when it counted before."""
        held = entry.tokens
        entry.tokens = tokens
        if self.counted(held):  # counted before, so now (it grew): the difference
            self.total += tokens - held
        elif self.counted(tokens):  # counted from now on, its chain with it
            self._count(entry, 1)

    def remove(self, program: ProgramKey) -> None:
        entry = self.residents.pop(program, None)
        if entry is not None and self.counted(entry.tokens):
            self._count(entry, -1)

    def held_prefix(self, chain: tuple[int, ...], block_tokens: float) -> int:
        """Tokens of ``chain``'s leading blocks (``block_tokens`` each) that counted residents
        hold already."""
        return int(self.refs.leading(chain) * block_tokens)

    def _count(self, entry: Resident, step: int) -> None:
        """Count (``step`` 1) or stop counting (-1) a resident: its tokens and its chain."""
        self.total += step * entry.tokens
        self._share(entry.chain, step)

    def _share(self, chain: tuple[int, ...], step: int, counted: int = 0) -> None:
        """Add (``step`` 1) or take away (-1) a counted resident's chain (adding: past its
        first ``counted`` blocks, added before). A chain's hashes chain their parents, so two
        chains share exactly their common prefix."""
        shared = self.refs.add(chain, counted) if step > 0 else self.refs.remove(chain)
        self.shared_blocks += step * shared

    def release_idle(
        self, now_s: float, idle_s: float, pinned: set[ProgramKey]
    ) -> list[ProgramKey]:
        """Drop the residents idle for ``idle_s`` (no call running, not pinned); returns them.
        Only the least recently touched ones can be: the scan stops at the first touched
        since."""
        released = []
        for program, entry in list(self.residents.items()):
            if now_s - entry.last_active_s < idle_s:
                break
            if entry.running == 0 and program not in pinned:
                self.remove(program)
                released.append(program)
        return released


class RunningCall:
    """An admitted call's program, ledger (its backend's) and context: prompt and output
    streamed so far (tokens). The Dispatcher keeps it on the call (``CallEntry.context``)
    and grows it in place on every streamed read (:meth:`add`)."""

    __slots__ = ("context", "ledger", "program")

    def __init__(self, program: ProgramKey, ledger: _Ledger, prompt_tokens: int) -> None:
        self.program = program
        self.ledger = ledger
        self.context = prompt_tokens

    def add(self, new_tokens: int) -> None:
        """Output tokens streamed: the context grows, and what its program holds with it
        (while the program is resident in this ledger)."""
        context = self.context = self.context + new_tokens
        ledger = self.ledger
        entry = ledger.residents.get(self.program)
        if entry is not None and context > entry.tokens:
            ledger.grow(entry, context)


class MemoryAdmission:
    """The ledger of resident programs per backend and the admission rule (module doc)."""

    name = "memory"

    def __init__(
        self, config: MemoryAdmissionConfig | None = None, pinned: PinnedSource | None = None
    ) -> None:
        """``pinned``: the contexts pinned per backend (``None`` = none known; the driver may
        set :attr:`pinned` later)."""
        self.config = config if config is not None else MemoryAdmissionConfig()
        #: The pinned contexts per backend, or ``None``.
        self.pinned = pinned
        #: backend id -> its residents.
        self._ledgers: dict[str, _Ledger] = {}
        #: program -> the backend whose ledger holds it. One at most: an admission elsewhere
        #: moves it (:meth:`on_admit`), so moving or ending a program costs one ledger, not a
        #: look at every backend's.
        self._home: dict[ProgramKey, str] = {}
        #: call id -> the admitted call's backend, prompt and output streamed so far.
        self._running: dict[str, RunningCall] = {}
        #: Calls passed over because they did not fit (the Dispatcher counts them).
        self.held_total = 0

    # --- events (the Dispatcher's) ------------------------------------------------------------

    def on_admit(self, facts: CallFacts, view: BackendView, now_s: float) -> RunningCall:
        """``facts``' call was admitted to ``view``'s backend; returns its record, which the
        streamed reads grow (:meth:`RunningCall.add`) until :meth:`on_finish`."""
        program = facts.program
        backend_id = view.backend_id
        home = self._home.get(program)
        if home is not None and home != backend_id:  # its context now grows elsewhere
            self._ledgers[home].remove(program)
        min_tokens = self.min_context(view)
        ledger = self._ledgers.get(backend_id)
        if ledger is None:
            ledger = self._ledgers[backend_id] = _Ledger(min_tokens)
        else:  # a no-op unless its capacity became known, or changed
            ledger.set_min_tokens(min_tokens)
        if facts.block_hashes:
            ledger.block_tokens = facts.block_tokens
        ledger.touch(program, facts.prompt_tokens, 1, now_s, facts.block_hashes)
        self._home[program] = backend_id
        running = self._running[facts.call_id] = RunningCall(program, ledger, facts.prompt_tokens)
        return running

    def on_finish(self, facts: CallFacts, now_s: float) -> None:
        """An admitted call finished (or was put back: it is no longer running; the driver
        grows its record no more)."""
        running = self._running.pop(facts.call_id, None)
        if running is None:
            return
        running.ledger.touch(facts.program, 0, -1, now_s)

    def on_program_end(self, program: ProgramKey) -> None:
        """The program ended (or expired): it holds nothing any more."""
        home = self._home.pop(program, None)
        if home is not None:
            self._ledgers[home].remove(program)

    # --- decisions ------------------------------------------------------------------------------

    def resident(self, program: ProgramKey, backend_id: str, now_s: float) -> Resident | None:
        """The program's context on ``backend_id`` while it reserves memory there, else
        ``None``."""
        ledger = self._ledgers.get(backend_id)
        if ledger is None:
            return None
        self._release_idle(backend_id, ledger, now_s)
        return ledger.residents.get(program)

    def demand_tokens(self, backend_id: str, now_s: float) -> int:
        """Tokens reserved on ``backend_id``: its residents' contexts and the pinned contexts
        of programs not resident (idle residents past ``idle_release_s`` without a pin are
        released here)."""
        pins = self.pinned(backend_id) if self.pinned is not None else ()
        ledger = self._ledgers.get(backend_id)
        if ledger is None:
            return sum(pin.tokens for pin in pins)
        self._release_idle(backend_id, ledger, now_s, pins)
        residents = ledger.residents
        return ledger.demand() + sum(pin.tokens for pin in pins if pin.program not in residents)

    def min_context(self, view: BackendView) -> int:
        """The short-context threshold on ``view``'s backend (tokens;
        :meth:`MemoryAdmissionConfig.min_context`)."""
        return self.config.min_context(self.capacity_tokens(view))

    def capacity_tokens(self, view: BackendView) -> int | None:
        """The backend's KV capacity (tokens): reported, else the configured
        ``kv_capacity_tokens``; ``None`` when the rule is off or the capacity unknown."""
        if not self.config.enabled:
            return None
        capacity = view.kv_capacity_tokens or self.config.kv_capacity_tokens
        return capacity if capacity is not None and capacity > 0 else None

    def fits(self, facts: CallFacts, view: BackendView, now_s: float) -> bool:
        """Whether the call may start on ``view``'s backend now (the module doc's rule).
        Always ``True`` when disabled or when the backend's KV capacity is unknown."""
        capacity = self.capacity_tokens(view)
        if capacity is None:
            return True
        if view.in_flight == 0:
            return True  # deadlock guard: nothing of ours there could free memory
        entry = self.resident(facts.program, view.backend_id, now_s)
        if entry is not None:
            held = entry.tokens
        else:  # a prefix the residents hold (a shared repository, a system prompt) is there
            ledger = self._ledgers.get(view.backend_id)
            held = (
                ledger.held_prefix(facts.block_hashes, facts.block_tokens)
                if ledger is not None
                else 0
            )
        growth = facts.prompt_tokens - held
        if growth < self.config.min_context(capacity):
            return True  # cheap either way: a short prompt, or a resident's next turn
        demand = self.demand_tokens(view.backend_id, now_s)
        # What memory cannot hold goes to the backend's CPU tier and comes back at host-link
        # bandwidth: room too (a recompute thrash is what the rule prevents, not a reload).
        spill = view.cpu_kv_capacity_tokens
        if entry is not None:
            return demand + growth <= capacity + spill
        return demand + growth <= self.config.start_watermark * capacity + spill

    def is_long_start(self, facts: CallFacts, views: Sequence[BackendView], now_s: float) -> bool:
        """Whether the call starts a long prefill on ``views``' backends: its prompt is at
        least the short-context threshold of one of them and its program reserves memory on
        none (the calls whose order the Dispatcher keeps under memory pressure)."""
        if all(facts.prompt_tokens < self.min_context(view) for view in views):
            return False
        return all(self.resident(facts.program, v.backend_id, now_s) is None for v in views)

    def under_pressure(self, view: BackendView, now_s: float) -> bool:
        """Whether the demand on ``view``'s backend is above ``start_watermark`` of its
        capacity (``False`` when the capacity is unknown or the rule is off)."""
        capacity = self.capacity_tokens(view)
        if capacity is None:
            return False
        demand = self.demand_tokens(view.backend_id, now_s)
        return demand > self.config.start_watermark * capacity

    def backend_priority(self, facts: CallFacts, backend_id: str, now_s: float) -> int:
        """The priority to send under memory pressure (:func:`memory_priority` of what the
        program holds there, its prompt when it holds nothing)."""
        entry = self.resident(facts.program, backend_id, now_s)
        return memory_priority(max(facts.prompt_tokens, entry.tokens if entry else 0))

    @staticmethod
    def invested_key(call: CallEntry, attained_service_s: float) -> tuple[int, float]:
        """How much a waiting program has invested, for the order of program starts under
        memory pressure (larger = first): a call promoted by anti-starvation first, then the
        program's attained service (seconds)."""
        return (1 if call.promotions > 0 else 0, attained_service_s)

    def snapshot(self, now_s: float) -> dict[str, object]:
        """JSON-able: per backend the reserved tokens and resident programs."""
        return {
            "enabled": self.config.enabled,
            "held_total": self.held_total,
            "backends": {
                backend_id: {
                    "demand_tokens": self.demand_tokens(backend_id, now_s),
                    "min_context_tokens": ledger.min_tokens,
                    "residents": len(ledger.residents),
                }
                for backend_id, ledger in self._ledgers.items()
            },
        }

    # --- helpers --------------------------------------------------------------------------------

    def _release_idle(
        self,
        backend_id: str,
        ledger: _Ledger,
        now_s: float,
        pins: Sequence[PinnedContextLike] | None = None,
    ) -> None:
        residents = ledger.residents
        if not residents:
            return
        oldest = next(iter(residents.values()))
        if now_s - oldest.last_active_s < self.config.idle_release_s:
            return  # nobody idle long enough (the common case: no pin lookup)
        if pins is None:
            pins = self.pinned(backend_id) if self.pinned is not None else ()
        pinned = {pin.program for pin in pins}
        for program in ledger.release_idle(now_s, self.config.idle_release_s, pinned):
            del self._home[program]
