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

__all__ = [
    "AgentrtError",
    "ConfigError",
    "DeadlineExceeded",
    "EndpointUnavailable",
    "JournalError",
    "LLMCallError",
    "NonDeterminismError",
    "ProtocolError",
    "ToolArgumentsInvalid",
    "ToolError",
    "ToolTimeout",
    "UnknownOutcome",
    "__version__",
]
