"""One LLM call as the policies see it, in two parts (docs/scheduling.md, "A call in two parts").

* :class:`CallFacts` — what the driver knows about the call: ids (one :class:`ProgramKey`),
  sizes, deadline, hashes. Immutable: a fact learnt later (the token chain the controller
  computes just before submission) makes a new value with :func:`dataclasses.replace`.
* :class:`CallEntry` — the scheduler's own record of a submitted call: the facts plus what the
  scheduler and the :class:`~agentrt_controller.scheduling.dispatcher.Dispatcher` write (level,
  waits, charged service...). ``Dispatcher.submit`` makes it; only ``scheduling/`` writes it;
  drivers hold it as the handle of the call (``on_tokens``, ``on_finish``, ``requeue``...).

Like vLLM's ``Request`` apart from its scheduler's state. No prompt contents, only sizes and
ids. Simulator-only oracle figures (the clairvoyant SRPT bound) are not here: SRPT asks the
simulator's oracle (:mod:`agentrt_controller.scheduling.srpt`).

This module imports nothing of the scheduling package, so the process table and the
scheduler's protocols can both import it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from agentrt_controller.keys import ProgramKey

__all__ = ["CallEntry", "CallFacts", "GrowingContext", "Lane", "copier", "maker", "new_call_facts"]

T = TypeVar("T")

#: The queue a call waits in: the scheduler's, or the Dispatcher's retained lane.
Lane = Literal["scheduler", "retained"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CallFacts:
    """What a driver knows about one LLM call (keyword-only: several fields are strings)."""

    #: Unique id of the call (controller request id or simulator call id).
    call_id: str
    #: The program the call belongs to (tenant, session, program id), built once per call by
    #: the driver; untagged calls get a one-call program of their own
    #: (:meth:`ProgramKey.one_call`).
    program: ProgramKey
    #: Parallel branch of the program (the SDK's thread id).
    thread_id: str = "main"
    #: The call's node id in the program DAG.
    node_id: str = ""
    #: Parent node ids (DAG edges), as tagged by the SDK. Reserved: carried, read by no policy.
    parent_ids: tuple[str, ...] = ()
    #: Arrival at the controller (seconds, driver's clock).
    arrival_s: float = 0.0
    #: Absolute deadline (seconds, driver's clock); ``math.inf`` = none.
    deadline_s: float = math.inf
    #: Prompt length (tokens): an estimate, exact once the driver has the token ids.
    prompt_tokens: int = 0
    #: Maximum output length (tokens) if the request says; ``None`` = not said.
    max_tokens: int | None = None
    #: Sequences the backend runs for the call at once (>= 1): the request's ``n``, or its
    #: ``best_of`` when larger (completions). Admission windows, the tenants' ``max_in_flight``
    #: and a backend's in-flight count add this, not 1 (docs/controller.md, "Sequences, not
    #: calls"). The simulator's calls have 1.
    sequences: int = 1
    #: ``latency`` or ``throughput`` (agentrt.protocol.HEADER_OBJECTIVE). Reserved: carried,
    #: read by no policy.
    objective: str = "latency"
    #: The SDK's attempt number (1 = first try, agentrt.protocol.HEADER_ATTEMPT). Reserved:
    #: carried, read by no policy.
    attempt: int = 1
    #: Hash chain of the prompt's blocks (one int per block, for prefix-aware routing);
    #: empty when unknown.
    block_hashes: tuple[int, ...] = ()
    #: Tokens per element of :attr:`block_hashes`, as the driver counts them: the simulator's
    #: chains are over token ids (its engines' block size); the controller's over text
    #: (``routing.hashing.DEFAULT_BLOCK_TOKENS`` x 4 characters per element), which its
    #: prompt-size factor for the model turns into the backend's tokens
    #: (``service/http/prompt_size.py``). The memory rule counts the prefixes residents share
    #: with it. The default is ``DEFAULT_BLOCK_TOKENS`` (``routing`` imports this module, so
    #: it is written out here; ``tests/controller_policies/test_call.py`` checks they agree).
    block_tokens: float = 16.0
    #: The prompt's chain over the server's own token ids, :attr:`token_block_size` tokens per
    #: element (:func:`~agentrt_controller.routing.hashing.token_block_hashes`, salted by the
    #: request's ``cache_salt``), for the exact prefix index fed by vLLM's KV events; empty
    #: when the driver has no token ids (the router then uses :attr:`block_hashes`).
    token_block_hashes: tuple[int, ...] = ()
    #: Tokens per element of :attr:`token_block_hashes` (tokens; 0 = no chain).
    token_block_size: int = 0
    #: The model the call asks for (after the driver resolved aliases and fallbacks); only
    #: backends serving it may take the call (the ``model`` routing filter, docs/routing.md,
    #: "Several models"). ``None`` = any backend (a driver with one model: the simulator).
    model: str | None = None

    def with_block_hashes(self, block_hashes: tuple[int, ...]) -> CallFacts:
        """These facts with ``block_hashes`` instead (what :func:`dataclasses.replace` does;
        the controller makes one per call: :func:`copier`'s copy, not a call of the frozen
        ``__init__``)."""
        return _with_block_hashes(self, block_hashes)


def _written_out(
    cls: type[Any], label: str, signature: str, values: list[str], scope: dict[str, Any]
) -> Callable[..., Any]:
    """``def f(<signature>)`` that builds a ``cls`` with ``object.__new__`` and sets field
    number *i* to the expression ``values[i]`` through its slot's descriptor — one statement
    per field, no loop, as :mod:`dataclasses` writes ``__init__`` — compiled under a name of
    this file (profilers put it with the policies, not under ``"<string>"``). ``scope`` holds
    the names ``values`` and ``signature`` use beyond the fields'."""
    scope = {**scope, "_new": object.__new__, "_cls": cls}
    lines = [f"def build({signature}):", "    out = _new(_cls)"]
    for index, field in enumerate(fields(cls)):
        scope[f"_set{index}"] = cls.__dict__[field.name].__set__
        lines.append(f"    _set{index}(out, {values[index]})")
    lines.append("    return out")
    exec(compile("\n".join(lines), f"{__file__}#{label}", "exec"), scope)  # names checked
    built: Callable[..., Any] = scope["build"]
    return built


