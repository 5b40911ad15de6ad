"""Convert recorded SDK spans into simulator programs (``agentrt trace export``).

What the SDK records (``agentrt.runtime.telemetry``, docs/sdk.md): one ``invoke_workflow`` /
``invoke_agent`` span per program (``agentrt.program.id``, ``agentrt.program.name``), one
``chat {model}`` span per LLM call attempt (``agentrt.node.id``, ``agentrt.thread.id``,
``gen_ai.usage.input_tokens`` / ``output_tokens``) and one ``execute_tool {name}`` span per tool
call. The rules that turn them into trace programs (``agentrt_sim.workloads.program``) are in
docs/trace-export.md; in short:

* one program per program span; ``arrival_s`` = its start minus the first program's start;
  ``kind`` = the ``kind_attr`` attribute of the program span, else its name without a trailing
  number (``react-04`` -> ``react``);
* parents are the recorded ones (``agentrt.node.parent_ids``) when every node of the program
  has them, else inferred by replaying the SDK's chain rule (``agentrt_sim.export.parents``);
* prompts: an LLM call extends (``context``) its nearest ancestor — same thread first, then the
  latest to end — whose prefix (prompt + output, or a tool's context prefix) is no longer than
  the call's recorded input; ``new_prompt_tokens`` is the rest. Calls with no such ancestor
  extend the root prefix: the kind's system prompt is the smallest such call's input over all
  programs of the kind, each program's root input the rest of its own smallest such call. So
  every converted prompt has exactly its recorded length (what is approximate is which tokens
  are shared, not how many there are);
* tool results add no tokens (``result_tokens = 0``: the SDK records no result size; the
  observation's tokens are counted as the next call's new tokens instead);
* wall durations (tool calls, inferred waits, arrivals) are multiplied by ``time_scale``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agentrt.errors import ConfigError
from agentrt_sim.export.parents import Recorded, has_recorded_parents, infer_parents
from agentrt_sim.export.spans import Span
from agentrt_sim.plan import compile_program
from agentrt_sim.workloads.program import LLMNode, Node, Program, WaitNode

__all__ = ["ExportSummary", "spans_to_programs"]

_PROGRAM_OPERATIONS = frozenset({"invoke_workflow", "invoke_agent"})
_NODE_OPERATIONS = frozenset({"chat", "execute_tool"})
_ERROR = 2  # OTLP status code
_TRAILING_NUMBER = re.compile(r"[-_ #.]*\d+$")
#: The SDK's parents attribute (``agentrt.runtime.telemetry.ATTR_NODE_PARENT_IDS``).
_PARENT_IDS = "agentrt.node.parent_ids"


@dataclass(slots=True)
class ExportSummary:
    """What a conversion produced and left out."""

    programs: int = 0
    llm_calls: int = 0
    tools: int = 0
    #: Waits inferred from gaps in a thread's node numbers (``think`` nodes).
    waits: int = 0
    #: LLM calls that reported 0 output tokens, exported with 1 (the trace model's minimum).
    clamped_outputs: int = 0
    #: Exported programs whose DAG edges were inferred from timing (a node without recorded
    #: ``agentrt.node.parent_ids``: a trace from an older SDK).
    inferred_parents: int = 0
    #: Spans (or programs) left out, by reason.
    skipped: Counter[str] = field(default_factory=Counter)
    #: Per exported call: simulator prompt length minus recorded input tokens (tokens).
    prompt_errors: list[int] = field(default_factory=list)

    @property
    def prompt_error_mean(self) -> float:
        """Mean absolute prompt-size error over the exported calls (tokens)."""
        if not self.prompt_errors:
            return 0.0
        return sum(abs(e) for e in self.prompt_errors) / len(self.prompt_errors)

    @property
    def prompt_error_max(self) -> int:
        """Largest absolute prompt-size error (tokens)."""
        return max((abs(e) for e in self.prompt_errors), default=0)

    def lines(self) -> list[str]:
        """Human-readable summary lines."""
        out = [
            f"{self.programs} programs, {self.llm_calls} LLM calls, {self.tools} tool calls, "
            f"{self.waits} inferred waits",
            f"prompt size vs recorded input tokens: mean |error| {self.prompt_error_mean:.2f}, "
            f"max {self.prompt_error_max} tokens",
        ]
        if self.inferred_parents:
            out.append(
                f"{self.inferred_parents} programs without recorded parents "
                "(agentrt.node.parent_ids): DAG edges inferred from timing"
            )
        if self.clamped_outputs:
            out.append(f"{self.clamped_outputs} calls reported 0 output tokens (exported as 1)")
        for reason, count in sorted(self.skipped.items(), key=lambda item: (-item[1], item[0])):
            out.append(f"skipped {count}: {reason}")
        return out


@dataclass(slots=True)
class _ProgramSpans:
    program_id: str
    kind: str
    start_ns: int
    nodes: dict[str, list[Span]] = field(default_factory=dict)


def _kind_of(span: Span, kind_attr: str | None) -> str:
    if kind_attr is not None:
        value = span.attr(kind_attr)
        if isinstance(value, str) and value:
            return value
    name = span.attr("agentrt.program.name")
    if not isinstance(name, str) or not name:
        name = span.name.partition(" ")[2]
    return _TRAILING_NUMBER.sub("", name) or "trace"


def _group(
    spans: Iterable[Span], kind_attr: str | None, summary: ExportSummary
) -> list[_ProgramSpans]:
    programs: dict[str, _ProgramSpans] = {}
    node_spans: list[tuple[str, str, Span]] = []
    for span in spans:
        operation = span.attr("gen_ai.operation.name")
        program_id = span.attr("agentrt.program.id")
        node_id = span.attr("agentrt.node.id")
        if operation in _PROGRAM_OPERATIONS and isinstance(program_id, str) and program_id:
            if program_id in programs:
                summary.skipped["duplicate program span"] += 1
                continue
            programs[program_id] = _ProgramSpans(
                program_id, _kind_of(span, kind_attr), span.start_ns
            )
        elif operation in _NODE_OPERATIONS and isinstance(program_id, str) and node_id:
            node_spans.append((program_id, str(node_id), span))
        elif operation in _NODE_OPERATIONS:
            summary.skipped[f"{operation} spans without agentrt ids (controller, engine)"] += 1
        else:
            summary.skipped["spans that are not agentrt programs, LLM or tool calls"] += 1
    for program_id, node_id, span in node_spans:
        found = programs.get(program_id)
        if found is None:
            summary.skipped["node spans whose program span is missing"] += 1
            continue
        found.nodes.setdefault(node_id, []).append(span)
    return sorted(programs.values(), key=lambda p: (p.start_ns, p.program_id))


def _int_attr(span: Span, key: str) -> int | None:
    value = span.attr(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _recorded(node_id: str, attempts: list[Span], summary: ExportSummary) -> Recorded | None:
    """One node from its spans (an LLM call has one per attempt); None if malformed."""
    thread_id, sep, seq_text = node_id.rpartition(":")
    if not sep or not thread_id or not seq_text.isdigit():
        summary.skipped["spans with a malformed agentrt.node.id"] += len(attempts)
        return None
    attempts.sort(key=lambda span: span.start_ns)
    first, last = attempts[0], attempts[-1]
    operation = last.attr("gen_ai.operation.name")
    record = Recorded(node_id, thread_id, int(seq_text), "llm", "", first.start_ns, last.end_ns)
    parents = last.attr(_PARENT_IDS)
    if isinstance(parents, list) and all(isinstance(p, str) for p in parents):
        record.recorded_parents = tuple(p for p in parents if isinstance(p, str))
    if operation == "execute_tool":
        record.kind = "tool"
        record.name = str(last.attr("gen_ai.tool.name") or last.name.partition(" ")[2] or "tool")
        return record
    record.name = str(last.attr("gen_ai.request.model") or "")
    if len(attempts) > 1:
        summary.skipped["failed attempts of retried LLM calls"] += len(attempts) - 1
    input_tokens = _int_attr(last, "gen_ai.usage.input_tokens")
    output_tokens = _int_attr(last, "gen_ai.usage.output_tokens")
    if last.attr("agentrt.replayed") is True:
        summary.skipped["LLM calls replayed from the journal (never reached an engine)"] += 1
        record.kept = False
    elif last.status == _ERROR or input_tokens is None or output_tokens is None:
        summary.skipped["failed or cancelled LLM calls (no token usage)"] += 1
        record.kept = False
    elif input_tokens < 1:
        summary.skipped["LLM calls that report no prompt tokens"] += 1
        record.kept = False
    else:
        record.input_tokens = input_tokens
        if output_tokens < 1:
            summary.clamped_outputs += 1
        record.output_tokens = max(1, output_tokens)
    return record


@dataclass(slots=True)
class _Prompted:
    """A program's nodes with contexts chosen; ``root_inputs`` are calls on the root prefix."""

    program: _ProgramSpans
    nodes: list[Recorded]
    context: dict[str, str | None]
    root_inputs: list[int]


