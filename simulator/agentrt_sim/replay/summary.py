"""A replay's records as the simulator's summary: the keys of ``agentrt bench sim --json``.

Every time is wall seconds × the time scale = model seconds. Per program, the records become
a :class:`~agentrt_sim.metrics.ProgramRecord` and go through the simulator's own
:func:`~agentrt_sim.metrics.summarize`, so quantiles, windows and the warm-up rule are the
same code. What the client can measure differs (docs/replay.md):

* **breakdown** on the critical path (the simulator's definition, ``agentrt_sim.metrics``):
  for an LLM call ``wait`` = release → first streamed token (queueing *and* prefill) and
  ``exec`` = first token → last (decode); a call that streamed no content counts wholly as
  wait. Tool and think waits are the client's own sleeps.
* **prefix hit rate**: Σ ``usage.prompt_tokens_details.cached_tokens`` ÷ Σ prompt tokens
  over measured programs when every call reported it; otherwise the delta of the server's
  ``vllm:prefix_cache_hits_total`` / ``..._queries_total`` over the whole run (warm-up
  included); else null.
* **null**: ``recomputed_prompt_tokens``, ``preemption_recomputed_tokens``,
  ``evicted_prefix_tokens`` and ``engine_steps`` (engine internals no endpoint exposes);
  ``preemptions`` unless ``/metrics`` has ``vllm:num_preemptions_total``;
  ``controller_wait_s_mean`` unless responses carry ``X-Agentrt-Queue-Ms`` (a controller).
* **re-sent calls**: ``calls_resent`` (calls sent more than once after a cut stream, a failed
  connection or a gateway's 502 / 503) and ``resends`` (the extra sends), over every
  program. A re-sent call's latency runs from its first send; its TTFT is the first token of
  the attempt that answered.
"""

from __future__ import annotations

import math
from typing import Any

from agentrt_sim.metrics import ProgramRecord, RunRecord, summarize
from agentrt_sim.replay.records import CallRecord, ProgramResult, ReplayResult
from agentrt_sim.workloads.program import LLMNode

__all__ = ["critical_path", "program_record", "summarize_replay"]

_UNMEASURED = (
    "recomputed_prompt_tokens",
    "preemption_recomputed_tokens",
    "evicted_prefix_tokens",
    "engine_steps",
)


def _call_wait(call: CallRecord) -> float:
    """Release → first token (wall seconds); the whole call when no content streamed."""
    first = call.first_token_s
    end = call.span.finish_s if math.isnan(first) else first
    return max(0.0, end - call.span.release_s)


def critical_path(result: ProgramResult) -> tuple[float, float, float, float]:
    """(wait, exec, tool, think) wall seconds along the critical path: from the node that
    finished last, step to the parent that finished last until a root."""
    nodes = {node.node_id: node for node in result.program.nodes}
    spans = result.spans
    node_id = max(spans, key=lambda n: spans[n].finish_s)
    wait = exec_ = tool = think = 0.0
    while True:
        span = spans[node_id]
        node = nodes[node_id]
        length = span.finish_s - span.release_s
        if isinstance(node, LLMNode):
            queued = _call_wait(result.calls[node_id])
            wait += queued
            exec_ += max(0.0, length - queued)
        elif node.kind == "think":
            think += length
        else:
            tool += length
        if not node.parents:
            break
        node_id = max(node.parents, key=lambda n: spans[n].finish_s)
    return wait, exec_, tool, think


def program_record(result: ProgramResult, scale: float, warmup_s: float) -> ProgramRecord:
    """The simulator's record of one finished program, in model seconds."""
    calls = list(result.calls.values())
    wait, exec_, tool, think = (scale * t for t in critical_path(result))
    arrival = scale * result.start_s
    return ProgramRecord(
        program_id=result.program.program_id,
        kind=result.program.kind,
        arrival_s=arrival,
        finish_s=scale * result.finish_s,
        output_tokens=sum(
            c.output_tokens if c.output_tokens is not None else c.max_tokens for c in calls
        ),
        calls=len(calls),
        wait_s=wait,
        exec_s=exec_,
        tool_s=tool,
        think_s=think,
        measured=arrival >= warmup_s,
        ttft_s=[
            scale * (c.first_token_s - c.span.release_s)
            for c in calls
            if not math.isnan(c.first_token_s)
        ],
        prompt_tokens=sum(
            c.prompt_tokens if c.prompt_tokens is not None else c.expected_prompt_tokens
            for c in calls
        ),
        cached_tokens=sum(c.cached_tokens or 0 for c in calls),
        call_wait_s=scale * sum(_call_wait(c) for c in calls),
        controller_wait_s=scale * sum(c.controller_queue_s or 0.0 for c in calls),
    )


def _delta(result: ReplayResult, name: str) -> float | None:
    if name not in result.counters_before or name not in result.counters_after:
        return None
    return result.counters_after[name] - result.counters_before[name]


def summarize_replay(
    result: ReplayResult, *, scale: float, warmup_s: float, window_end_s: float
) -> dict[str, Any]:
    """The ``bench sim`` metric keys (model seconds), plus the replay's own.

    ``warmup_s`` / ``window_end_s``: model seconds, as in :func:`summarize`.
    """
    finished = [r for r in result.programs if r.finished]
    records = [program_record(r, scale, warmup_s) for r in finished]
    measured = [r for r in finished if scale * r.start_s >= warmup_s]
    unfinished = [
        r for r in result.programs if not r.finished and scale * r.program.arrival_s >= warmup_s
    ]
    end_s = max((rec.finish_s for rec in records), default=0.0)
    run = RunRecord(programs=records, end_s=end_s, unfinished_programs=len(unfinished))
    summary = summarize(run, warmup_s=warmup_s, window_end_s=window_end_s)
    calls = [c for r in measured for c in r.calls.values()]
    every_call = [c for r in result.programs for c in r.calls.values()]
    for key in _UNMEASURED:
        summary[key] = None
    summary["preemptions"] = _delta(result, "vllm:num_preemptions_total")
    if not any(c.controller_queue_s is not None for c in calls):
        summary["controller_wait_s_mean"] = None
    if not calls or any(c.cached_tokens is None for c in calls):
        hits = _delta(result, "vllm:prefix_cache_hits_total")
        queries = _delta(result, "vllm:prefix_cache_queries_total")
        summary["cached_prompt_tokens"] = None
        summary["prefix_hit_rate"] = hits / queries if hits is not None and queries else None
    summary["sim_end_s"] = end_s
    summary.update(
        {
            "programs_failed": sum(1 for r in result.programs if r.error is not None),
            "errors": sorted({r.error for r in result.programs if r.error is not None})[:5],
            "prompt_tokens_trace": sum(c.trace_prompt_tokens for c in calls),
            "prompt_tokens_expected": sum(c.expected_prompt_tokens for c in calls),
            "output_tokens_trace": sum(c.max_tokens for c in calls),
            "wall_s": result.wall_s,
            # Over the whole run (warm-up and failed programs included): re-sends answer for
            # the server's failures, not for the measured window.
            "calls_resent": sum(1 for c in every_call if c.resent),
            "resends": sum(c.resent for c in every_call),
        }
    )
    return summary