def _field_names(cls: type[Any], who: str) -> list[str]:
    """``cls``'s field names, each checked to be an identifier (a dataclass field always is:
    never run as code)."""
    names = [f.name for f in fields(cls)]
    for name in names:
        if not name.isidentifier():
            raise TypeError(f"{who}: field name {name!r}")
    return names


def copier(cls: type[T], name: str) -> Callable[[T, Any], T]:
    """A function ``(obj, value) -> copy of obj with field name = value`` for a frozen,
    slotted dataclass ``cls`` without ``__post_init__``: :func:`dataclasses.replace` for one
    field, at a third to a half of the cost of a call of the frozen ``__init__`` (which parses
    its keyword arguments and makes an ``object.__setattr__`` call per field). Every field is
    copied, so a field added later needs no change here
    (``tests/controller_policies/test_copies.py`` checks it against ``replace``)."""
    names = _field_names(cls, "copier")
    if name not in names or getattr(cls, "__post_init__", None) is not None:
        raise TypeError(f"copier({cls.__name__}, {name!r}): no such field, or a __post_init__")
    values = ["value" if n == name else f"obj.{n}" for n in names]
    copy = _written_out(cls, f"copier({cls.__name__}.{name})", "obj, value", values, {})
    copy.__qualname__ = f"{cls.__name__}.copy_with_{name}"
    return copy


