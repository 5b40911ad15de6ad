"""From spans to programs and per-kind statistics (pure: no I/O, no clock).

A **program** is a span with ``agentrt.program.id`` whose ``gen_ai.operation.name`` is
``invoke_workflow`` or ``invoke_agent``; its **nodes** are the spans carrying
``agentrt.program.id`` and ``agentrt.node.id``: ``chat`` (LLM call) and ``execute_tool`` (tool
call) spans. A controller's server span whose parent is an LLM node's span adds the backend
that served it.

Time split of one program (seconds, summed over its nodes — parallel nodes add up, so the
three can exceed the program's end-to-end time):

* ``wait``: time its LLM calls were held in the controller's queues (``agentrt.queue_s``, from
  the controller's ``X-Agentrt-Queue-Ms``; 0 without a controller). Time a call waits inside
  an engine's own queue is not visible to a client and counts as execution;
* ``exec``: the rest of its LLM calls' time (engine queue, prefill, decode, network);
* ``tool``: its tool calls' time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agentrt_demo.traces import SpanRecord

# The agents' program span attributes (``agentrt_demo.agents``; not imported: this module is
# pure and the agents import the SDK).
_ATTR_PROMPT_TOKENS = "agentrt.demo.prompt_tokens"
_ATTR_CACHED_TOKENS = "agentrt.demo.cached_tokens"

__all__ = [
    "KindStats",
    "NodeRecord",
    "ProgramRecord",
    "Ratios",
    "kind_stats",
    "percentile",
    "programs_from_spans",
    "ratios",
    "speedup",
]

_PROGRAM_OPERATIONS = ("invoke_workflow", "invoke_agent")
_NAME_SUFFIX = re.compile(r"[-_ #]*\d+$")


@dataclass(slots=True)
class NodeRecord:
    """One LLM or tool call of a program."""

    node_id: str
    thread_id: str
    #: ``llm``, ``tool`` or ``other``.
    kind: str
    #: Model (LLM) or tool name.
    name: str
    #: Unix epoch nanoseconds.
    start_ns: int
    end_ns: int
    #: Seconds held in the controller's queues (LLM calls through a controller), else 0.
    queue_s: float = 0.0
    #: Backend that served the call (when a controller span says so), else "".
    backend: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str = ""

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


@dataclass(slots=True)
class ProgramRecord:
    """One program run, from its spans."""

    program_id: str
    name: str
    #: Program kind: the ``agentrt_demo.kind`` attribute, else the name without a trailing
    #: number (``react-07`` → ``react``).
    kind: str
    #: ``ok``, ``error``, ``cancelled``, ``deadline_exceeded`` (``agentrt.program.status``).
    status: str
    start_ns: int
    end_ns: int
    nodes: list[NodeRecord] = field(default_factory=list)
    #: Prompt tokens of its LLM calls and, of them, those the engines found in their prefix
    #: cache (tokens; from the program span, set by the agents that read their replies: None
    #: for the other kinds).
    prompt_tokens: int | None = None
    cached_tokens: int | None = None

    @property
    def e2e_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9

    @property
    def wait_s(self) -> float:
        return sum(min(n.queue_s, n.duration_s) for n in self.nodes if n.kind == "llm")

    @property
    def exec_s(self) -> float:
        return sum(n.duration_s for n in self.nodes if n.kind == "llm") - self.wait_s

    @property
    def tool_s(self) -> float:
        return sum(n.duration_s for n in self.nodes if n.kind == "tool")

    @property
    def llm_calls(self) -> int:
        return sum(1 for n in self.nodes if n.kind == "llm")

    @property
    def output_tokens(self) -> int:
        """Tokens its LLM calls generated (``gen_ai.usage.output_tokens``; unknown counts 0)."""
        return sum(n.output_tokens or 0 for n in self.nodes if n.kind == "llm")

    @property
    def token_latency_s(self) -> float:
        """Program token latency: end-to-end seconds per generated token (Autellix, arXiv
        2502.13965, §6); NaN when it generated none."""
        tokens = self.output_tokens
        return self.e2e_s / tokens if tokens else math.nan


def programs_from_spans(spans: Iterable[SpanRecord]) -> list[ProgramRecord]:
    """Programs with their nodes, ordered by start time."""
    spans = list(spans)
    programs: dict[str, ProgramRecord] = {}
    for span in spans:
        attrs = span.attributes
        program_id = attrs.get("agentrt.program.id")
        if not isinstance(program_id, str):
            continue
        if (
            attrs.get("gen_ai.operation.name") in _PROGRAM_OPERATIONS
            and "agentrt.node.id" not in attrs
        ):
            name = str(attrs.get("agentrt.program.name") or span.name)
            kind = attrs.get("agentrt.demo.kind")
            programs[program_id] = ProgramRecord(
                program_id=program_id,
                name=name,
                kind=str(kind) if kind else (_NAME_SUFFIX.sub("", name) or name),
                status=str(
                    attrs.get("agentrt.program.status") or ("error" if span.status == 2 else "ok")
                ),
                start_ns=span.start_ns,
                end_ns=span.end_ns,
                prompt_tokens=_int(attrs.get(_ATTR_PROMPT_TOKENS)),
                cached_tokens=_int(attrs.get(_ATTR_CACHED_TOKENS)),
            )
    by_span: dict[str, NodeRecord] = {}
    for span in spans:
        attrs = span.attributes
        program = programs.get(str(attrs.get("agentrt.program.id")))
        node_id = attrs.get("agentrt.node.id")
        if program is None or not isinstance(node_id, str):
            continue
        node = _node(span, node_id)
        program.nodes.append(node)
        by_span[span.span_id] = node
    for span in spans:  # controller server spans: their parent is the client's chat span
        served = by_span.get(span.parent_id) if span.kind == 2 else None
        if served is not None and isinstance(span.attributes.get("agentrt.backend"), str):
            served.backend = str(span.attributes["agentrt.backend"])
    for program in programs.values():
        program.nodes.sort(key=lambda n: (n.start_ns, n.node_id))
    return sorted(programs.values(), key=lambda p: (p.start_ns, p.name))


def _node(span: SpanRecord, node_id: str) -> NodeRecord:
    attrs = span.attributes
    operation = attrs.get("gen_ai.operation.name")
    kind = {"chat": "llm", "text_completion": "llm", "execute_tool": "tool"}.get(
        str(operation), "other"
    )
    if kind == "tool":
        name = str(attrs.get("gen_ai.tool.name") or span.name)
    else:
        name = str(attrs.get("gen_ai.request.model") or span.name)
    thread = attrs.get("agentrt.thread.id")
    queue = attrs.get("agentrt.queue_s")
    return NodeRecord(
        node_id=node_id,
        thread_id=str(thread) if thread else node_id.rsplit(":", 1)[0],
        kind=kind,
        name=name,
        start_ns=span.start_ns,
        end_ns=span.end_ns,
        queue_s=float(queue) if isinstance(queue, int | float) else 0.0,
        input_tokens=_int(attrs.get("gen_ai.usage.input_tokens")),
        output_tokens=_int(attrs.get("gen_ai.usage.output_tokens")),
        error=str(attrs.get("error.type") or ""),
    )


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# ------------------------------------------------------------------------------- statistics
def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class KindStats:
    """Statistics of one program kind in one phase (seconds; means are per program)."""

    kind: str
    #: Programs seen / finished ``ok`` (latencies and means are over the ``ok`` ones).
    count: int
    ok: int
    e2e_p50_s: float
    e2e_p95_s: float
    e2e_mean_s: float
    wait_mean_s: float
    exec_mean_s: float
    tool_mean_s: float
    llm_calls_mean: float
    #: Mean program token latency (seconds per generated token) and generated tokens.
    token_latency_mean_s: float = math.nan
    output_tokens_mean: float = math.nan


def kind_stats(
    programs: Sequence[ProgramRecord], kinds: Sequence[str] | None = None
) -> list[KindStats]:
    """One row per kind (in ``kinds`` order, default: order of appearance) plus ``all``."""
    order = list(kinds) if kinds is not None else list(dict.fromkeys(p.kind for p in programs))
    rows = [_stats(kind, [p for p in programs if p.kind == kind]) for kind in order]
    rows.append(_stats("all", list(programs)))
    return rows


def _stats(kind: str, programs: Sequence[ProgramRecord]) -> KindStats:
    ok = [p for p in programs if p.status == "ok"]
    e2e = [p.e2e_s for p in ok]

    def mean(values: Iterable[float]) -> float:
        items = list(values)
        return sum(items) / len(items) if items else math.nan

    return KindStats(
        kind=kind,
        count=len(programs),
        ok=len(ok),
        e2e_p50_s=percentile(e2e, 50),
        e2e_p95_s=percentile(e2e, 95),
        e2e_mean_s=mean(e2e),
        wait_mean_s=mean(p.wait_s for p in ok),
        exec_mean_s=mean(p.exec_s for p in ok),
        tool_mean_s=mean(p.tool_s for p in ok),
        llm_calls_mean=mean(p.llm_calls for p in ok),
        token_latency_mean_s=mean(
            p.token_latency_s for p in ok if not math.isnan(p.token_latency_s)
        ),
        output_tokens_mean=mean(p.output_tokens for p in ok),
    )


@dataclass(frozen=True, slots=True)
class Ratios:
    """Baseline over improved for the programs of one kind that finished in both runs (above
    1: the improved run was faster); NaN when no program did."""

    kind: str
    #: Programs compared.
    programs: int
    #: Mean end-to-end latency, its 95th percentile, mean program token latency.
    e2e_mean: float
    e2e_p95: float
    token_latency_mean: float


def ratios(
    baseline: Sequence[ProgramRecord], improved: Sequence[ProgramRecord], kind: str = "all"
) -> Ratios:
    """:class:`Ratios` of ``baseline`` over ``improved`` for the programs (matched by name) of
    ``kind`` (``all`` = every kind) that finished ``ok`` in both."""
    before = _ok_by_name(baseline, kind)
    after = _ok_by_name(improved, kind)
    common = sorted(set(before) & set(after))

    def ratio(measure: Callable[[Sequence[ProgramRecord]], float]) -> float:
        if not common:
            return math.nan
        denominator = measure([after[name] for name in common])
        numerator = measure([before[name] for name in common])
        return numerator / denominator if denominator > 0 else math.nan

    def e2e_mean(programs: Sequence[ProgramRecord]) -> float:
        return sum(p.e2e_s for p in programs) / len(programs)

    def e2e_p95(programs: Sequence[ProgramRecord]) -> float:
        return percentile([p.e2e_s for p in programs], 95)

    def token_latency(programs: Sequence[ProgramRecord]) -> float:
        values = [p.token_latency_s for p in programs if not math.isnan(p.token_latency_s)]
        return sum(values) / len(values) if values else math.nan

    return Ratios(kind, len(common), ratio(e2e_mean), ratio(e2e_p95), ratio(token_latency))


def speedup(
    baseline: Sequence[ProgramRecord], improved: Sequence[ProgramRecord], kind: str = "all"
) -> float:
    """Mean E2E of ``baseline`` over mean E2E of ``improved`` for the programs (matched by
    name) of ``kind`` (``all`` = every kind) that finished ``ok`` in both; NaN when none did.
    Above 1: ``improved`` is faster."""
    return ratios(baseline, improved, kind).e2e_mean


def _ok_by_name(programs: Sequence[ProgramRecord], kind: str) -> Mapping[str, ProgramRecord]:
    return {p.name: p for p in programs if p.status == "ok" and (kind in ("all", p.kind))}
