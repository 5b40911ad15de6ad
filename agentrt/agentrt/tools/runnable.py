"""``RunnableTool``: what the tool runner needs of a tool.

``agentrt.tools.schema.Tool`` implements it. The runner names this protocol rather than
``Tool`` because ``Tool.__call__`` runs the tool through the runner: naming ``Tool`` back
would tie the two modules into a cycle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic import BaseModel

from agentrt.journal.api import ReconcileResult
from agentrt.runtime.config import ToolErrorMode

__all__ = ["Reconcile", "RunnableTool"]

#: Asks the outside world whether the step with this idempotency key already happened.
Reconcile = Callable[[str], Awaitable[ReconcileResult]]


class RunnableTool(Protocol):
    """A validated tool the runner can run as a ``tool`` node."""

    #: The name the model calls it by (``[A-Za-z0-9_-]{1,64}``).
    name: str
    #: What it does, for the model ("" for none).
    description: str
    #: The tool changes the outside world: it runs through the journal (intent first).
    side_effect: bool
    #: Running it twice is harmless.
    idempotent: bool
    #: See ``Reconcile``; None = none.
    reconcile: Reconcile | None
    #: Per-call timeout (seconds); None = the runtime's default, then only the deadline.
    timeout_s: float | None
    #: The pydantic model the arguments are validated against.
    args_model: type[BaseModel]

    def parse(self, arguments: str | dict[str, Any] | None) -> BaseModel:
        """Validated arguments; raises ``ToolArgumentsInvalid``."""
        ...

    def error_mode(self, runtime_default: ToolErrorMode) -> ToolErrorMode:
        """What an exception from the function does: ``return`` or ``raise``."""
        ...

    def invoke(self, arguments: BaseModel, key: str) -> Awaitable[object]:
        """Run the function with validated arguments and the step's idempotency key."""
        ...
