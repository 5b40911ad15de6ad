"""The demo's agent code: what each program kind does inside its ``agentrt`` program.

Written with the public SDK only (``agentrt.react``, ``map_reduce``, ``mcts``, ``chat``,
``@tool``), like any user's agents. The emulator's scripted model writes filler text, so the
programs say nothing — but their shapes (calls, tools, parallel threads, token counts) are
realistic and identical in both phases: every text and tool duration comes from the program's
seed, and the scripted model answers the same prompt the same way on any engine.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from opentelemetry import trace

import agentrt
from agentrt_demo.workload import (
    ProgramSpec,
    coding_tool_duration_s,
    filler_text,
    tool_duration_s,
)

__all__ = [
    "ATTR_CACHED_TOKENS",
    "ATTR_PROMPT_TOKENS",
    "CODING_SYSTEM_PROMPT",
    "REACT_SYSTEM_PROMPT",
    "AgentContext",
    "AgentFn",
    "PromptUsage",
    "base_agents",
    "repo_context",
]

#: Program span attributes: prompt tokens of the program's calls, and of them the tokens the
#: engine found in its prefix cache (``usage.prompt_tokens_details.cached_tokens``); set by the
#: agents that read their replies (``react``, ``coding``).
ATTR_PROMPT_TOKENS = "agentrt.demo.prompt_tokens"
ATTR_CACHED_TOKENS = "agentrt.demo.cached_tokens"


@dataclass(frozen=True, slots=True)
class AgentContext:
    """What an agent gets: its planned program, the runtime it runs in (its program is
    already entered) and the time scale (model seconds per wall second).

    With several models (``agentrt demo --models``) the runtime's model is the planner's and
    ``small_model`` names the small verifier / summariser; ``small_runtime`` is where its
    calls go when no controller routes them (the direct phase: a runtime on an engine of that
    model), None to send them through ``runtime`` (the controller routes by model)."""

    spec: ProgramSpec
    runtime: agentrt.Runtime
    time_scale: float
    small_model: str | None = None
    small_runtime: agentrt.Runtime | None = None

    @property
    def model(self) -> str:
        model = self.runtime.config.model
        assert model is not None
        return model

    async def small_chat(self, messages: list[dict[str, Any]], **params: Any) -> Any:
        """One call of the current program to the small model (the runtime's own model when
        there is none): a node of the same program whichever engine answers it."""
        if self.small_model is None:
            return await agentrt.chat(messages, **params)
        return await agentrt.chat(
            messages, model=self.small_model, runtime=self.small_runtime, **params
        )


#: Runs one program's body inside its already-entered ``agentrt`` program.
AgentFn = Callable[[AgentContext], Awaitable[None]]

#: Shared by every ReAct program (a long common prefix: what prefix caching is for).
REACT_SYSTEM_PROMPT = (
    "You are a careful research assistant working for the operations team. Answer the "
    "question in a few sentences. Use the tools when they help: search for facts, lookup for "
    "records by id, calculator for arithmetic. Never invent a record id. Handbook follows.\n\n"
    + filler_text(random.Random("agentrt-demo-handbook"), 640)
)

#: Shared by every coding program: instructions and the tools' conventions.
CODING_SYSTEM_PROMPT = (
    "You are a software engineer fixing an issue in the repository below. Read the code, run "
    "commands, edit files and run the tests until they pass; one tool per step. Conventions "
    "follow.\n\n" + filler_text(random.Random("agentrt-demo-coding-system"), 300)
)
# A repository's context: the simulator's coding workload calibrates it to 9.3 K tokens
# (docs/simulator.md, "Coding, research, agents"); a quarter of that here.
_REPO_WORDS = 2500
_ISSUE_WORDS = 80
_CODING_OUTPUT_TOKENS = 60
_RESULT_WORDS = (150, 500)  # a tool's output appended to the history

ANSWER_TOKENS = 40  # ReAct final answers (Autellix's ReAct: ~34 output tokens per call)
_MAP_TOKENS = 50  # Parrot's map calls: ~50 output tokens
_REDUCE_TOKENS = 120
_CHUNK_WORDS = 600
_MAP_PARALLEL = 4  # map calls of one program at once
_VERDICT_TOKENS = 20  # the small verifier's verdict on a ReAct agent's first move
_VERIFY_PROMPT = (
    "You check an assistant's moves. Say whether the proposed next move helps answer the "
    "question, in one sentence starting with yes or no."
)


def _hint(tokens: int) -> dict[str, Any]:
    """The emulator's answer-length hint (ignored by other servers)."""
    return {"extra_body": {"agentrt_output_tokens": tokens}}


