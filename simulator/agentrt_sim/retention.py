"""The KV-retention seam of the simulator (BRIEF.md §5), with the only policy so far: off.

When a program thread starts waiting (a tool, or a human between chat turns), the simulator
hands the policy the facts a controller would have — :class:`WaitFacts` — and gets back a
:class:`RetentionDecision`. A positive TTL is realised the way the controller realises it on
our emulator: a native pin of the thread's context on the engine that served its last call
(``EngineCore.pin`` with ``ttl_s``), released when the thread's next call is scheduled on the
engine, when the TTL runs out, or at program end. While a program is retained its calls carry
``call.notes["retained_backend"]`` (the pinned engine) so routers and schedulers can honour it.

Policies are pure (STYLE.md rule 1): no clock, no I/O; ``now_s`` comes in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentrt_controller.retention import RetentionConfig, TtlRetentionPolicy

__all__ = [
    "CallObserver",
    "ControllerRetention",
    "NoRetention",
    "RetentionDecision",
    "RetentionPolicy",
    "WaitFacts",
]


@dataclass(frozen=True, slots=True)
class WaitFacts:
    """What the controller knows when a program thread starts a wait."""

    program_id: str
    thread_id: str
    #: The wait's node id.
    node_id: str
    #: ``tool`` or ``think`` (a human's turn).
    kind: str
    #: Tool name (``search``...) or ``human``.
    name: str
    #: Predicted duration from this name's history in the run (seconds); ``None`` = no history.
    predicted_duration_s: float | None
    #: Length of the context the thread's next call will extend (tokens).
    context_tokens: int
    #: Engine that served the thread's last call; ``None`` if unknown.
    backend_id: str | None
    #: That engine's KV usage in [0, 1] at the last scrape; ``None`` = unknown.
    kv_cache_usage: float | None
    #: Calls of the program that have finished so far.
    calls_finished: int
    #: The program's workload kind (``react``...): return probabilities are learned per kind.
    program_kind: str = ""
    #: That engine's KV capacity (tokens); ``None`` = unknown.
    kv_capacity_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    """Retain the thread for ``ttl_s`` seconds (0 = do not retain); ``pin``: hold its KV with
    a native pin for that long (else only the engine binding and the retained lane)."""

    ttl_s: float = 0.0
    pin: bool = True


class RetentionPolicy(Protocol):
    """Chooses a retention TTL per wait."""

    name: str

    def on_wait_start(self, facts: WaitFacts, now_s: float) -> RetentionDecision:
        """A thread began waiting; return how long to retain its KV."""

    def on_wait_end(
        self, program_id: str, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        """The wait ended after ``duration_s`` seconds (for per-tool history)."""

    def on_program_end(self, program_id: str, now_s: float) -> None:
        """Forget the program."""


class NoRetention:
    """Never retains (the baseline; the engine's LRU decides what stays cached)."""

    name = "off"

    def on_wait_start(self, facts: WaitFacts, now_s: float) -> RetentionDecision:
        return RetentionDecision(0.0)

    def on_wait_end(
        self, program_id: str, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        return None

    def on_program_end(self, program_id: str, now_s: float) -> None:
        return None


@runtime_checkable
class CallObserver(Protocol):
    """Optional: a policy that also wants to hear each released call (a thread that comes
    back after its wait), to learn how often programs return."""

    def on_call_arrived(self, program_id: str, thread_id: str, now_s: float) -> None: ...


class ControllerRetention:
    """The controller's own policy (:class:`agentrt_controller.retention.TtlRetentionPolicy`) behind
    this seam: the same object the controller service drives, so a simulated retention
    result says something about the service (STYLE.md rule 1)."""

    def __init__(self, config: RetentionConfig | None = None) -> None:
        self.policy = TtlRetentionPolicy(config)
        self.name = self.policy.name

    def on_wait_start(self, facts: WaitFacts, now_s: float) -> RetentionDecision:
        decision = self.policy.on_wait_start(facts, now_s)
        return RetentionDecision(decision.ttl_s, decision.pin)

    def on_wait_end(
        self, program_id: str, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        self.policy.on_wait_end(program_id, thread_id, node_id, duration_s, now_s)

    def on_call_arrived(self, program_id: str, thread_id: str, now_s: float) -> None:
        self.policy.on_call_arrived(program_id, thread_id, now_s)

    def on_program_end(self, program_id: str, now_s: float) -> None:
        self.policy.on_program_end(program_id, now_s)
