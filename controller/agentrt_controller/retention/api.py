"""What a retention policy is told and what it answers (docs/routing.md, "KV retention";
Continuum arXiv 2511.02230 keeps a tool-calling program's KV for a TTL).

When a program thread starts waiting on a tool (or a human), the driver — the controller
service on a tool-start event, or the simulator — hands the :class:`RetentionPolicy` a
:class:`WaitInfo` (both build a :class:`ToolWaitFacts`) and gets a :class:`RetentionDecision`:
keep the thread's KV for ``ttl_s`` seconds, or not (0). The driver then realises it per
backend: a native pin (our emulator, SGLang), affinity plus the Dispatcher's retained lane
(every backend), a re-warm before the predicted return (vLLM).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agentrt_controller.keys import ProgramKey

__all__ = ["RetentionDecision", "RetentionPolicy", "ToolWaitFacts", "WaitInfo"]


class WaitInfo(Protocol):
    """The facts a policy reads at the start of a wait (read-only)."""

    @property
    def program(self) -> ProgramKey: ...

    @property
    def thread_id(self) -> str: ...

    @property
    def node_id(self) -> str: ...

    @property
    def kind(self) -> str:
        """``tool``, or ``think`` / ``human`` for a human's turn."""
        ...

    @property
    def name(self) -> str:
        """Tool name (``search``...) or ``human``: durations are learned per name."""
        ...

    @property
    def predicted_duration_s(self) -> float | None:
        """The client's prediction (seconds, from that tool's history); ``None`` = none."""
        ...

    @property
    def context_tokens(self) -> int:
        """Length of the context the thread's next call will extend (tokens)."""
        ...

    @property
    def backend_id(self) -> str | None:
        """The backend that served the thread's last call (holds its KV); ``None`` = unknown."""
        ...

    @property
    def kv_cache_usage(self) -> float | None:
        """That backend's KV usage in [0, 1] at the last scrape (running and pinned blocks,
        not evictable cached ones); ``None`` = unknown."""
        ...


@dataclass(frozen=True, slots=True)
class ToolWaitFacts:
    """A concrete :class:`WaitInfo` (the controller service builds these from tool events, the
    simulator from its wait nodes)."""

    program: ProgramKey
    thread_id: str
    node_id: str
    kind: str
    name: str
    predicted_duration_s: float | None
    context_tokens: int
    backend_id: str | None
    kv_cache_usage: float | None
    #: That backend's KV capacity (tokens); ``None`` = unknown (then no native pins).
    kv_capacity_tokens: int | None = None
    #: Program kind / name from the program-start event ("" = unknown); return probabilities
    #: are learned per (program kind, tool name) when it is known.
    program_kind: str = ""
    #: Calls of the program finished so far; ``None`` = not counted (the controller service).
    #: No policy reads it yet.
    calls_finished: int | None = None
    #: Seconds to reload one token's KV from that backend's KV CPU tier over PCIe; ``None`` =
    #: no tier known (an evicted context is recomputed).
    reload_s_per_token: float | None = None
    #: That backend's KV CPU tier (tokens; 0 = none): an evicted context survives there.
    cpu_kv_capacity_tokens: int = 0
    #: Recent queueing delay of calls on that backend (seconds): what a program whose
    #: context was evicted waits again; ``None`` = unknown (then the policy's fallback).
    queue_wait_s: float | None = None
    #: Tokens that backend already holds with this controller's pins (not counting this one).
    pinned_tokens: int = 0


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    """Retain the thread for ``ttl_s`` seconds (0 = do not), holding its KV if ``pin``."""

    #: Retention window from the wait's start (seconds): engine binding and admission ahead
    #: of the scheduler's order while it lasts; 0 = do not retain.
    ttl_s: float = 0.0
    #: Hold the KV for the window: a native pin (emulator, SGLang) or a re-warm before the
    #: predicted return (vLLM). ``False`` = rely on the engine's LRU cache.
    pin: bool = False
    #: Short reason: ``pin``, ``retain`` (window without a pin), ``no_backend``,
    #: ``short_context``, ``unlikely_return``, ``not_worth_it``.
    reason: str = "not_worth_it"
    #: Probability the program comes back within ``ttl_s`` (0..1).
    p_return_in_ttl: float = 0.0
    #: For a pin: the expected saving (the reload or recompute avoided plus the weighted
    #: queueing delay) and the expected cost of holding the memory, both in seconds
    #: (docs/routing.md, "KV retention"); 0 without a pin.
    expected_benefit_s: float = 0.0
    expected_cost_s: float = 0.0
    #: When the program is expected back (seconds from the wait's start), given that it comes
    #: back within ``ttl_s``; ``None`` = the policy does not say (the driver then uses the
    #: client's prediction, else the TTL's end).
    expected_return_s: float | None = None
    #: For a pin: once the program is back within ``ttl_s``, how long to keep holding its KV
    #: while its call waits to be admitted (seconds from its return; the pin ends at
    #: admission anyway); 0 = only to the TTL's end.
    hold_after_return_s: float = 0.0


class RetentionPolicy(Protocol):
    """Chooses a retention per wait, and learns from what the driver reports. Pure: ``now_s``
    comes in (docs/architecture.md, "Design rules")."""

    #: Short policy name (``off``, ``ttl``), shown in results and introspection.
    name: str

    def on_wait_start(self, facts: WaitInfo, now_s: float) -> RetentionDecision:
        """A thread began waiting; return how long to retain its KV."""
        ...

    def on_wait_end(
        self, program: ProgramKey, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        """The wait ended after ``duration_s`` seconds (for per-tool history)."""

    def on_call_arrived(self, program: ProgramKey, thread_id: str, now_s: float) -> None:
        """The thread's next call arrived (it came back after its wait)."""

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        """Forget the program."""