def react_tools(spec: ProgramSpec, time_scale: float) -> list[agentrt.Tool[Any]]:
    """``search``, ``lookup`` and ``calculator``: each takes a seeded log-normal time (model
    seconds, scaled to wall time) and returns seeded filler text."""
    rng = random.Random(f"agentrt-demo-tools-{spec.seed}")

    async def take_time() -> str:
        await anyio.sleep(tool_duration_s(rng) / time_scale)
        return filler_text(rng, 50)

    @agentrt.tool
    async def search(query: str) -> str:
        """Search the team's documents.

        Args:
            query: what to look for, in a few words
        """
        return await take_time()

    @agentrt.tool
    async def lookup(record_id: int) -> str:
        """Fetch one record by its id.

        Args:
            record_id: the record's numeric id
        """
        return await take_time()

    @agentrt.tool
    async def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: numbers with + - * / and parentheses
        """
        return await take_time()

    return [search, lookup, calculator]


@dataclass(slots=True)
class PromptUsage:
    """Prompt tokens of a program's calls and how many of them the engine had cached."""

    prompt_tokens: int = 0
    cached_tokens: int = 0

    def add(self, reply: Any) -> None:
        """Count one chat completion's ``usage``."""
        usage = getattr(reply, "usage", None)
        if usage is None:
            return
        self.prompt_tokens += usage.prompt_tokens or 0
        details = getattr(usage, "prompt_tokens_details", None)
        self.cached_tokens += (getattr(details, "cached_tokens", None) or 0) if details else 0

    def record(self) -> None:
        """Put the counts on the current span: the program's, inside its agent."""
        trace.get_current_span().set_attributes(
            {ATTR_PROMPT_TOKENS: self.prompt_tokens, ATTR_CACHED_TOKENS: self.cached_tokens}
        )


async def run_react(ctx: AgentContext) -> None:
    """A ReAct agent over three tools: ``size`` LLM calls, each but the last one acting with
    tools (the emulator's ``agentrt_tool_call`` hint), then an answer. The ReAct loop of
    ``agentrt.react``, with the step count planned so both phases run the same program.
    With a small model (``--models``), it checks the planner's first move."""
    spec = ctx.spec
    tools = react_tools(spec, ctx.time_scale)
    schemas = [t.openai_schema() for t in tools]
    question = f"Question {spec.index}: " + filler_text(random.Random(spec.seed), 40)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": REACT_SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]
    usage = PromptUsage()
    for step in range(spec.size):
        act = step < spec.size - 1
        reply = await agentrt.chat(
            messages,
            tools=schemas,
            extra_body={"agentrt_output_tokens": ANSWER_TOKENS, "agentrt_tool_call": act},
        )
        usage.add(reply)
        message = reply.choices[0].message
        messages.append(message.model_dump(mode="json", exclude_none=True))
        if step == 0 and ctx.small_model is not None:
            await _verify_first_move(ctx, question, message)
        if not message.tool_calls:
            break
        results = await agentrt.execute_tool_calls(message.tool_calls, tools)
        messages.extend(r.message() for r in results)
    usage.record()


async def _verify_first_move(ctx: AgentContext, question: str, message: Any) -> None:
    """Planner + verifier: the small model checks the planner's first move (a tool call or
    the answer) before it is acted upon. Its verdict stays out of the planner's history, so
    the planner's prompts are the same with one model or two."""
    move = message.content or ""
    for call in message.tool_calls or ():
        move += f"\ncall {call.function.name}({call.function.arguments})"
    await ctx.small_chat(
        [
            {"role": "system", "content": _VERIFY_PROMPT},
            {"role": "user", "content": f"{question}\n\nProposed next move: {move}"},
        ],
        **_hint(_VERDICT_TOKENS),
    )


@functools.cache
def repo_context(repo: int) -> str:
    """Repository ``repo``'s context (files, layout): the same text in every coding program
    that works on it."""
    text = filler_text(random.Random(f"agentrt-demo-repo-{repo}"), _REPO_WORDS)
    return f"Repository {repo}, the files that matter:\n\n{text}"


