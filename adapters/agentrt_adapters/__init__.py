"""Adapters that give LangChain / LangGraph and AutoGen code agentrt tagging and tools.

``agentrt_adapters.langchain`` needs the ``langchain`` extra and ``agentrt_adapters.autogen`` the
``autogen``
extra; importing this package needs neither (``available()`` says which can be used). See
docs/adapters.md.
"""

from __future__ import annotations

from importlib.util import find_spec

from agentrt_adapters._common import AgentRun, StopReason

__all__ = ["AgentRun", "StopReason", "available"]

#: The top-level packages each adapter imports.
_NEEDS: dict[str, tuple[str, ...]] = {
    "langchain": ("langchain", "langchain_core", "langchain_openai", "langgraph"),
    "autogen": ("autogen_core", "autogen_agentchat", "autogen_ext"),
    "agent_framework": ("agent_framework", "agent_framework_openai"),
    "openai_agents": ("agents",),
    "pydantic_ai": ("pydantic_ai",),
}


def available() -> dict[str, bool]:
    """``{adapter: bool}`` (``langchain``, ``autogen``, ``openai_agents``, ``pydantic_ai``...):
    whether each adapter's packages are installed (without importing them)."""
    return {
        name: all(find_spec(p) is not None for p in packages) for name, packages in _NEEDS.items()
    }
