"""Small pieces of running a framework agent as a program, shared by the adapters (no framework
import here)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentrt.errors import AgentrtError, ConfigError
from agentrt.runtime.frame import CURRENT_FRAME, Frame
from agentrt.runtime.program import Program
from agentrt.runtime.runtime import Runtime
from agentrt_adapters._common import AgentRun

__all__ = [
    "answer_text",
    "configured_model",
    "current_program",
    "require_frame",
    "run_agent_as_program",
    "served_model_name",
]


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


async def served_model_name(rt: Runtime, model: str | None) -> str:
    """``model``, else ``RuntimeConfig.model``, else the model the server serves (asked once per
    runtime; raises as ``agentrt.discover_model`` does)."""
    return model or rt.config.model or await rt.served_model.get(rt.transport)


async def run_agent_as_program(
    rt: Runtime,
    run: Callable[[], Awaitable[Any]],
    output: Callable[[Any], Any],
    *,
    step_limit: type[BaseException],
    new_program: bool,
    name: str,
    timeout_s: float | None,
    program_id: str | None,
) -> AgentRun:
    """Run a framework agent, ``await run()``, in a program of its own (``new_program``: named
    ``name``, an ``invoke_agent`` span, ``timeout_s`` its budget in seconds, ``program_id``
    default a fresh one) or in the current program (``AgentrtError`` outside one).

    The answer is ``output(result)`` as text (:func:`answer_text`); ``step_limit``, the
    framework's error for an agent stopped at its step limit, makes ``stop_reason="max_steps"``
    (with the error as ``raw``)."""

    async def body(program: Program) -> AgentRun:
        try:
            result = await run()
        except step_limit as exc:
            return AgentRun(program, None, "max_steps", raw=exc)
        return AgentRun(program, answer_text(output(result)), "answer", raw=result)

    if not new_program:
        return await body(current_program("new_program=False"))
    async with rt.program(
        name, program_id=program_id, timeout_s=timeout_s, operation="invoke_agent"
    ) as program:
        return await body(program)
