"""The seams between drivers (controller service, simulator) and pure policies.

A driver feeds facts in (a call arrived, tokens streamed, a call finished, a program ended) and
asks :class:`~agentrt_controller.scheduling.dispatcher.Dispatcher` which queued calls to admit to
which backend now. Policies plug in behind three one-job protocols:

* :class:`Scheduler` — orders queued calls (FCFS, MLFQ, PLAS, ATLAS, SRPT...);
* :class:`~agentrt_controller.routing.api.Router` — picks a backend for the call about to be
  admitted (it lives in :mod:`agentrt_controller.routing`);
* :class:`AdmissionPolicy` — says whether a backend may take one more call now.

This module holds :class:`BackendView`; the call itself is in
:mod:`agentrt_controller.scheduling.call` (its facts, and the scheduler's entry for it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from agentrt_controller.keys import ProgramKey
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.scheduling.call import CallEntry, copier


@dataclass(frozen=True, slots=True)
class BackendView:
    """What the policies know about one backend at decision time."""

    #: Stable backend id (e.g. its base URL or ``engine-0``).
    backend_id: str
    #: Sequences of the calls the controller admitted to it that have not finished (a call
    #: counts its ``CallFacts.sequences``, its ``n``; 1 per call in the simulator).
    in_flight: int
    #: False while a health check or the circuit breaker says the backend is down.
    healthy: bool = True
    #: Scraped ``vllm:num_requests_running``; ``None`` = unknown.
    num_running: int | None = None
    #: Scraped ``vllm:num_requests_waiting``; ``None`` = unknown.
    num_waiting: int | None = None
    #: Scraped ``vllm:kv_cache_usage_perc`` as a fraction in [0, 1]; ``None`` = unknown.
    kv_cache_usage: float | None = None
    #: Whether the backend honours a per-request ``priority`` (vLLM with priority scheduling).
    supports_priority: bool = False
    #: When ``num_running`` / ``num_waiting`` / ``kv_cache_usage`` were scraped (seconds,
    #: driver's clock); ``None`` = unknown. Adaptive admission reacts once per new scrape.
    metrics_at_s: float | None = None
    #: The backend's batch size (most requests it runs at once: vLLM's ``--max-num-seqs``)
    #: when it reports one (our emulator's ``agentrt_engine_max_num_seqs``, the simulator's
    #: engines); ``None`` = unknown (vLLM exposes no such metric). Bounds the adaptive window.
    max_num_seqs: int | None = None
    #: The models the backend serves (its ``/v1/models``, or as configured); ``None`` =
    #: unknown, it takes a call for any model (the ``model`` routing filter).
    models: frozenset[str] | None = None
    #: Its KV capacity (tokens) as it publishes it (vLLM's ``vllm:cache_config_info``,
    #: SGLang's ``sglang:max_total_num_tokens``; the simulator's engines); ``None`` = unknown.
    #: Memory-aware admission (:mod:`agentrt_controller.scheduling.memory`) acts only where
    #: it is known (or configured).
    kv_capacity_tokens: int | None = None
    #: Tokens of KV its CPU tier holds (vLLM's native offloading, ``--kv-offloading-size``;
    #: the simulator's ``kv_offloading_size``): what memory cannot hold is offloaded there and
    #: reloaded at host-link bandwidth instead of recomputed. 0 = none or unknown.
    cpu_kv_capacity_tokens: int = 0

    def with_in_flight(self, in_flight: int) -> BackendView:
        """This view with ``in_flight`` instead (what :func:`dataclasses.replace` does; an
        admission round makes one per admitted call: a :func:`copier` copy, not a call of the
        frozen ``__init__``)."""
        return _with_in_flight(self, in_flight)


_with_in_flight = copier(BackendView, "in_flight")


class Scheduler(Protocol):
    """Orders queued calls. Implementations keep their own queues; program-level facts
    (attained service, waiting, critical path, active calls) live in :attr:`table`, which the
    scheduler keeps up to date from the calls below (docs/scheduling.md)."""

    #: Short policy name (``fcfs``, ``plas``...), used in metrics and introspection.
    name: str
    #: The process table the scheduler reads priorities from and records calls in.
    table: ProcessTable

    def submit(self, call: CallEntry, now_s: float) -> None:
        """Enqueue an arrived call."""

    def pop(self, now_s: float) -> CallEntry | None:
        """Remove and return the call to admit next, or ``None`` when none is queued."""

    def requeue(self, call: CallEntry, now_s: float) -> None:
        """Put back a popped call that could not be admitted (it keeps its place)."""

    def cancel(self, call: CallEntry, now_s: float) -> bool:
        """Remove a queued call (its client went away); ``False`` if it was not queued."""

    def queued(self) -> int:
        """Number of queued calls."""

    def backend_priority(self, call: CallEntry) -> int:
        """The ``priority`` value to send to a backend that supports it (lower runs first)."""

    def on_tokens(self, call: CallEntry, new_tokens: int, now_s: float) -> None:
        """Output tokens streamed for an admitted call (quantum accounting)."""

    def token_counter(self, call: CallEntry) -> Callable[[CallEntry, int, float], None]:
        """The :meth:`on_tokens` that counts ``call``'s tokens: a wrapper (the retained lane,
        fair shares) gives its inner queue's, so that the Dispatcher resolves it once per call
        and each streamed read goes straight to the queue that counts it. The same for the
        call's whole life (its lane and tenant never change)."""

    def on_finish(self, call: CallEntry, service_s: float, now_s: float) -> None:
        """An admitted call finished; ``service_s`` is the service charged for it."""

    def drop_expired(self, now_s: float) -> list[CallEntry]:
        """Remove and return queued calls whose deadline has passed."""

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        """Forget everything about a program (its process-table entry)."""

    def snapshot(self, now_s: float) -> dict[str, object]:
        """JSON-able view of the queues, for introspection."""


class AdmissionPolicy(Protocol):
    """Says whether a backend may take one more call from the controller's queues now."""

    name: str

    def has_room(self, backend: BackendView, now_s: float) -> bool: ...

    def answer_fixed_by_view(self, backend: BackendView) -> bool:
        """Whether :meth:`has_room` answers the same for this very ``backend`` view, at any
        later ``now_s``, as long as every question about that backend is about this view
        (then a driver may remember the answer per view object). ``False`` is always safe."""
        ...