def _choose_contexts(program: _ProgramSpans, nodes: list[Recorded]) -> _Prompted:
    by_id = {node.node_id: node for node in nodes}
    ancestors: dict[str, set[str]] = {}
    #: Prefix length of a node a later call may extend; absent = not extendable (a wait on
    #: the root prefix, whose length is only known once the system prompt is chosen).
    prefix: dict[str, int] = {}
    context: dict[str, str | None] = {}
    root_inputs: list[int] = []
    for node in nodes:
        mine: set[str] = set()
        for parent in node.parents:
            mine.add(parent)
            mine |= ancestors[parent]
        ancestors[node.node_id] = mine
        candidates = sorted(
            (by_id[a] for a in mine if a in prefix),
            key=lambda a: (a.thread_id != node.thread_id, -a.end_ns, a.node_id),
        )
        if node.kind == "llm":
            chosen = next((a for a in candidates if prefix[a.node_id] <= node.input_tokens), None)
            context[node.node_id] = chosen.node_id if chosen else None
            if chosen is None:
                root_inputs.append(node.input_tokens)
            prefix[node.node_id] = node.input_tokens + node.output_tokens
        else:
            chosen = candidates[0] if candidates else None
            context[node.node_id] = chosen.node_id if chosen else None
            if chosen is not None:
                prefix[node.node_id] = prefix[chosen.node_id]
    return _Prompted(program, nodes, context, root_inputs)


