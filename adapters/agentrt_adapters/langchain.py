"""LangChain / LangGraph adapter: agentrt tagging, threads and tool waits for LangChain code.

Needs the ``langchain`` extra (``pip install 'agentrt-adapters[langchain]'``). Three pieces:

* :func:`chat_model` — a ``ChatOpenAI`` (subclass :class:`AgentrtChatOpenAI`) whose HTTP
  client is the runtime's tagging client: every call, streamed or not, carries the current
  program's call tags, deadline and ``traceparent`` (callbacks cannot add headers, so the
  tagging happens in the transport), and becomes an ``llm`` node of the program;
* :class:`AgentrtCallbackHandler` — passed in the run's config, it maps the LangGraph run
  onto the program it is created in: each LangGraph task that runs alongside another gets a
  thread of its own (``agentrt_adapters._lanes``), and each tool execution becomes a ``tool`` node
  whose wait is reported to the controller (tool-start / tool-end, with a predicted duration);
* :func:`langchain_tools` — ``agentrt.Tool``s as LangChain tools (:class:`AgentrtTool`), run
  by the SDK: validation, node, tool wait, timeout and the intent journal for side effects;
* :func:`run_graph` / :func:`run_react_agent` (:func:`react_agent` builds the agent) — one
  call that runs a graph (or a ReAct agent built with ``langchain.agents.create_agent``) as
  one agentrt program, or inside the caller's.

The code lives in ``agentrt_adapters._lc_core`` (handler, model) and
``agentrt_adapters._lc_agents``.

Async only: ``ainvoke`` / ``astream`` / ``abatch``. The model's sync entry points (``invoke``,
``stream``, ``batch``, a graph's sync ``invoke`` / ``stream``) raise ``AgentrtError`` before
sending anything: they would run outside the program's event loop (see
:class:`AgentrtChatOpenAI`), so they could be neither tagged nor recorded safely.
"""

from __future__ import annotations

from agentrt_adapters._lc_agents import (
    AgentrtTool,
    langchain_tools,
    react_agent,
    run_graph,
    run_react_agent,
)
from agentrt_adapters._lc_core import (
    AgentrtCallbackHandler,
    AgentrtChatOpenAI,
    agentrt_config,
    chat_model,
)

__all__ = [
    "AgentrtCallbackHandler",
    "AgentrtChatOpenAI",
    "AgentrtTool",
    "agentrt_config",
    "chat_model",
    "langchain_tools",
    "react_agent",
    "run_graph",
    "run_react_agent",
]
