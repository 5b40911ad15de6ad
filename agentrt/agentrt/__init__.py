"""agentrt: run agent programs as dynamic DAGs of tagged LLM and tool calls.

The public surface is exactly ``__all__``; everything else is private (tests/test_public_api.py
keeps this honest).

The SDK's names are imported on first use (PEP 562 ``__getattr__``): ``import agentrt`` alone
— which the ``agentrt`` command does — must not pull in openai, httpx, OpenTelemetry or
SQLAlchemy, so that ``agentrt --help`` stays fast. ``agentrt.chat`` etc. behave exactly as
eager imports would; type checkers see the imports below.
"""

from __future__ import annotations

import typing as _typing

# Private aliases: every public module-level name must be in __all__.
from agentrt import _lazy
from agentrt._version import __version__
from agentrt.errors import (
    AgentrtError,
    ConfigError,
    DeadlineExceeded,
    EndpointUnavailable,
    JournalError,
    LLMCallError,
    NonDeterminismError,
    ProtocolError,
    ToolArgumentsInvalid,
    ToolError,
    ToolFailed,
    ToolTimeout,
    UnknownOutcome,
)

if _typing.TYPE_CHECKING:
    from agentrt.journal.api import ReconcileResult
    from agentrt.patterns.map_reduce import map_reduce
    from agentrt.patterns.mcts import MctsResult, mcts
    from agentrt.patterns.react import ReactResult, react
    from agentrt.runtime.chat import chat
    from agentrt.runtime.config import RuntimeConfig
    from agentrt.runtime.flow import gather, parallel, wait
    from agentrt.runtime.models import discover_model
    from agentrt.runtime.program import Program
    from agentrt.runtime.runtime import Runtime
    from agentrt.runtime.telemetry import Telemetry, make_telemetry
    from agentrt.tools.runner import ToolResult, execute_tool_calls
    from agentrt.tools.schema import IdempotencyKey, Tool, tool

#: Public name -> module defining it, imported on first access.
_LAZY: dict[str, str] = {
    "ReconcileResult": "agentrt.journal.api",
    "map_reduce": "agentrt.patterns.map_reduce",
    "MctsResult": "agentrt.patterns.mcts",
    "mcts": "agentrt.patterns.mcts",
    "ReactResult": "agentrt.patterns.react",
    "react": "agentrt.patterns.react",
    "chat": "agentrt.runtime.chat",
    "RuntimeConfig": "agentrt.runtime.config",
    "discover_model": "agentrt.runtime.models",
    "gather": "agentrt.runtime.flow",
    "parallel": "agentrt.runtime.flow",
    "wait": "agentrt.runtime.flow",
    "Program": "agentrt.runtime.program",
    "Runtime": "agentrt.runtime.runtime",
    "Telemetry": "agentrt.runtime.telemetry",
    "make_telemetry": "agentrt.runtime.telemetry",
    "ToolResult": "agentrt.tools.runner",
    "execute_tool_calls": "agentrt.tools.runner",
    "IdempotencyKey": "agentrt.tools.schema",
    "Tool": "agentrt.tools.schema",
    "tool": "agentrt.tools.schema",
}


if not _typing.TYPE_CHECKING:  # hidden from type checkers, which see the real imports above
    __getattr__, __dir__ = _lazy.exports(__name__, _LAZY)


__all__ = [
    "AgentrtError",
    "ConfigError",
    "DeadlineExceeded",
    "EndpointUnavailable",
    "IdempotencyKey",
    "JournalError",
    "LLMCallError",
    "MctsResult",
    "NonDeterminismError",
    "Program",
    "ProtocolError",
    "ReactResult",
    "ReconcileResult",
    "Runtime",
    "RuntimeConfig",
    "Telemetry",
    "Tool",
    "ToolArgumentsInvalid",
    "ToolError",
    "ToolFailed",
    "ToolResult",
    "ToolTimeout",
    "UnknownOutcome",
    "__version__",
    "chat",
    "discover_model",
    "execute_tool_calls",
    "gather",
    "make_telemetry",
    "map_reduce",
    "mcts",
    "parallel",
    "react",
    "tool",
    "wait",
]
