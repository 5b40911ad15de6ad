"""The demo's LangGraph and AutoGen agents, written with the agentrt adapters (docs/adapters.md).

Both answer a question with the same three tools as the SDK's ReAct programs (``agentrt``
tools: each execution is a ``tool`` node with its tool-wait reported to the controller) and
run inside the program the demo opened for them (``new_program=False``), so they show up in
the controller's process table, the summary and the timeline like every other program.
"""

from __future__ import annotations

import importlib
import random

from agentrt_demo.agents import (
    ANSWER_TOKENS,
    REACT_SYSTEM_PROMPT,
    AgentContext,
    react_tools,
)
from agentrt_demo.workload import filler_text

__all__ = ["import_frameworks", "run_autogen", "run_langgraph"]


def import_frameworks(kinds: list[str]) -> None:
    """Import the frameworks of ``kinds`` now (seconds of imports), not inside the first
    program of the first phase, where they would count against that program."""
    modules = {
        "langgraph": ("agentrt_adapters.langchain", "langchain.agents"),
        "autogen": ("agentrt_adapters.autogen", "autogen_agentchat.agents"),
    }
    for kind in kinds:
        for module in modules.get(kind, ()):
            importlib.import_module(module)


def _question(ctx: AgentContext) -> str:
    return f"Question {ctx.spec.index}: " + filler_text(random.Random(ctx.spec.seed), 40)


def _options() -> dict[str, object]:
    # The emulator's answer-length hint, as for the SDK's ReAct programs.
    return {"extra_body": {"agentrt_output_tokens": ANSWER_TOKENS}}


async def run_langgraph(ctx: AgentContext) -> None:
    """A LangGraph ReAct agent (``langchain.agents.create_agent``) with at most ``size`` LLM
    calls, through ``agentrt_adapters.langchain``."""
    from agentrt_adapters.langchain import run_react_agent

    await run_react_agent(
        ctx.runtime,
        _question(ctx),
        react_tools(ctx.spec, ctx.time_scale),
        system=REACT_SYSTEM_PROMPT,
        max_llm_calls=ctx.spec.size,
        max_tokens=None,
        model_options=_options(),
        new_program=False,
    )


async def run_autogen(ctx: AgentContext) -> None:
    """An AutoGen ``AssistantAgent`` with at most ``size`` rounds of tool calls, through
    ``agentrt_adapters.autogen``."""
    from agentrt_adapters.autogen import run_assistant_agent

    await run_assistant_agent(
        ctx.runtime,
        _question(ctx),
        react_tools(ctx.spec, ctx.time_scale),
        system=REACT_SYSTEM_PROMPT,
        max_tool_iterations=ctx.spec.size,
        max_tokens=None,
        model_options=_options(),
        new_program=False,
    )
