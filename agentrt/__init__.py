"""agentrt: run agent programs as dynamic DAGs of tagged LLM and tool calls.

The public surface is exactly ``__all__``; everything else is private (tests/test_public_api.py
keeps this honest).
"""

from __future__ import annotations

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
    ToolTimeout,
    UnknownOutcome,
)

__version__ = "0.1.0"

# The SDK (imported after __version__: the runtime reports it to the controller).
from agentrt.journal.api import ReconcileResult
from agentrt.patterns.map_reduce import map_reduce
from agentrt.patterns.mcts import MctsResult, mcts
from agentrt.patterns.react import ReactResult, react
from agentrt.runtime.chat import chat
from agentrt.runtime.config import RuntimeConfig
from agentrt.runtime.flow import gather, parallel, wait
from agentrt.runtime.program import Program
from agentrt.runtime.runtime import Runtime
from agentrt.runtime.telemetry import Telemetry, make_telemetry
from agentrt.tools.runner import ToolResult, execute_tool_calls
from agentrt.tools.schema import IdempotencyKey, Tool, tool

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
    "ToolResult",
    "ToolTimeout",
    "UnknownOutcome",
    "__version__",
    "chat",
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