def coding_tools(spec: ProgramSpec, time_scale: float) -> tuple[list[agentrt.Tool[Any]], list[int]]:
    """``shell``, ``edit``, ``run_tests`` and ``search``, and the step counter they read: the
    tool of step k takes the k-th seeded duration (model seconds, scaled to wall time) and
    returns the k-th seeded output, whatever tool the model picked, so both phases run the
    same program."""
    rng = random.Random(f"agentrt-demo-coding-tools-{spec.seed}")
    plan = [
        (coding_tool_duration_s(rng), rng.randint(*_RESULT_WORDS), rng.randrange(2**31))
        for _ in range(spec.size)
    ]
    step = [0]

    async def take_time(name: str) -> str:
        duration_s, words, seed = plan[min(step[0], len(plan) - 1)]
        await anyio.sleep(duration_s / time_scale)
        return filler_text(random.Random(f"{seed}-{name}"), words)

    @agentrt.tool
    async def shell(command: str) -> str:
        """Run a shell command in the repository.

        Args:
            command: the command line
        """
        return await take_time("shell")

    @agentrt.tool
    async def edit(path: str, change: str) -> str:
        """Edit one file.

        Args:
            path: the file's path in the repository
            change: what to change, as a unified diff
        """
        return await take_time("edit")

    @agentrt.tool
    async def run_tests(selector: str) -> str:
        """Run the test suite, or the tests matching a selector.

        Args:
            selector: a test file, class or name; empty for all
        """
        return await take_time("run_tests")

    @agentrt.tool
    async def search(pattern: str) -> str:
        """Search the repository's files.

        Args:
            pattern: a regular expression
        """
        return await take_time("search")

    return [shell, edit, run_tests, search], step


async def run_coding(ctx: AgentContext) -> None:
    """A coding agent: ``size`` LLM calls over the system prompt, its repository's context
    and the issue, each but the last running one tool whose result joins the history."""
    spec = ctx.spec
    tools, step = coding_tools(spec, ctx.time_scale)
    schemas = [t.openai_schema() for t in tools]
    issue = f"Issue {spec.index}: " + filler_text(random.Random(spec.seed), _ISSUE_WORDS)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": CODING_SYSTEM_PROMPT},
        {"role": "user", "content": repo_context(spec.repo)},
        {"role": "user", "content": issue},
    ]
    usage = PromptUsage()
    for k in range(spec.size):
        act = k < spec.size - 1
        reply = await agentrt.chat(
            messages,
            tools=schemas,
            extra_body={"agentrt_output_tokens": _CODING_OUTPUT_TOKENS, "agentrt_tool_call": act},
        )
        usage.add(reply)
        message = reply.choices[0].message
        messages.append(message.model_dump(mode="json", exclude_none=True))
        if not message.tool_calls:
            break
        step[0] = k
        results = await agentrt.execute_tool_calls(message.tool_calls, tools)
        messages.extend(r.message() for r in results)
    usage.record()


async def run_map_reduce(ctx: AgentContext) -> None:
    """Summarise ``size`` chunks in parallel threads (with the small model, when there is
    one), then combine (``agentrt.map_reduce``)."""
    spec = ctx.spec
    rng = random.Random(f"agentrt-demo-doc-{spec.seed}")
    chunks = [filler_text(rng, _CHUNK_WORDS) for _ in range(spec.size)]

    async def summarise(chunk: str) -> str:
        # The small model summarises (with several models); the runtime's model combines.
        reply = await ctx.small_chat(
            [
                {"role": "system", "content": "Summarise the passage in two sentences."},
                {"role": "user", "content": chunk},
            ],
            **_hint(_MAP_TOKENS),
        )
        return reply.choices[0].message.content or ""

    async def combine(summaries: list[str]) -> str:
        numbered = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(summaries))
        reply = await agentrt.chat(
            [
                {"role": "system", "content": "Combine these summaries into one paragraph."},
                {"role": "user", "content": numbered},
            ],
            **_hint(_REDUCE_TOKENS),
        )
        return reply.choices[0].message.content or ""

    await agentrt.map_reduce(chunks, summarise, combine, limit=_MAP_PARALLEL)


async def run_mcts(ctx: AgentContext) -> None:
    """LATS tree search (``agentrt.mcts``): 3 children per expansion, ``size`` expansions.

    The depth bound is above the number of expansions, so no trajectory ends by depth and
    none is reflected upon: reflections are recorded in completion order, which differs from
    run to run, and would make the two phases run different searches."""
    spec = ctx.spec
    task = f"Puzzle {spec.index}: " + filler_text(random.Random(spec.seed), 30)
    await agentrt.mcts(task, n=3, depth=spec.size + 1, iterations=spec.size, temperature=0.8)


def base_agents() -> dict[str, AgentFn]:
    """The SDK pattern agents by kind."""
    return {
        "react": run_react,
        "map_reduce": run_map_reduce,
        "mcts": run_mcts,
        "coding": run_coding,
    }
