"""An OpenAI Responses API request (``POST /v1/responses``) as the chat request it amounts to —
the way an engine renders it through its chat template (vLLM does; so does our emulator).

Both servers read it so: the emulator to serve it, the controller to hash and pin the prompt the
engine will see (docs/routing.md) and to estimate its size. The mapping:

* ``instructions`` (a non-empty string) is a leading ``system`` message;
* ``input`` is a string (one ``user`` message) or a list of items: ``message`` items (``role``
  and ``content``: a string or a list of ``input_text`` / ``output_text`` / ``text`` /
  ``refusal`` parts; ``type`` may be left out) by role; consecutive ``function_call`` items as
  one ``assistant`` message's ``tool_calls``; ``function_call_output`` items as ``tool``
  messages; ``reasoning`` items left out;
* ``tools``: function tools (``name``, ``description``, ``parameters``) in the chat shape.

Two readings of input outside that: with ``reject`` (the emulator) it raises
``reject(message, param)``, ``param`` naming the offending field (``input.3``, ``tools``); without
(the controller, which passes any request on and lets the engine answer it) it leaves out what
it cannot read, and a ``function_call_output`` whose output is an object counts as its JSON.
Pure functions, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Reject", "chat_messages", "chat_tools"]

#: ``reject(message, param)``: the error a server raises for input it refuses.
Reject = Callable[[str, str], Exception]

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def chat_messages(body: Mapping[str, Any], reject: Reject | None = None) -> list[dict[str, Any]]:
    """The request's ``instructions`` and ``input`` as chat messages (module docstring)."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    value = body.get("input")
    if isinstance(value, str):
        return [*messages, {"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        if reject is not None:
            raise reject("input must be a string or a non-empty list of items", "input")
        return messages
    for index, item in enumerate(value):
        where = f"input.{index}"
        if not isinstance(item, Mapping):
            if reject is not None:
                raise reject(f"{where} must be an object", where)
            continue
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            # A strict reader passes any role on: the chat request's validation names it.
            if reject is not None or isinstance(role, str):
                content = _content_text(item.get("content"), where, reject)
                messages.append({"role": role, "content": content})
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
            text = _output_text(item.get("output"), where, reject)
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
        elif kind != "reasoning" and reject is not None:
            raise reject(f"{where}: input items of type {kind!r} are not supported", where)
    return messages


def chat_tools(body: Mapping[str, Any], reject: Reject | None = None) -> list[dict[str, Any]]:
    """The request's function tools in the chat shape; other tool kinds are refused (with
    ``reject``) or left out."""
    tools = body.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list):
        if reject is not None:
            raise reject("tools must be a list", "tools")
        return []
    out: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            if reject is not None:
                raise reject(f"tools.{index}: only function tools are supported", "tools")
            continue
        function = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
        out.append({"type": "function", "function": function})
    return out


def _content_text(content: Any, where: str, reject: Reject | None) -> str:
    """A message's content (a string, or a list of text / refusal parts) as text; other parts
    (images, files) are refused or count as nothing."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        if reject is not None:
            raise reject(f"{where}.content must be a string or a list of parts", where)
        return ""
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        elif reject is not None:
            raise reject(f"{where}.content.{index}: only text parts are supported", where)
    return "".join(texts)


def _output_text(output: Any, where: str, reject: Reject | None) -> str:
    """A function call's output: a string, or content parts; leniently, any other value as its
    JSON."""
    if isinstance(output, str):
        return output
    if reject is None and output is not None and not isinstance(output, list):
        return json.dumps(output)
    return _content_text(output, where, reject)
