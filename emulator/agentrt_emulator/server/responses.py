"""Build OpenAI-shaped response bodies and stream chunks from scripted outputs (no I/O)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrt_emulator.scripted_model import ScriptedOutput
from agentrt_emulator.server.driver import ChoiceEvent
from agentrt_emulator.server.prepare import PreparedRequest

__all__ = ["ResponseBuilder", "sse"]

Kind = Literal["chat", "completion"]


def sse(payload: dict[str, Any] | str) -> bytes:
    """One server-sent event: ``data: <json>\\n\\n`` (or a literal such as ``[DONE]``)."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


@dataclass(slots=True)
class _ChoiceState:
    prompt_index: int
    output: ScriptedOutput
    num_tokens: int = 0
    num_cached_tokens: int = 0
    finished: bool = False
    started: bool = False


@dataclass(slots=True)
class ResponseBuilder:
    """Tracks the choices of one request and renders them (non-streamed or as chunks)."""

    kind: Kind
    response_id: str
    model_name: str
    created: int
    prepared: PreparedRequest
    choices: list[_ChoiceState] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.choices = [
            _ChoiceState(prompt_index, output)
            for prompt_index, prompt in enumerate(self.prepared.prompts)
            for output in prompt.outputs
        ]

    @property
    def all_finished(self) -> bool:
        return all(choice.finished for choice in self.choices)

    def usage(self) -> dict[str, Any]:
        prompt_tokens = sum(len(p.prompt_token_ids) for p in self.prepared.prompts)
        completion_tokens = sum(choice.num_tokens for choice in self.choices)
        n = self.prepared.n
        cached = sum(
            self.choices[i * n].num_cached_tokens for i in range(len(self.prepared.prompts))
        )
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
        }

    # -- streaming ----------------------------------------------------------------------------

    def apply(self, event: ChoiceEvent) -> list[dict[str, Any]]:
        """Record ``event`` and return the stream chunks it produces (without usage)."""
        choice = self.choices[event.index]
        previous = choice.num_tokens
        choice.num_tokens = event.num_tokens
        choice.num_cached_tokens = event.num_cached_tokens
        choice.finished = event.finished
        chunks: list[dict[str, Any]] = []
        if self.kind == "chat":
            if not choice.started:
                chunks.append(self._chunk(event.index, {"role": "assistant", "content": ""}))
            for delta in _chat_deltas(choice.output, previous, event.num_tokens):
                chunks.append(self._chunk(event.index, delta))
        else:
            text = "".join(d.content for d in choice.output.deltas[previous : event.num_tokens])
            if text:
                chunks.append(self._chunk(event.index, text))
        choice.started = True
        if event.finished:
            chunks.append(
                self._chunk(
                    event.index,
                    {} if self.kind == "chat" else "",
                    finish_reason=choice.output.finish_reason,
                )
            )
        return chunks

    def usage_chunk(self) -> dict[str, Any]:
        return {**self._envelope(), "choices": [], "usage": self.usage()}

    def _envelope(self) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {
            "id": self.response_id,
            "object": obj,
            "created": self.created,
            "model": self.model_name,
        }

    def _chunk(
        self, index: int, delta: dict[str, Any] | str, finish_reason: str | None = None
    ) -> dict[str, Any]:
        if isinstance(delta, dict):
            choice: dict[str, Any] = {
                "index": index,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        else:
            choice = {
                "index": index,
                "text": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        return {**self._envelope(), "choices": [choice], "usage": None}

    # -- whole response -----------------------------------------------------------------------

    def response(self) -> dict[str, Any]:
        """The non-streamed body (call when every choice finished)."""
        choices = []
        for index, choice in enumerate(self.choices):
            content, calls = choice.output.visible(choice.num_tokens)
            if self.kind == "chat":
                message: dict[str, Any] = {
                    "role": "assistant",
                    "content": content if content or not calls else None,
                }
                if calls:
                    message["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                        for c in calls
                    ]
                choices.append(
                    {
                        "index": index,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": choice.output.finish_reason,
                    }
                )
            else:
                choices.append(
                    {
                        "index": index,
                        "text": content,
                        "logprobs": None,
                        "finish_reason": choice.output.finish_reason,
                    }
                )
        obj = "chat.completion" if self.kind == "chat" else "text_completion"
        return {
            "id": self.response_id,
            "object": obj,
            "created": self.created,
            "model": self.model_name,
            "choices": choices,
            "usage": self.usage(),
        }


def _chat_deltas(output: ScriptedOutput, start: int, stop: int) -> list[dict[str, Any]]:
    """Group the token deltas ``[start, stop)`` into chat deltas, in order."""
    out: list[dict[str, Any]] = []
    content: list[str] = []

    def flush() -> None:
        if content:
            out.append({"content": "".join(content)})
            content.clear()

    for delta in output.deltas[start:stop]:
        if delta.content:
            content.append(delta.content)
        if delta.tool_index is None:
            continue
        if delta.tool_start:
            flush()
            call = output.tool_calls[delta.tool_index]
            out.append(
                {
                    "tool_calls": [
                        {
                            "index": delta.tool_index,
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
        elif delta.tool_args:
            flush()
            last = out[-1]["tool_calls"][0] if out and "tool_calls" in out[-1] else None
            if last is not None and last["index"] == delta.tool_index and "id" not in last:
                last["function"]["arguments"] += delta.tool_args
            else:
                out.append(
                    {
                        "tool_calls": [
                            {"index": delta.tool_index, "function": {"arguments": delta.tool_args}}
                        ]
                    }
                )
    flush()
    return out
