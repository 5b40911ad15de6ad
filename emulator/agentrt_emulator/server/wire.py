"""Pydantic models of the request bodies the emulator accepts (OpenAI / vLLM shapes).

Unknown fields are accepted and ignored, as vLLM and OpenAI do, *except* that every field
the emulator reads is typed here: a wrong type is a 400, never a silent default. Sampling
fields (``temperature``, ``top_p``, ``stop``, ...) are validated and have no effect: the
scripted model does not sample.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

__all__ = [
    "ChatMessageIn",
    "ChatRequest",
    "CompletionRequest",
    "PinRequest",
    "TokenizeRequest",
]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FunctionDef(_Open):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(_Open):
    type: Literal["function"] = "function"
    function: FunctionDef


class ToolCallFunction(_Open):
    name: str
    arguments: str = ""


class ToolCallIn(_Open):
    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ContentPart(_Open):
    type: str
    text: str | None = None


class ChatMessageIn(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class StreamOptions(_Open):
    include_usage: StrictBool | None = False


class NamedFunction(_Open):
    name: str


class NamedToolChoice(_Open):
    type: Literal["function"] = "function"
    function: NamedFunction


class JsonSchemaSpec(_Open):
    name: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None


class _GenerationParams(_Open):
    """Fields shared by ``/v1/chat/completions`` and ``/v1/completions``."""

    model: str | None = None
    n: StrictInt = Field(default=1, ge=1, le=128)
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    ignore_eos: StrictBool = False
    #: vLLM priority: lower runs first; needs ``--scheduling-policy priority`` when non-zero.
    priority: StrictInt = 0
    #: Tenant salt; a non-empty string.
    cache_salt: str | None = None
    seed: StrictInt | None = None
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    stop: str | list[str] | None = None
    user: str | None = None
    #: Workload hint: length of a text answer in tokens (including the end-of-turn token).
    agentrt_output_tokens: StrictInt | None = Field(default=None, ge=1)
    #: Workload hint: force (true) or forbid (false) a tool call when tools are offered.
    agentrt_tool_call: StrictBool | None = None

    @field_validator("cache_salt")
    @classmethod
    def _salt_not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError("cache_salt must be a non-empty string")
        return value


class ChatRequest(_GenerationParams):
    messages: list[ChatMessageIn] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    response_format: ResponseFormat | None = None
    logprobs: StrictBool | None = None
    add_generation_prompt: StrictBool = True


PromptIn = str | list[StrictInt] | list[str] | list[list[StrictInt]]


class CompletionRequest(_GenerationParams):
    prompt: PromptIn
    echo: StrictBool = False
    logprobs: StrictInt | None = None


class TokenizeRequest(_Open):
    """vLLM's ``/tokenize`` body: ``prompt`` or ``messages`` (+ ``tools``)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessageIn] | None = None
    tools: list[ToolDef] | None = None
    add_special_tokens: StrictBool = True
    add_generation_prompt: StrictBool = True


class PinRequest(_Closed):
    """``POST /agentrt/engine/v1/pins``: pin the KV blocks of one token prefix for a TTL."""

    pin_id: str = Field(min_length=1, max_length=256)
    #: Exactly one of ``prompt`` (completion text), ``messages`` (+ ``tools``, rendered with the
    #: chat template, by default *without* the generation prompt) or ``token_ids``.
    prompt: str | None = None
    messages: list[ChatMessageIn] | None = None
    tools: list[ToolDef] | None = None
    add_generation_prompt: StrictBool = False
    token_ids: list[StrictInt] | None = None
    cache_salt: str | None = None
    #: Time to live in model seconds (> 0); ``null`` = until deleted.
    ttl_s: float | None = Field(gt=0, allow_inf_nan=False)

    @field_validator("cache_salt")
    @classmethod
    def _salt_not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError("cache_salt must be a non-empty string")
        return value