def maker(cls: type[T]) -> Callable[..., T]:
    """A keyword-only constructor for a frozen, slotted dataclass ``cls`` without
    ``__post_init__`` or ``default_factory`` fields: what its ``__init__`` builds, at half of
    the cost (each field set through its slot's descriptor, like :func:`copier`). The defaults
    are the class's own objects, so a field added later needs no change here
    (``tests/controller_policies/test_copies.py`` checks it against the ``__init__``)."""
    found = fields(cls)  # type: ignore[arg-type]
    if getattr(cls, "__post_init__", None) is not None or any(
        f.default_factory is not MISSING or not f.init for f in found
    ):
        raise TypeError(f"maker({cls.__name__}): a __post_init__, default_factory or init=False")
    names = _field_names(cls, "maker")
    defaults: dict[str, Any] = {}
    params: list[str] = []
    for index, field in enumerate(found):
        if field.default is MISSING:
            params.append(field.name)
        else:
            defaults[f"_default{index}"] = field.default
            params.append(f"{field.name}=_default{index}")
    make = _written_out(cls, f"maker({cls.__name__})", f"*, {', '.join(params)}", names, defaults)
    make.__qualname__ = f"{cls.__name__}.make"
    return make


_with_block_hashes = copier(CallFacts, "block_hashes")

if TYPE_CHECKING:  # type checkers see (and check the keywords of) the class itself
    new_call_facts = CallFacts
else:
    #: :class:`CallFacts` ``(**fields)`` at half the cost: the controller makes one per call.
    new_call_facts = maker(CallFacts)


class GrowingContext(Protocol):
    """A running call's context that its streamed tokens grow (the memory rule's
    ``RunningCall``)."""

    def add(self, new_tokens: int) -> None: ...


@dataclass(slots=True, eq=False)
class CallEntry:
    """The scheduler's record of one submitted call (made by ``Dispatcher.submit``).

    Written by the scheduler and the Dispatcher only; drivers and routers read it. Compared
    by identity: two entries are the same call only if they are the same object.
    """

    #: What the driver knows about the call. Replaced (never mutated) once, by
    #: ``Dispatcher.on_finish``, when the driver knows the chain the backend holds after the
    #: call (prompt and output: the simulator), so the router's index learns it.
    facts: CallFacts
    #: The backend that retains the call's KV (its thread's context), given by the driver at
    #: submission when the call arrived inside a retention window; ``None`` = not retained.
    #: The Dispatcher and the ``retained`` routing filter send the call there when they can.
    retained_backend: str | None = None
    #: Program-level priority when the call was enqueued (seconds of service; lower = sooner).
    priority_s: float = 0.0
    #: Current queue index (0 = highest).
    level: int = 0
    #: Start of the call's current wait segment (seconds, driver's clock): set on submit and
    #: requeue.
    enqueued_s: float = 0.0
    #: Time this call has spent queued (seconds), reset on anti-starvation promotion.
    wait_s: float = 0.0
    #: Service charged to this call so far (seconds), reset on anti-starvation promotion.
    service_s: float = 0.0
    #: Output tokens streamed so far within the current queue's quantum (tokens).
    quantum_tokens: int = 0
    #: Monotone sequence number given at submission; breaks ties deterministically.
    seq: int = 0
    #: The queue the call was submitted to (set by the Dispatcher).
    lane: Lane = "scheduler"
    #: Multi-level schedulers: the call entered Q1 because its program was retained
    #: (``SchedulerConfig.boost_retained``).
    retention_boost: bool = False
    #: Multi-level schedulers: anti-starvation promotions so far (shown in introspection).
    promotions: int = 0
    #: When the call entered its current level (seconds, driver's clock): the FCFS key inside
    #: a level. Set on submit, demotion and promotion; a requeue keeps it, so the call keeps
    #: its place.
    level_entered_s: float = 0.0
    #: The scheduler's ``on_tokens`` that counts the call's streamed tokens
    #: (``Scheduler.token_counter``), resolved by the Dispatcher at the call's first streamed
    #: read and kept (a call's lane and tenant never change); ``None`` until then.
    count_tokens: Callable[[CallEntry, int, float], None] | None = None
    #: While admitted under memory admission: the call's record in its backend's ledger
    #: (``MemoryAdmission.on_admit``), grown by each streamed read; ``None`` otherwise.
    context: GrowingContext | None = None

    def __repr__(self) -> str:
        return f"CallEntry(call_id={self.facts.call_id!r}, level={self.level}, lane={self.lane})"
