"""``CallTarget``: what the recording layer tells the layers under it about an LLM call.

It travels as an httpx request extension (``EXTENSION``), the seam httpx itself uses for
per-request transport options; a request without one is not an LLM call (e.g. a model list).
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from opentelemetry.trace import Span

from agentrt.program.model import Node, ProgramGraph

__all__ = ["EXTENSION", "CallTarget", "target_of"]

#: Request extension key holding the ``CallTarget``.
EXTENSION = "agentrt.call"


@dataclass(slots=True)
class CallTarget:
    """The DAG node an LLM request sends, in its program's graph."""

    node: Node
    graph: ProgramGraph
    #: The call's span (its ``traceparent``); the current span when the call has none.
    span: Span
    #: Budget sent with the call (milliseconds), set by the deadline layer; None = no deadline.
    timeout_ms: int | None = None


def target_of(request: httpx.Request) -> CallTarget | None:
    """The request's ``CallTarget``, None for a request that is not an LLM call."""
    target = request.extensions.get(EXTENSION)
    return target if isinstance(target, CallTarget) else None
