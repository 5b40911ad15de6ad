"""What the controller reads of an OpenAI Responses API request (``POST /v1/responses``).

The call path is the chat path's (:class:`~agentrt_controller.service.proxy.CompletionsEndpoint`
with ``api="responses"``): program tags, scheduling, admission, routing, retention and
charging alike; only the body's shape differs. This module maps it onto what the core knows:

* :func:`chat_view` — the request as chat ``messages`` and ``tools`` (``instructions`` first as
  a system message; ``message`` items by role; consecutive ``function_call`` items as one
  assistant message's ``tool_calls``; ``function_call_output`` items as ``tool`` messages;
  ``reasoning`` and item references left out). Prefix-aware routing hashes it and KV
  retention pins it (docs/routing.md), the way an engine renders a Responses request through
  its chat template (vLLM does; so does our emulator).
* :func:`prompt_chars` — the text the prompt is made of (for the bytes/4 estimate until the
  answer's ``usage`` says).

Usage of the answer (``input_tokens``, ``output_tokens``,
``input_tokens_details.cached_tokens``) is read by :func:`~agentrt_controller.service.sse.
responses_usage`, from ``response.completed`` in a stream. Pure functions, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["RESPONSES_PATH", "chat_view", "prompt_chars"]

RESPONSES_PATH = "/v1/responses"


def _content_text(content: Any) -> str:
    """A message item's content (a string, or a list of ``input_text`` / ``output_text`` /
    ``refusal`` parts) as text; other parts (images, files) count as nothing."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if isinstance(part, Mapping):
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str):
                parts.append(text)
    return "".join(parts)


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _content_text(output)
    return json.dumps(output) if output is not None else ""


def _items(body: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    value = body.get("input")
    if isinstance(value, str):
        yield {"type": "message", "role": "user", "content": value}
    elif isinstance(value, list):
        yield from (item for item in value if isinstance(item, Mapping))


def chat_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's ``instructions`` and ``input`` as chat messages (module docstring)."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    for item in _items(body):
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if isinstance(role, str):
                messages.append({"role": role, "content": _content_text(item.get("content"))})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": _output_text(item.get("output")),
                }
            )
    return messages


def chat_tools(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's function tools in the chat shape (other tool kinds left out)."""
    tools = body.get("tools")
    out: list[dict[str, Any]] = []
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, Mapping) and tool.get("type") == "function":
            function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
            out.append({"type": "function", "function": function})
    return out


def chat_view(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` as a chat request (``model``, ``cache_salt``, ``messages``, ``tools``)."""
    view: dict[str, Any] = {"model": body.get("model"), "messages": chat_messages(body)}
    if "cache_salt" in body:
        view["cache_salt"] = body["cache_salt"]
    tools = chat_tools(body)
    if tools:
        view["tools"] = tools
    return view


def prompt_chars(body: Mapping[str, Any]) -> int:
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
