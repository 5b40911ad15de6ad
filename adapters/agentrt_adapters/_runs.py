"""Small pieces of running a framework agent as a program, shared by the OpenAI Agents SDK and
Pydantic AI adapters (no framework import here)."""

from __future__ import annotations

from typing import Any

from agentrt.errors import AgentrtError, ConfigError
from agentrt.program.context import CURRENT_FRAME, Frame
from agentrt.program.program import Program
from agentrt.runtime.runtime import Runtime

__all__ = ["answer_text", "configured_model", "current_program", "require_frame"]


def require_frame(what: str) -> Frame:
    """The current program frame; ``AgentrtError`` naming ``what`` outside any program."""
    frame = CURRENT_FRAME.get()
    if frame is None:
        raise AgentrtError(f"{what} needs a current program (`async with rt.program(...)`)")
    return frame


def current_program(what: str) -> Program:
    """The current program (as :func:`require_frame`)."""
    run = require_frame(what).run
    assert isinstance(run, Program)  # a current frame's run is always a Program
    return run


def configured_model(rt: Runtime, model: str | None) -> str:
    """``model``, else ``RuntimeConfig.model``; ``ConfigError`` when neither names one."""
    name = model or rt.config.model
    if not name:
        raise ConfigError("no model: pass model= or set RuntimeConfig.model")
    return name


def answer_text(output: Any) -> str | None:
    """A run's final output as the answer's text (None when empty or absent)."""
    if output is None:
        return None
    text = output if isinstance(output, str) else str(output)
    return text or None
