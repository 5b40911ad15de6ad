"""The OpenAI Responses API's answer objects and stream events, built from a scripted output as
the engine generates it (no I/O).

One request, one choice. Output items follow the scripted output's order: a ``message`` item
(``output_text`` content) for the text, then one ``function_call`` item per tool call (opened
at the token after which its name is known, as the chat stream's tool header is). A stream is
the event sequence of OpenAI's API (and vLLM's): ``response.created``,
``response.in_progress``; per message item ``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta`` ..., ``response.output_text
.done``, ``response.content_part.done``, ``response.output_item.done``; per function call
``response.output_item.added``, ``response.function_call_arguments.delta`` ...,
``response.function_call_arguments.done``, ``response.output_item.done``; finally
``response.completed`` — or ``response.incomplete`` (``incomplete_details.reason =
max_output_tokens``) when the output was cut at ``max_output_tokens``. Each event is
``event: <type>`` + ``data: <json>``; ``sequence_number`` counts from 0. One delta event per
engine step and item: tokens that arrive together are merged, as in the chat stream.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from agentrt_emulator.scripted_model import ScriptedOutput
from agentrt_emulator.server.driver import ChoiceEvent

__all__ = ["ResponseState", "sse_event"]


def sse_event(payload: dict[str, Any]) -> bytes:
    """One Responses API event: ``event: <type>`` and ``data: <json>`` lines."""
    data = json.dumps(payload, ensure_ascii=False)
    return f"event: {payload['type']}\ndata: {data}\n\n".encode()


@dataclass(slots=True)
class _Item:
    kind: str  # "message" or "function_call"
    item_id: str
    output_index: int
    text: str = ""
    #: Function calls: the call's id and function name.
    call_id: str = ""
    name: str = ""
    done: bool = False

    def body(self) -> dict[str, Any]:
        status = "completed" if self.done else "in_progress"
        if self.kind == "message":
            content = [_text_part(self.text)] if self.done or self.text else []
            return {
                "id": self.item_id,
                "type": "message",
                "role": "assistant",
                "status": status,
                "content": content,
            }
        return {
            "id": self.item_id,
            "type": "function_call",
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.text,
            "status": status,
        }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


@dataclass(slots=True)
class ResponseState:
    """One response as it is generated: feed :meth:`apply` the engine's events; read events
    (streaming) or :meth:`response` (at the end)."""

    response_id: str
    model_name: str
    created_at: int
    output: ScriptedOutput
    prompt_tokens: int
    #: Echoed request fields (``instructions``, ``tools``, ``tool_choice`` ...).
    echo: dict[str, Any]
    items: list[_Item] = field(default_factory=list)
    num_tokens: int = 0
    num_cached_tokens: int = 0
    finished: bool = False
    _sequence: int = 0

    # -- whole objects ------------------------------------------------------------------------

    def usage(self) -> dict[str, Any]:
        return {
            "input_tokens": self.prompt_tokens,
            "input_tokens_details": {"cached_tokens": self.num_cached_tokens},
            "output_tokens": self.num_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.prompt_tokens + self.num_tokens,
        }

    @property
    def status(self) -> str:
        if not self.finished:
            return "in_progress"
        return "incomplete" if self.output.finish_reason == "length" else "completed"

    def response(self) -> dict[str, Any]:
        """The response object (the non-streamed body once :attr:`finished`)."""
        incomplete = {"reason": "max_output_tokens"} if self.status == "incomplete" else None
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "model": self.model_name,
            "output": [item.body() for item in self.items],
            "error": None,
            "incomplete_details": incomplete,
            "usage": self.usage() if self.finished else None,
            **self.echo,
        }

    # -- progress -----------------------------------------------------------------------------

    def start(self) -> list[dict[str, Any]]:
        """The stream's first events."""
        return [
            self._event("response.created", response=self.response()),
            self._event("response.in_progress", response=self.response()),
        ]

    def apply(self, event: ChoiceEvent) -> list[dict[str, Any]]:
        """Record ``event``; the stream events it produces (the last one ends the stream)."""
        previous, self.num_tokens = self.num_tokens, event.num_tokens
        self.num_cached_tokens = event.num_cached_tokens
        events: list[dict[str, Any]] = []
        if not self.items and not self.output.tool_calls:
            events += self._open_message()
        pending = ""  # text of the open item that arrived in this step
        for delta in self.output.deltas[previous : event.num_tokens]:
            if delta.content:
                if not self.items or self.items[-1].kind != "message":
                    events += self._open_message()
                pending += delta.content
            elif delta.tool_start and delta.tool_index is not None:
                events += self._flush(pending)
                pending = ""
                events += self._close_last()
                events += self._open_call(delta.tool_index)
            elif delta.tool_args and self.items and self.items[-1].kind == "function_call":
                pending += delta.tool_args
        events += self._flush(pending)
        if event.finished:
            self.finished = True
            if not self.items:
                events += self._open_message()
            events += self._close_last()
            kind = "response.incomplete" if self.status == "incomplete" else "response.completed"
            events.append(self._event(kind, response=self.response()))
        return events

    def error_event(self, message: str) -> dict[str, Any]:
        """The ``error`` event that ends a stream the engine failed."""
        return self._event("error", code="internal_error", message=message, param=None)

    # -- events -------------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _open_message(self) -> list[dict[str, Any]]:
        item = _Item("message", f"msg_{uuid.uuid4().hex}", len(self.items))
        self.items.append(item)
        where = {"item_id": item.item_id, "output_index": item.output_index}
        return [
            self._event(
                "response.output_item.added", output_index=item.output_index, item=item.body()
            ),
            self._event(
                "response.content_part.added", content_index=0, part=_text_part(""), **where
            ),
        ]

    def _open_call(self, tool_index: int) -> list[dict[str, Any]]:
        call = self.output.tool_calls[tool_index]
        item = _Item(
            "function_call",
            f"fc_{uuid.uuid4().hex}",
            len(self.items),
            call_id=call.id,
            name=call.name,
        )
        self.items.append(item)
        return [
            self._event(
                "response.output_item.added", output_index=item.output_index, item=item.body()
            )
        ]

    def _flush(self, text: str) -> list[dict[str, Any]]:
        if not text or not self.items:
            return []
        item = self.items[-1]
        item.text += text
        where = {"item_id": item.item_id, "output_index": item.output_index}
        if item.kind == "message":
            return [
                self._event(
                    "response.output_text.delta", content_index=0, delta=text, logprobs=[], **where
                )
            ]
        return [self._event("response.function_call_arguments.delta", delta=text, **where)]

    def _close_last(self) -> list[dict[str, Any]]:
        if not self.items or self.items[-1].done:
            return []
        item = self.items[-1]
        item.done = True
        where = {"item_id": item.item_id, "output_index": item.output_index}
        events = []
        if item.kind == "message":
            events += [
                self._event(
                    "response.output_text.done",
                    content_index=0,
                    text=item.text,
                    logprobs=[],
                    **where,
                ),
                self._event(
                    "response.content_part.done",
                    content_index=0,
                    part=_text_part(item.text),
                    **where,
                ),
            ]
        else:
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    name=item.name,
                    arguments=item.text,
                    **where,
                )
            )
        events.append(
            self._event(
                "response.output_item.done", output_index=item.output_index, item=item.body()
            )
        )
        return events
