"""Pieces both adapters share (no LangChain or AutoGen import here)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import openai

from agentrt.errors import (
    DeadlineExceeded,
    EndpointUnavailable,
    LLMCallError,
    unreachable_message,
)
from agentrt.runtime.frame import Frame
from agentrt.runtime.program import Program

__all__ = ["AgentRun", "StopReason", "llm_errors"]

#: ``answer``: the agent answered; ``max_steps``: it was stopped at its step limit.
StopReason = Literal["answer", "max_steps"]


@dataclass(slots=True)
class AgentRun:
    """Outcome of one framework agent run as an agentrt program."""

    #: The finished program: id, status, DAG (``program.to_dict()``), phase totals (s).
    program: Program
    #: The agent's last text answer; None when it stopped without one.
    answer: str | None
    stop_reason: StopReason
    #: The framework's own result (LangGraph state dict, AutoGen ``TaskResult``).
    raw: Any = field(default=None, repr=False)

    @property
    def llm_calls(self) -> int:
        """LLM nodes of the program."""
        return sum(1 for n in self.program.nodes.values() if n.kind == "llm")

    @property
    def tool_calls(self) -> int:
        """Tool nodes of the program."""
        return sum(1 for n in self.program.nodes.values() if n.kind == "tool")


@contextlib.contextmanager
def llm_errors(frame: Frame | None) -> Iterator[None]:
    """Translate the openai client's errors (both frameworks call through it) to ours.

    ``DeadlineExceeded`` when the program's deadline passed, ``EndpointUnavailable`` when the
    server could not be reached, ``LLMCallError`` (with the HTTP status) for any other failure.
    """
    try:
        yield
    except openai.APITimeoutError as exc:
        if frame is not None and anyio.current_time() >= frame.graph.deadline_s:
            raise DeadlineExceeded(f"program {frame.graph.id} passed its deadline") from exc
        raise LLMCallError(f"LLM call timed out: {exc}") from exc
    except openai.APIConnectionError as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, DeadlineExceeded):
            raise DeadlineExceeded(str(cause)) from exc
        raise EndpointUnavailable(unreachable_message(str(exc.request.url), exc)) from exc
    except openai.APIStatusError as exc:
        raise LLMCallError(
            f"LLM call failed with HTTP {exc.status_code}: {exc.message}",
            status_code=exc.status_code,
        ) from exc
    except openai.OpenAIError as exc:
        raise LLMCallError(f"LLM call failed: {exc}") from exc
