"""Why a kind got faster or slower through the controller, in figures (pure: no I/O).

The verdict (:mod:`agentrt_demo.verdict`) says which kinds changed and, for a slower one, how
the scheduling order treated it. This module adds, per kind whose agents report their prompt
usage (``react`` and ``coding``: ``agentrt_demo.agents.PromptUsage``), what the KV cache did
for it: the same prompts ran in both phases, so every prompt token the engines found in their
prefix cache through the controller but not straight is a token **not recomputed** thanks to
the controller — its contexts kept pinned during tool waits (KV retention, docs/routing.md)
and its calls routed to the engine that holds their prefix. The controller's retention
decisions over the phase (``GET /agentrt/v1/queues``) say how many contexts it kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentrt_demo.analysis import ProgramRecord, Ratios

__all__ = ["CacheFigures", "cache_figures", "why_lines"]

#: Decision names that keep a context in GPU memory (the retention policy's ``retain``).
_KEPT = ("retain", "pin")


@dataclass(frozen=True, slots=True)
class CacheFigures:
    """Prompt tokens of one kind's programs that finished in both phases (tokens)."""

    kind: str
    programs: int
    #: Prompt tokens of their calls (the same prompts in both phases: the controller phase's).
    prompt_tokens: int
    #: Of them, found in the engines' prefix cache through the controller / straight.
    cached_controller: int
    cached_direct: int

    @property
    def not_recomputed(self) -> int:
        """Prompt tokens cached through the controller but computed straight (negative: the
        controller phase cached fewer)."""
        return self.cached_controller - self.cached_direct

    def hit_rate(self, cached: int) -> float:
        return cached / self.prompt_tokens if self.prompt_tokens else math.nan


def cache_figures(
    direct: Sequence[ProgramRecord], controller: Sequence[ProgramRecord], kind: str
) -> CacheFigures | None:
    """The figures of ``kind``'s programs (matched by name) that finished ``ok`` in both phases
    and reported their usage in both; None when there are none."""
    before = {p.name: p for p in direct if _reported(p, kind)}
    after = {p.name: p for p in controller if _reported(p, kind)}
    common = sorted(set(before) & set(after))
    if not common:
        return None
    return CacheFigures(
        kind,
        len(common),
        sum(after[n].prompt_tokens or 0 for n in common),
        sum(after[n].cached_tokens or 0 for n in common),
        sum(before[n].cached_tokens or 0 for n in common),
    )


def _reported(program: ProgramRecord, kind: str) -> bool:
    return (
        program.kind == kind
        and program.status == "ok"
        and program.prompt_tokens is not None
        and program.cached_tokens is not None
    )


def why_lines(
    ratios: Mapping[str, Ratios],
    figures: Mapping[str, CacheFigures],
    retention: Mapping[str, int] | None,
    kinds: Sequence[str],
) -> list[str]:
    """One sentence per kind of ``kinds`` that has :class:`CacheFigures`: its mean E2E ratio
    (direct ÷ controller), the contexts the controller kept during tool waits and the prompt
    tokens that were not recomputed. ``retention``: the controller's decisions by name, None
    when it kept none (retention off, or not reported)."""
    lines: list[str] = []
    kept = _kept(retention)
    for kind in kinds:
        figure = figures.get(kind)
        ratio = ratios.get(kind)
        if figure is None or ratio is None or math.isnan(ratio.e2e_mean):
            continue
        through = figure.hit_rate(figure.cached_controller)
        straight = figure.hit_rate(figure.cached_direct)
        saved = figure.not_recomputed
        cache = (
            f"the engines found {through:.0%} of its prompt tokens in their prefix cache "
            f"through the controller vs {straight:.0%} straight"
        )
        if saved > 0:
            cache += (
                f": {saved:,} tokens not recomputed ({saved / figure.programs:,.0f} per program)"
            )
        else:
            cache += f" ({-saved:,} tokens fewer): the KV cache does not explain its change"
        lines.append(
            f"{kind} {ratio.e2e_mean:.2f}x mean E2E ({figure.programs} programs): {kept}; {cache}."
        )
    return lines


def _kept(retention: Mapping[str, int] | None) -> str:
    if not retention:
        return "no context kept during tool waits (retention off)"
    pins = sum(retention.get(name, 0) for name in _KEPT)
    others = ", ".join(f"{n} {c}" for n, c in sorted(retention.items()) if n not in _KEPT and c)
    detail = f" (other decisions: {others})" if others else ""
    return f"contexts kept during tool waits: {pins} pins over the phase{detail}"
