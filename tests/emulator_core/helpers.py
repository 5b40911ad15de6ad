"""Small builders shared by the engine-model tests."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from agentrt_emulator.core import EngineConfig, EngineCore, EngineRequest, StepResult, get_profile


def engine(profile: str = "unit-step", **config: object) -> EngineCore:
    """An engine with ``EngineConfig(**config)`` on a named profile."""
    return EngineCore(replace(EngineConfig(), **config), get_profile(profile))  # type: ignore[arg-type]


def request(
    request_id: str,
    prompt: int | Sequence[int],
    output: int,
    *,
    arrival_s: float = 0.0,
    priority: int = 0,
    cache_salt: str | None = None,
    first_token: int = 0,
) -> EngineRequest:
    """A request whose prompt is ``prompt`` tokens (``range(n)`` if an int) and whose output is
    ``output`` tokens ``first_token, first_token + 1, ...``."""
    prompt_ids = list(range(prompt)) if isinstance(prompt, int) else list(prompt)
    return EngineRequest(
        request_id=request_id,
        prompt_token_ids=prompt_ids,
        output_token_ids=list(range(first_token, first_token + output)),
        arrival_s=arrival_s,
        priority=priority,
        cache_salt=cache_salt,
    )


@dataclass
class Trace:
    """What a run to completion produced, per request and per step."""

    steps: list[StepResult] = field(default_factory=list)
    #: request id -> 1-based index of the step that produced its first token
    first_token_step: dict[str, int] = field(default_factory=dict)
    #: request id -> 1-based index of the step in which it finished
    finish_step: dict[str, int] = field(default_factory=dict)
    #: request id -> clock time at the end of the step in which it finished
    finish_s: dict[str, float] = field(default_factory=dict)
    #: request id -> output tokens seen
    tokens: dict[str, int] = field(default_factory=dict)
    #: request id -> num_cached_tokens last reported
    cached: dict[str, int] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)
    now_s: float = 0.0


def run(core: EngineCore, *, now_s: float = 0.0, max_steps: int = 1, limit: int = 100_000) -> Trace:
    """Step ``core`` until idle (or blocked), recording a :class:`Trace`."""
    trace = Trace(now_s=now_s)
    steps_done = 0
    for _ in range(limit):
        result = core.step(trace.now_s, max_steps=max_steps, horizon_s=math.inf)
        if result is None:
            return trace
        record(trace, result, steps_done)
        steps_done += result.num_steps
    raise AssertionError("engine did not become idle")


def record(trace: Trace, result: StepResult, steps_before: int) -> None:
    """Fold one step result into ``trace``."""
    trace.steps.append(result)
    trace.now_s += result.duration_s
    last = steps_before + result.num_steps
    for p in result.progress:
        trace.tokens[p.request_id] = trace.tokens.get(p.request_id, 0) + p.new_tokens
        trace.cached[p.request_id] = p.num_cached_tokens
        if p.first_token:
            trace.first_token_step[p.request_id] = last
        if p.finished:
            trace.finish_step[p.request_id] = last
            trace.finish_s[p.request_id] = trace.now_s
    trace.preempted.extend(result.preempted)
