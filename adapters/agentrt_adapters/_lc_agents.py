"""The LangChain adapter's agent side: agentrt tools as LangChain tools, and running graphs
and ReAct agents as agentrt programs. Public names: ``agentrt_adapters.langchain``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import Field

from agentrt.errors import AgentrtError, ConfigError
from agentrt.runtime.chat import current_runtime
from agentrt.runtime.frame import CURRENT_FRAME
from agentrt.runtime.runtime import Runtime
from agentrt.tools.runner import run_tool
from agentrt.tools.schema import Tool
from agentrt_adapters._common import AgentRun, StopReason
from agentrt_adapters._lc_core import AGENTRT_TOOL, agentrt_config, chat_model, handler_of

__all__ = ["AgentrtTool", "langchain_tools", "react_agent", "run_graph", "run_react_agent"]


class AgentrtTool(BaseTool):
    """An ``agentrt.Tool`` as a LangChain tool: the SDK runs it — validated arguments, a
    ``tool`` node, tool-wait events, its timeout and, for side-effect tools, the intent journal
    (docs/journal.md) — on the thread of the LangGraph task that calls it. Build with
    :func:`langchain_tools`. Failures the model can react to (``ToolError``) come back as
    ``Error: ...`` text; async only.
    """

    agentrt_tool: Any = Field(exclude=True)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise AgentrtError(f"agentrt tool {self.name} is async only: use ainvoke / astream")

    async def _arun(
        self, *args: Any, config: RunnableConfig, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        handler = handler_of(run_manager)
        if handler is None:
            result = await run_tool(self.agentrt_tool, kwargs)
            return result.content
        unit = handler.place(getattr(run_manager, "metadata", None))
        token = CURRENT_FRAME.set(unit.frame)
        try:
            call_id = handler.call_id_of(run_manager.run_id)
            result = await run_tool(self.agentrt_tool, kwargs, tool_call_id=call_id)
        finally:
            CURRENT_FRAME.reset(token)
            handler.lanes.end_unit(unit)
        return result.content


def langchain_tools(tools: Sequence[Any]) -> list[Any]:
    """``tools`` with every ``agentrt.Tool`` made an :class:`AgentrtTool`; LangChain tools and
    plain functions are left as they are (LangChain converts functions itself)."""
    converted: list[Any] = []
    for item in tools:
        if isinstance(item, Tool):
            converted.append(
                AgentrtTool(
                    name=item.name,
                    description=item.description or item.name,
                    args_schema=item.args_model,
                    metadata={AGENTRT_TOOL: True},
                    agentrt_tool=item,
                )
            )
        else:
            converted.append(item)
    return converted


async def run_graph(
    graph: Any,
    inputs: Any,
    *,
    runtime: Runtime | None = None,
    name: str = "langgraph",
    timeout_s: float | None = None,
    program_id: str | None = None,
    config: RunnableConfig | None = None,
) -> tuple[Any, Any]:
    """Run ``graph.ainvoke(inputs)`` as one agentrt program; returns ``(output, program)``.

    ``graph``: any LangChain runnable (a compiled LangGraph graph, an agent, a chain).
    ``timeout_s``: the program's budget (seconds; ``DeadlineExceeded`` past it).
    """
    rt = current_runtime(runtime)
    async with rt.program(
        name, program_id=program_id, timeout_s=timeout_s, operation="invoke_agent"
    ) as program:
        output = await graph.ainvoke(inputs, config=agentrt_config(config))
    return output, program


def react_agent(
    runtime: Runtime,
    tools: Sequence[Any],
    *,
    model: str | None = None,
    system: str | None = None,
    max_llm_calls: int = 6,
    model_options: Mapping[str, Any] | None = None,
) -> Any:
    """A ReAct agent graph (``langchain.agents.create_agent``) on ``runtime``'s model.

    ``tools``: ``agentrt.Tool``s (run by the SDK, journal included), LangChain tools, or async
    functions with type hints and a docstring. The agent stops after ``max_llm_calls`` model
    calls. ``model_options``: ``ChatOpenAI`` fields (``max_tokens``, ``temperature``,
    ``extra_body``...). Run it with :func:`run_graph` or ``ainvoke(..., agentrt_config())``.
    """
    from langchain.agents import create_agent
    from langchain.agents.middleware import ModelCallLimitMiddleware

    if max_llm_calls < 1:
        raise ConfigError(f"max_llm_calls must be >= 1, got {max_llm_calls}")
    llm = chat_model(runtime, model, **dict(model_options or {}))
    return create_agent(
        llm,
        tools=langchain_tools(tools),
        system_prompt=system,
        middleware=[ModelCallLimitMiddleware(run_limit=max_llm_calls, exit_behavior="end")],
    )


async def run_react_agent(
    runtime: Runtime,
    task: str,
    tools: Sequence[Any],
    *,
    model: str | None = None,
    system: str | None = None,
    name: str = "langgraph-react",
    max_llm_calls: int = 6,
    timeout_s: float | None = None,
    max_tokens: int | None = 256,
    program_id: str | None = None,
    model_options: Mapping[str, Any] | None = None,
    new_program: bool = True,
) -> AgentRun:
    """Run one ReAct agent (:func:`react_agent`) on ``task``.

    ``new_program=True``: as a program of its own named ``name`` (``timeout_s``: its budget in
    seconds; ``program_id``: default a fresh one). ``new_program=False``: inside the current
    program (e.g. one the caller opened; raises ``AgentrtError`` outside any). ``max_tokens``:
    per model call (None = the server's default); ``model_options``: more ``ChatOpenAI``
    fields. ``stop_reason`` is ``max_steps`` when ``max_llm_calls`` ended the run.
    """
    options = dict(model_options or {})
    if max_tokens is not None:
        options.setdefault("max_tokens", max_tokens)
    agent = react_agent(
        runtime,
        tools,
        model=model,
        system=system,
        max_llm_calls=max_llm_calls,
        model_options=options,
    )
    inputs = {"messages": [{"role": "user", "content": task}]}
    if new_program:
        state, program = await run_graph(
            agent, inputs, runtime=runtime, name=name, timeout_s=timeout_s, program_id=program_id
        )
    else:
        frame = CURRENT_FRAME.get()
        if frame is None:
            raise AgentrtError("new_program=False needs a current program")
        state = await agent.ainvoke(inputs, config=agentrt_config())
        program = frame.run
    messages = state.get("messages", []) if isinstance(state, dict) else []
    last = messages[-1] if messages else None
    # The call-limit middleware ends the run with a message of its own, which no model wrote
    # (a model's message carries its finish_reason).
    answered = (
        isinstance(last, AIMessage)
        and not last.tool_calls
        and bool(last.response_metadata.get("finish_reason"))
    )
    answer = last.text if answered and isinstance(last, AIMessage) else None
    reason: StopReason = "answer" if answered else "max_steps"
    return AgentRun(program, answer or None, reason, raw=state)
