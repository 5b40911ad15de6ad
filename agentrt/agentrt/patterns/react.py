"""ReAct: the LLM ↔ tools loop (reason, act with tools, observe, repeat) with a step bound."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrt.errors import ToolArgumentsInvalid
from agentrt.runtime.chat import ModelChoice, chat
from agentrt.runtime.frame import CURRENT_FRAME
from agentrt.runtime.runtime import current_runtime
from agentrt.tools.runner import ToolResult, execute_tool_calls
from agentrt.tools.schema import Tool

__all__ = ["ReactResult", "react"]


@dataclass(slots=True)
class ReactResult:
    """Outcome of a ReAct run."""

    #: The model's final answer; None when the step bound was hit first.
    answer: str | None
    #: ``answer`` or ``max_steps``.
    stop_reason: Literal["answer", "max_steps"]
    #: LLM calls made.
    steps: int
    #: The whole conversation (system, user, assistant and tool messages).
    messages: list[dict[str, Any]] = field(repr=False)
    #: Every tool call's outcome, in order.
    tool_results: list[ToolResult] = field(default_factory=list, repr=False)


async def react(
    task: str | Sequence[Mapping[str, Any]],
    tools: Sequence[Tool[Any]],
    *,
    system: str | None = None,
    model: ModelChoice | None = None,
    max_steps: int = 10,
    max_invalid_tool_calls: int = 2,
    **params: Any,
) -> ReactResult:
    """Run the ReAct loop until the model answers without calling a tool, or ``max_steps``
    LLM calls were made.

    ``task``: a user message or a whole message list. Tool errors (bad arguments, timeouts, a
    tool's ``ToolError``) go back to the model as tool messages. After more than
    ``max_invalid_tool_calls`` consecutive turns with malformed / invalid tool calls the
    loop gives up with ``ToolArgumentsInvalid``. Runs in the current program, or in a new one
    named ``react`` outside any. ``model``: a model or an ordered list of candidates, as
    :func:`~agentrt.chat` takes it (docs/sdk.md, "Models").
    """
    if CURRENT_FRAME.get() is None:
        async with current_runtime().program("react", operation="invoke_agent"):
            return await react(
                task,
                tools,
                system=system,
                model=model,
                max_steps=max_steps,
                max_invalid_tool_calls=max_invalid_tool_calls,
                **params,
            )
    if max_steps < 1:
        raise ValueError("max_steps must be >= 1")
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    if isinstance(task, str):
        messages.append({"role": "user", "content": task})
    else:
        messages.extend(dict(m) for m in task)
    schemas = [t.openai_schema() for t in tools]
    results: list[ToolResult] = []
    invalid_streak = 0
    for step in range(1, max_steps + 1):
        completion = await chat(messages, model=model, tools=schemas or None, **params)
        message = completion.choices[0].message
        messages.append(message.model_dump(mode="json", exclude_none=True))
        if not message.tool_calls:
            return ReactResult(message.content or "", "answer", step, messages, results)
        turn = await execute_tool_calls(message.tool_calls, tools)
        results.extend(turn)
        messages.extend(r.message() for r in turn)
        invalid = [r for r in turn if isinstance(r.error, ToolArgumentsInvalid)]
        invalid_streak = invalid_streak + 1 if invalid else 0
        if invalid_streak > max_invalid_tool_calls:
            raise ToolArgumentsInvalid(
                f"the model made invalid tool calls {invalid_streak} turns in a row; "
                f"last: {invalid[-1].error}"
            )
    return ReactResult(None, "max_steps", max_steps, messages, results)
