"""The summary's verdict in plain words: which kinds the controller made faster, which slower,
and why (pure: figures in, sentences out).

A kind counts as faster or slower when its mean end-to-end ratio (direct ÷ controller) leaves
[1 − :data:`UNCHANGED_BAND`, 1 + :data:`UNCHANGED_BAND`]: run to run, the demo's ratios move by
a few per cent on an idle machine (docs/demo.md, "Why these settings").

Why a kind got slower depends on the controller's policy and on how much service its programs
take. PLAS (the default) runs first the calls of the programs that have received the least
service so far, ATLAS the same along a program's critical path, MLFQ demotes programs as they
consume service quanta (Autellix, arXiv 2502.13965, §4): the kinds that make many calls and
generate many tokens (MCTS searches) yield to short programs (ReAct), which is the point. FCFS
orders by arrival only; there, and for a short kind that got slower, the cost is the
controller's own: one more hop per call and the tool-wait events.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from agentrt_demo.analysis import KindStats, Ratios
from agentrt_demo.cluster import CpuTimes

__all__ = ["STARVED", "UNCHANGED_BAND", "verdict"]

#: Ratios within 1 ± this are reported as unchanged.
UNCHANGED_BAND = 0.03
#: The controller process counts as starved when it waited for a CPU more than this many
#: times as long as it ran.
STARVED = 0.5

_PRIORITY_RULE = {
    "plas": "PLAS runs first the calls of the programs that have received the least service "
    "so far (Autellix, arXiv 2502.13965)",
    "atlas": "ATLAS runs first the calls of the programs whose critical path has received the "
    "least service so far (Autellix, arXiv 2502.13965)",
    "mlfq": "MLFQ moves a program to lower-priority queues as its calls use up their quanta",
}


def verdict(
    policy: str,
    ratios: Mapping[str, Ratios],
    controller: Mapping[str, KindStats],
    kinds: Sequence[str],
    controller_cpu: CpuTimes | None = None,
) -> list[str]:
    """Sentences for the summary. ``policy`` is the controller's scheduling policy,
    ``ratios`` and ``controller`` (the controller phase's rows) are keyed by kind, ``kinds``
    lists the kinds to judge (not ``all``); ``controller_cpu``, when known, says whether the
    controller process got the CPU it needed (a busy machine makes every hop and event slow)."""
    judged = [k for k in kinds if k in ratios and not math.isnan(ratios[k].e2e_mean)]
    faster = [k for k in judged if ratios[k].e2e_mean > 1 + UNCHANGED_BAND]
    slower = [k for k in judged if ratios[k].e2e_mean < 1 - UNCHANGED_BAND]
    unchanged = [k for k in judged if k not in faster and k not in slower]
    lines: list[str] = []
    overall = ratios.get("all")
    if overall is not None and not math.isnan(overall.e2e_mean):
        lines.append(
            f"Overall the controller made programs {_change(overall.e2e_mean)} "
            f"(mean E2E {overall.e2e_mean:.2f}x, p95 {overall.e2e_p95:.2f}x, "
            f"token latency {overall.token_latency_mean:.2f}x; above 1x = faster)."
        )
    if faster:
        lines.append("Faster: " + "; ".join(_figures(k, ratios[k]) for k in faster) + ".")
    if unchanged:
        lines.append(
            f"Unchanged (within ±{UNCHANGED_BAND:.0%}): "
            + "; ".join(_figures(k, ratios[k]) for k in unchanged)
            + "."
        )
    everyone = controller.get("all")
    for kind in slower:
        lines.append(
            f"Slower: {_figures(kind, ratios[kind])}. "
            + _why_slower(policy, kind, controller.get(kind), everyone)
        )
    if controller_cpu is not None and controller_cpu.waiting_s > STARVED * controller_cpu.running_s:
        lines.append(
            f"The machine was busy: the controller process waited {controller_cpu.waiting_s:.1f} s "
            f"for a CPU and ran {controller_cpu.running_s:.1f} s, so each of its calls and "
            "tool-wait events took longer than the controller's own work; on an idle machine "
            "(docs/demo.md) the hop costs a few milliseconds."
        )
    return lines


def _change(ratio: float) -> str:
    if ratio > 1 + UNCHANGED_BAND:
        return "faster"
    if ratio < 1 - UNCHANGED_BAND:
        return "slower"
    return "about as fast"


def _figures(kind: str, r: Ratios) -> str:
    return (
        f"{kind} {r.e2e_mean:.2f}x mean E2E (p95 {r.e2e_p95:.2f}x, token latency "
        f"{r.token_latency_mean:.2f}x, {r.programs} programs)"
    )


def _why_slower(policy: str, kind: str, stats: KindStats | None, everyone: KindStats | None) -> str:
    if stats is None or everyone is None:
        return "Too few programs finished to say why."
    service = (
        f"each {kind} program makes {stats.llm_calls_mean:.0f} LLM calls and generates "
        f"{stats.output_tokens_mean:.0f} tokens (the mix's mean: {everyone.llm_calls_mean:.0f} "
        f"calls, {everyone.output_tokens_mean:.0f} tokens)"
    )
    held = (
        f"its calls were held {stats.wait_mean_s:.2f} s per program in the controller's queues "
        f"(mean of all programs {everyone.wait_mean_s:.2f} s)"
    )
    rule = _PRIORITY_RULE.get(policy)
    heavy = stats.output_tokens_mean > everyone.output_tokens_mean
    if rule is not None and heavy:
        return (
            f"Why: {rule}; {service}, so once it has run for a while its calls yield to "
            f"shorter programs' calls — by design: {held}."
        )
    if rule is not None:
        return (
            f"Why: not the priority order ({rule}; {service}, less than most): the cost is the "
            f"controller's own — one more hop per call and the tool-wait events; {held}."
        )
    return (
        f"Why: {policy.upper()} orders calls by arrival only, so the cost is the controller's "
        f"own — one more hop per call and the tool-wait events — and where its router placed "
        f"the calls; {service}; {held}."
    )
