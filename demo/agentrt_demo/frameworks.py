"""LangGraph and AutoGen programs for the demo, when their extras and adapters are there.

``framework_agents()`` asks ``adapters.available()`` whether the framework packages are
installed (``pip install 'agentrt[langchain]'`` / ``'agentrt[autogen]'``); each one found adds
one program kind (``langgraph``, ``autogen``) to the mix, each one missing a note saying how to
add it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrt_demo.agents import AgentFn
from agentrt_demo.workload import ProgramKind

__all__ = ["FrameworkAgents", "framework_agents"]


@dataclass(slots=True)
class FrameworkAgents:
    #: Agent functions by program kind (``langgraph``, ``autogen``).
    agents: dict[ProgramKind, AgentFn] = field(default_factory=dict)
    #: Why a framework is not in the run (printed by the demo).
    notes: list[str] = field(default_factory=list)


def framework_agents() -> FrameworkAgents:
    """The framework program kinds available in this environment (``adapters.available()``
    looks for the packages without importing them)."""
    from agentrt_adapters import available
    from agentrt_demo.framework_agents import run_autogen, run_langgraph

    found = FrameworkAgents()
    usable = available()
    if usable.get("langchain"):
        found.agents["langgraph"] = run_langgraph
    else:
        found.notes.append("LangGraph agent left out: pip install 'agentrt[langchain]'")
    if usable.get("autogen"):
        found.agents["autogen"] = run_autogen
    else:
        found.notes.append("AutoGen agent left out: pip install 'agentrt[autogen]'")
    return found
