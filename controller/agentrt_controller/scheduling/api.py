"""The seams between drivers (controller service, simulator) and pure policies.

A driver feeds facts in (a call arrived, tokens streamed, a call finished, a program ended) and
asks :class:`~agentrt_controller.scheduling.dispatcher.Dispatcher` which queued calls to admit to
which backend now. Policies plug in behind three one-job protocols:

* :class:`Scheduler` — orders queued calls (FCFS, MLFQ, PLAS, ATLAS, SRPT...);
* :class:`~agentrt_controller.routing.api.Router` — picks a backend for the call about to be
  admitted (it lives in :mod:`agentrt_controller.routing`);
* :class:`AdmissionPolicy` — says whether a backend may take one more call now.

This module holds the data both sides share: :class:`Call` and :class:`BackendView`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from agentrt_controller.keys import DEFAULT_SESSION, ProgramKey

if TYPE_CHECKING:
    from agentrt_controller.process_table import ProcessTable

#: The queue a call waits in: the scheduler's, or the Dispatcher's retained lane.
Lane = Literal["scheduler", "retained"]


@dataclass(slots=True)
class Call:
    """One LLM call as the policies see it (no prompt contents, only sizes and ids)."""

    #: Unique id of the call (controller request id or simulator call id).
    call_id: str
    #: Program the call belongs to; untagged calls get a one-call program of their own.
    program_id: str
    #: Parallel branch of the program.
    thread_id: str = "main"
    #: The call's node id in the program DAG.
    node_id: str = ""
    #: Parent node ids (DAG edges), as tagged by the SDK. Reserved: carried on the call, not
    #: read by any policy.
    parent_ids: tuple[str, ...] = ()
    #: Arrival time at the controller (seconds, driver's clock).
    arrival_s: float = 0.0
    #: Absolute deadline (seconds, driver's clock); ``math.inf`` = none.
    deadline_s: float = math.inf
    #: Prompt length estimate (tokens).
    prompt_tokens: int = 0
    #: Maximum / expected output length (tokens), if the request says.
    max_tokens: int | None = None
    #: ``latency`` or ``throughput`` (see agentrt.protocol.HEADER_OBJECTIVE). Reserved: carried
    #: on the call, not read by any policy.
    objective: str = "latency"
    #: Hash chain of the prompt's blocks (for prefix-aware routing); empty when unknown.
    block_hashes: tuple[int, ...] = ()
    #: Simulator only: the true service time of this call (seconds), for clairvoyant SRPT.
    oracle_service_s: float | None = None
    #: Simulator only: the program's remaining service including this call (seconds).
    oracle_program_remaining_s: float | None = None
    #: Client session (tenant) of the program; keyword-only so positional construction of the
    #: fields above keeps working.
    session_id: str = field(default=DEFAULT_SESSION, kw_only=True)
    #: The SDK's attempt number of this call (1 = first try, see
    #: agentrt.protocol.HEADER_ATTEMPT). Reserved: carried on the call, not read by any policy.
    attempt: int = field(default=1, kw_only=True)
    #: The backend that retains this call's KV (its thread's context), set by a retention
    #: driver when the call arrives inside a retention window; ``None`` = not retained. The
    #: Dispatcher and the ``retained`` routing filter send the call there when they can.
    retained_backend: str | None = field(default=None, kw_only=True)
    #: The authenticated tenant that sent the call (the controller fills it from the API key,
    #: never from a client header); ``None`` = no tenant (the simulator). Part of
    #: :attr:`program_key`.
    tenant: str | None = field(default=None, kw_only=True)
    #: The prompt's chain over the server's own token ids, ``token_block_size`` tokens per
    #: element (:func:`~agentrt_controller.routing.hashing.token_block_hashes`, salted by the
    #: request's ``cache_salt``), for the exact prefix index fed by vLLM's KV events; empty
    #: when the driver has no token ids (the router then uses :attr:`block_hashes`).
    token_block_hashes: tuple[int, ...] = field(default=(), kw_only=True)
    #: Tokens per element of :attr:`token_block_hashes` (0 = no chain).
    token_block_size: int = field(default=0, kw_only=True)

    # --- written by the scheduler -------------------------------------------------------
    #: Program-level priority when the call was enqueued (seconds of service; lower = sooner).
    priority_s: float = 0.0
    #: Current queue index (0 = highest).
    level: int = 0
    #: Start of the call's current wait segment (seconds): set on submit and requeue.
    enqueued_s: float = 0.0
    #: Time this call has spent queued (seconds), reset on anti-starvation promotion.
    wait_s: float = 0.0
    #: Service charged to this call so far (seconds), reset on anti-starvation promotion.
    service_s: float = 0.0
    #: Output tokens streamed so far within the current queue's quantum.
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
    #: When the call entered its current level (seconds): the FCFS key inside a level. Set on
    #: submit, demotion and promotion; a requeue keeps it, so the call keeps its place.
    level_entered_s: float = 0.0

    @property
    def program_key(self) -> ProgramKey:
        """The call's program: ``tenant``, ``session_id`` and ``program_id`` as one key."""
        return ProgramKey(
            tenant=self.tenant, session_id=self.session_id, program_id=self.program_id
        )


@dataclass(frozen=True, slots=True)
class BackendView:
    """What the policies know about one backend at decision time."""

    #: Stable backend id (e.g. its base URL or ``engine-0``).
    backend_id: str
    #: Calls the controller admitted to it that have not finished.
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


class Scheduler(Protocol):
    """Orders queued calls. Implementations keep their own queues; program-level facts
    (attained service, waiting, critical path, active calls) live in :attr:`table`, which the
    scheduler keeps up to date from the calls below (docs/scheduling.md)."""

    #: Short policy name (``fcfs``, ``plas``...), used in metrics and introspection.
    name: str
    #: The process table the scheduler reads priorities from and records calls in.
    table: ProcessTable

    def submit(self, call: Call, now_s: float) -> None:
        """Enqueue an arrived call."""

    def pop(self, now_s: float) -> Call | None:
        """Remove and return the call to admit next, or ``None`` when none is queued."""

    def requeue(self, call: Call, now_s: float) -> None:
        """Put back a popped call that could not be admitted (it keeps its place)."""

    def cancel(self, call: Call, now_s: float) -> bool:
        """Remove a queued call (its client went away); ``False`` if it was not queued."""

    def queued(self) -> int:
        """Number of queued calls."""

    def backend_priority(self, call: Call) -> int:
        """The ``priority`` value to send to a backend that supports it (lower runs first)."""

    def on_tokens(self, call: Call, new_tokens: int, now_s: float) -> None:
        """Output tokens streamed for an admitted call (quantum accounting)."""

    def on_finish(self, call: Call, service_s: float, now_s: float) -> None:
        """An admitted call finished; ``service_s`` is the service charged for it."""

    def drop_expired(self, now_s: float) -> list[Call]:
        """Remove and return queued calls whose deadline has passed."""

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        """Forget everything about a program (its process-table entry)."""

    def snapshot(self, now_s: float) -> dict[str, Any]:
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
