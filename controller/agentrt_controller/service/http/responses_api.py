"""What the controller reads of an OpenAI Responses API request (``POST /v1/responses``).

The call path is the chat path's
(:class:`~agentrt_controller.service.http.proxy.CompletionsEndpoint` with ``api="responses"``):
program tags, scheduling, admission, routing, retention and charging alike; only the body's
shape differs. This module maps it onto what the core knows:

* :func:`chat_view` — the request as chat ``messages`` and ``tools``, read as the emulator reads
  it (:mod:`agentrt_serving.responses_chat`, leniently: what cannot be read is left out, the
  engine answers it). Prefix-aware routing hashes it and KV retention pins it
  (docs/routing.md), the way an engine renders a Responses request through its chat template
  (vLLM does; so does our emulator).
* :func:`prompt_chars` — the text the prompt is made of (for the bytes/4 estimate until the
  answer's ``usage`` says).

Usage of the answer (``input_tokens``, ``output_tokens``,
``input_tokens_details.cached_tokens``) is read by :func:`~agentrt_controller.service.http.sse.
responses_usage`, from ``response.completed`` in a stream. Pure functions, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NotRequired, TypedDict

from agentrt_serving.responses_chat import chat_messages, chat_tools

__all__ = ["RESPONSES_PATH", "ChatView", "chat_view", "prompt_chars"]

RESPONSES_PATH = "/v1/responses"


class ChatView(TypedDict):
    """A Responses API request in the chat shape (:func:`chat_view`): what the core's routing,
    retention and exact prefix index read of a body."""

    #: The request's ``model`` as given (``None`` when it has none).
    model: object
    #: ``instructions`` and ``input`` as chat messages.
    messages: list[dict[str, object]]
    #: The request's ``cache_salt`` as given, when it has one.
    cache_salt: NotRequired[object]
    #: The function tools in the chat shape, when there are any.
    tools: NotRequired[list[dict[str, object]]]


def chat_view(body: Mapping[str, object]) -> ChatView:
    """``body`` as a chat request (``model``, ``cache_salt``, ``messages``, ``tools``)."""
    view: ChatView = {"model": body.get("model"), "messages": chat_messages(body)}
    if "cache_salt" in body:
        view["cache_salt"] = body["cache_salt"]
    tools = chat_tools(body)
    if tools:
        view["tools"] = tools
    return view


def prompt_chars(body: Mapping[str, object]) -> int:
    """Characters of the prompt's text: instructions, message contents, function calls and
    their outputs, and the tools' JSON."""
    total = 0
    for message in chat_messages(body):
        total += len(message.get("content") or "")
        for call in message.get("tool_calls", ()):
            function = call["function"]
            total += len(str(function.get("name") or "")) + len(str(function.get("arguments")))
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        total += len(json.dumps(tools))
    return total
