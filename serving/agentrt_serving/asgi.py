"""The ASGI callable types (the ASGI 3 specification's ``scope``, ``receive``, ``send``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["App", "Message", "Receive", "Scope", "Send"]

#: One connection's or request's scope (``type``, ``method``, ``path``, ``headers``, ...).
Scope = MutableMapping[str, Any]
#: One event received from, or sent to, the server.
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
#: An ASGI application.
App = Callable[[Scope, Receive, Send], Awaitable[None]]
