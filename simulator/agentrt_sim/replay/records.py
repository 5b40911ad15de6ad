"""What a replay records, per node, as the client sees it (wall seconds since the run's start).

Plain data, filled by :mod:`agentrt_sim.replay.runner` and turned into the simulator's
:class:`~agentrt_sim.metrics.ProgramRecord` by :mod:`agentrt_sim.replay.summary`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agentrt_sim.workloads.program import Program

__all__ = ["CallRecord", "NodeSpan", "ProgramResult", "ReplayResult"]


@dataclass(slots=True)
class NodeSpan:
    """When one node of the trace ran (wall seconds since the run's start)."""

    #: When its last parent finished (its arrival, for a root: the program's start).
    release_s: float
    finish_s: float = float("nan")


@dataclass(slots=True)
class CallRecord:
    """One LLM call."""

    node_id: str
    #: The SDK thread the call ran in (what the server sees in ``X-Agentrt-Thread-Id``).
    sdk_thread_id: str
    #: From its first send: ``span.release_s`` -> ``span.finish_s`` covers every attempt.
    span: NodeSpan
    #: First streamed content token of the attempt that answered (wall seconds since start;
    #: NaN if none came): a cut attempt's tokens were thrown away with it.
    first_token_s: float = float("nan")
    #: Prompt tokens the trace implies, and what the builder expects the server to count.
    trace_prompt_tokens: int = 0
    expected_prompt_tokens: int = 0
    #: ``max_tokens`` sent (= the trace's ``output_tokens``).
    max_tokens: int = 0
    #: From the response's ``usage`` (None when the server sent none).
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    #: ``X-Agentrt-Queue-Ms`` of the response: the controller's queueing (seconds; None = no
    #: such header, i.e. no controller).
    controller_queue_s: float | None = None
    #: Times the call was re-sent after a cut stream, a refused connection or a gateway's
    #: 502 / 503 (``agentrt_sim.replay.stream.resendable``); 0 = answered at once.
    resent: int = 0


@dataclass(slots=True)
class ProgramResult:
    """One replayed program."""

    program: Program
    #: Wall seconds since start: when it began (its arrival) and when its last node finished.
    start_s: float = float("nan")
    finish_s: float = float("nan")
    spans: dict[str, NodeSpan] = field(default_factory=dict)
    calls: dict[str, CallRecord] = field(default_factory=dict)
    #: Trace thread id -> SDK thread id.
    threads: dict[str, str] = field(default_factory=dict)
    #: Why the program did not finish (None = it did).
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.error is None and not math.isnan(self.finish_s)


@dataclass(slots=True)
class ReplayResult:
    """A whole replay."""

    programs: list[ProgramResult]
    #: Wall seconds from start to the last program's end.
    wall_s: float
    #: ``/metrics`` counters (``agentrt_sim.replay.server.COUNTERS``) before and after the run;
    #: a name the server does not expose is absent.
    counters_before: dict[str, float] = field(default_factory=dict)
    counters_after: dict[str, float] = field(default_factory=dict)