def _build(prompted: _Prompted, system_tokens: int, origin_ns: int, time_scale: float) -> Program:
    root_tokens = min(prompted.root_inputs) - system_tokens
    prefix: dict[str, int] = {}
    out: list[Node] = []
    for node in prompted.nodes:
        context = prompted.context[node.node_id]
        base = system_tokens + root_tokens if context is None else prefix[context]
        if node.kind == "llm":
            new_tokens = max(0, node.input_tokens - base)
            prefix[node.node_id] = base + new_tokens + node.output_tokens
            out.append(
                LLMNode(
                    node.node_id,
                    node.parents,
                    node.thread_id,
                    context,
                    new_tokens,
                    node.output_tokens,
                )
            )
        else:
            prefix[node.node_id] = base
            duration_s = (node.end_ns - node.start_ns) / 1e9 * time_scale
            out.append(
                WaitNode(
                    node.node_id,
                    node.parents,
                    node.thread_id,
                    "tool" if node.kind == "tool" else "think",
                    node.name,
                    max(0.0, duration_s),
                    context,
                    0,
                )
            )
    program = prompted.program
    return Program(
        program_id=program.program_id,
        kind=program.kind,
        arrival_s=max(0.0, (program.start_ns - origin_ns) / 1e9 * time_scale),
        system_prompt_id=program.kind,
        system_prompt_tokens=system_tokens,
        root_prompt_tokens=root_tokens,
        nodes=tuple(out),
    )


def _account(summary: ExportSummary, program: Program, recorded: list[Recorded]) -> None:
    """Count ``program``'s nodes and compare its prompt sizes, as the simulator computes them
    (``compile_program``), with the recorded input tokens."""
    plan = compile_program(program)
    for node, source, prompt_len in zip(program.nodes, recorded, plan.prompt_len, strict=True):
        if isinstance(node, LLMNode):
            summary.prompt_errors.append(prompt_len - source.input_tokens)
            summary.llm_calls += 1
        elif node.kind == "tool":
            summary.tools += 1
        else:
            summary.waits += 1


def spans_to_programs(
    spans: Sequence[Span], *, kind_attr: str | None = None, time_scale: float = 1.0
) -> tuple[list[Program], ExportSummary]:
    """The trace programs recorded in ``spans``, in arrival order, and a summary.

    ``kind_attr``: program-span attribute that holds the workload kind (None: derive it from
    the program name). ``time_scale``: factor from recorded wall seconds to model seconds
    (e.g. 5 for a run against an emulator running 5x faster than real time). Raises
    :class:`ConfigError` for a bad ``time_scale``. Programs without an exportable LLM call are
    left out (counted in the summary).
    """
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ConfigError(f"time_scale must be a finite number > 0, got {time_scale}")
    summary = ExportSummary()
    prompted: list[_Prompted] = []
    for group in _group(spans, kind_attr, summary):
        recorded = [
            found
            for node_id, attempts in group.nodes.items()
            if (found := _recorded(node_id, attempts, summary)) is not None
        ]
        recorded_parents = has_recorded_parents(recorded)
        nodes = infer_parents(recorded, group.start_ns)
        if not any(node.kind == "llm" for node in nodes):
            summary.skipped["programs without a completed LLM call"] += 1
            continue
        if not recorded_parents:
            summary.inferred_parents += 1
        prompted.append(_choose_contexts(group, nodes))
    system_tokens: dict[str, int] = {}
    for item in prompted:
        kind = item.program.kind
        smallest = min(item.root_inputs)
        system_tokens[kind] = min(system_tokens.get(kind, smallest), smallest)
    origin_ns = min((item.program.start_ns for item in prompted), default=0)
    programs: list[Program] = []
    for item in prompted:
        built = _build(item, system_tokens[item.program.kind], origin_ns, time_scale)
        built.validate()
        programs.append(built)
        _account(summary, built, item.nodes)
    summary.programs = len(programs)
    programs.sort(key=lambda p: (p.arrival_s, p.program_id))
    return programs, summary
