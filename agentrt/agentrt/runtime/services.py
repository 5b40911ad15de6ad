"""``RuntimeServices``: what a program run, an LLM call and a tool call use of their runtime.

``agentrt.runtime.runtime.Runtime`` implements it. Programs, frames, calls and the recording
transport hold their runtime as this protocol, not as ``Runtime``: ``Runtime`` builds programs
and the transport stack, so naming it back from them would tie the modules into a cycle.
"""

from __future__ import annotations

from typing import Protocol

import httpx
import openai

from agentrt.journal.api import StepJournal
from agentrt.runtime.config import RuntimeConfig
from agentrt.runtime.controller import ControllerLink
from agentrt.runtime.models import ServedModel
from agentrt.runtime.telemetry import Instruments
from agentrt.tools.durations import DurationHistory

__all__ = ["RuntimeServices"]


class RuntimeServices(Protocol):
    """The parts of an open runtime that the code running a program reaches."""

    @property
    def config(self) -> RuntimeConfig: ...

    @property
    def instruments(self) -> Instruments:
        """Tracer and meters (no-op ones without providers)."""
        ...

    @property
    def link(self) -> ControllerLink:
        """The controller link: program and tool-wait events."""
        ...

    @property
    def session_id(self) -> str:
        """The session id sent with every call."""
        ...

    @property
    def server_address(self) -> str:
        """Host of ``config.base_url`` (the ``server.address`` span attribute)."""
        ...

    @property
    def server_port(self) -> int:
        """Port of ``config.base_url`` (the ``server.port`` span attribute)."""
        ...

    @property
    def journal(self) -> StepJournal | None:
        """The step journal, None without one."""
        ...

    @property
    def tool_history(self) -> DurationHistory:
        """Observed tool durations, for predicting a tool wait without a journal."""
        ...

    @property
    def served_model(self) -> ServedModel:
        """The model the server serves (asked once)."""
        ...

    @property
    def transport(self) -> httpx.AsyncBaseTransport:
        """The top of the transport stack; raises ``AgentrtError`` when not open."""
        ...

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The runtime's own tagged client; raises ``AgentrtError`` when not open."""
        ...

    def require_open(self) -> None:
        """Raises ``AgentrtError`` unless the runtime is open."""
        ...
