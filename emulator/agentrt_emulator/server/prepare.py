"""Turn a validated HTTP request into prompt tokens and scripted outputs (no I/O).

This is where vLLM's request rules are applied: model name, priority and its header, context
length, ``max_tokens`` defaults, tool-choice consistency.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentrt.errors import InvalidRequest
from agentrt_emulator.core.types import SchedulingPolicy
from agentrt_emulator.scripted_model import (
    DEFAULT_MEDIAN_TOKENS,
    GenerationSpec,
    ScriptedModel,
    ScriptedOutput,
    ToolSpec,
)
from agentrt_emulator.server.wire import ChatMessageIn, ChatRequest, CompletionRequest, ToolDef
from agentrt_emulator.tokenizer import ChatMessage, Tokenizer

__all__ = [
    "HEADER_OUTPUT_TOKENS",
    "HEADER_PRIORITY",
    "PreparedPrompt",
    "PreparedRequest",
    "RequestRules",
    "chat_messages",
    "planned_output_tokens",
    "prepare_chat",
    "prepare_completion",
    "prepare_in_thread",
    "tool_specs",
]

#: vLLM's priority header; an integer that overrides the body's ``priority``.
HEADER_PRIORITY = "x-vllm-priority"
#: Workload hint header, same meaning as the body field ``agentrt_output_tokens``.
HEADER_OUTPUT_TOKENS = "x-agentrt-output-tokens"
#: Requests with a body of this many bytes or more (the declared ``content-length``) are
#: prepared in a worker thread (tokenizing a 16 MiB prompt takes seconds).
THREAD_BODY_BYTES = 1024 * 1024
#: Requests planning this many output tokens or more, all prompts and choices
#: (:func:`planned_output_tokens`), are prepared in a worker thread: the scripted model plans
#: every token ahead, a few microseconds each.
THREAD_OUTPUT_TOKENS = 4096
# Fields that change how the answer is delivered, not what it is.
_DELIVERY_FIELDS = ("stream", "stream_options", "priority", "user", "cache_salt", "n")


@dataclass(frozen=True, slots=True)
class RequestRules:
    """Server settings the request checks need."""

    model_name: str
    max_model_len: int
    scheduling_policy: SchedulingPolicy
    vocab_size: int


@dataclass(frozen=True, slots=True)
class PreparedPrompt:
    """One prompt and its ``n`` planned choices."""

    prompt_token_ids: tuple[int, ...]
    outputs: tuple[ScriptedOutput, ...]

    def __repr__(self) -> str:
        return f"PreparedPrompt(prompt_len={len(self.prompt_token_ids)}, n={len(self.outputs)})"


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A request ready for the engine: prompts (several for a batched completion) × ``n``."""

    prompts: tuple[PreparedPrompt, ...]
    priority: int
    cache_salt: str | None
    n: int


def planned_output_tokens(
    request: ChatRequest | CompletionRequest, headers: Mapping[str, str], rules: RequestRules
) -> int:
    """About how many output tokens preparing ``request`` plans, all prompts and choices
    (tokens). Read before any check: ``ignore_eos`` plans ``max_tokens`` (unset: the whole
    context for a chat, 16 for a completion); otherwise the length hint (header or body) or the
    scripted model's median answer, each at most ``max_tokens``."""
    raw_hint = headers.get(HEADER_OUTPUT_TOKENS, "").strip()
    hint = int(raw_hint) if raw_hint.isdigit() else request.agentrt_output_tokens
    prompts = 1
    if isinstance(request, ChatRequest):
        limit = request.max_completion_tokens or request.max_tokens or rules.max_model_len
    else:
        limit = request.max_tokens or 16
        prompt = request.prompt
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            prompts = len(prompt)  # a batch: several prompts
    per_choice = limit if request.ignore_eos else min(limit, hint or DEFAULT_MEDIAN_TOKENS)
    return per_choice * request.n * prompts


def prepare_in_thread(
    request: ChatRequest | CompletionRequest, headers: Mapping[str, str], rules: RequestRules
) -> bool:
    """Whether ``request`` is to be prepared in a worker thread rather than on the event loop,
    where its preparation would hold up every stream and probe of the server: a body of
    :data:`THREAD_BODY_BYTES` or more, or :data:`THREAD_OUTPUT_TOKENS` planned output tokens or
    more. (Four 20,000-token ``ignore_eos`` calls arriving together held the loop ~0.3 s on an
    idle test machine, longer on a busy one: long enough for a controller probing every 0.2 s
    to take the server out of routing.)"""
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) >= THREAD_BODY_BYTES:
        return True
    return planned_output_tokens(request, headers, rules) >= THREAD_OUTPUT_TOKENS


def _check_model(model: str | None, rules: RequestRules) -> None:
    if model is not None and model != rules.model_name:
        raise InvalidRequest(
            f"The model `{model}` does not exist; this server serves `{rules.model_name}`.",
            status_code=404,
            param="model",
        )


def _priority(body_priority: int, headers: Mapping[str, str], rules: RequestRules) -> int:
    priority = body_priority
    raw = headers.get(HEADER_PRIORITY)
    if raw is not None:
        try:
            priority = int(raw.strip())
        except ValueError:
            raise InvalidRequest(
                f"X-Vllm-Priority must be an integer, got {raw[:40]!r}", param="priority"
            ) from None
    # vLLM refuses a non-zero priority unless the server schedules by priority.
    if priority != 0 and rules.scheduling_policy != "priority":
        raise InvalidRequest(
            f"Got priority {priority} but Priority scheduling is not enabled.", param="priority"
        )
    return priority


def _output_hint(body_hint: int | None, headers: Mapping[str, str]) -> int | None:
    raw = headers.get(HEADER_OUTPUT_TOKENS)
    if raw is None:
        return body_hint
    try:
        hint = int(raw.strip())
    except ValueError:
        hint = 0
    if hint < 1:
        raise InvalidRequest(
            f"X-Agentrt-Output-Tokens must be an integer >= 1, got {raw[:40]!r}",
            param="agentrt_output_tokens",
        )
    return hint


def _max_tokens(prompt_len: int, requested: int | None, rules: RequestRules) -> int:
    limit = rules.max_model_len
    if prompt_len >= limit:
        raise InvalidRequest(
            f"This model's maximum context length is {limit} tokens. However, your request "
            f"has {prompt_len} input tokens. Please reduce the length of the input.",
            param="messages",
        )
    if requested is None:
        return limit - prompt_len
    if prompt_len + requested > limit:
        raise InvalidRequest(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_len + requested} tokens ({prompt_len} in the input, {requested} for the "
            "completion). Please reduce the length of the input or of max_tokens.",
            param="max_tokens",
        )
    return requested


def _fingerprint(body: Mapping[str, Any], prompt_ids: Sequence[int]) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    kept = {k: v for k, v in body.items() if k not in _DELIVERY_FIELDS}
    digest.update(json.dumps(kept, sort_keys=True, default=str).encode())
    digest.update(len(prompt_ids).to_bytes(8, "little"))
    return digest.digest()


def chat_messages(messages: Sequence[ChatMessageIn]) -> list[ChatMessage]:
    """Validate message contents and map them to the template's form."""
    out: list[ChatMessage] = []
    for index, message in enumerate(messages):
        if isinstance(message.content, list):
            texts = []
            for part in message.content:
                if part.type != "text" or part.text is None:
                    raise InvalidRequest(
                        f"messages.{index}.content: only text parts are supported, got "
                        f"{part.type!r}",
                        param=f"messages.{index}.content",
                    )
                texts.append(part.text)
            content = "".join(texts)
        else:
            content = message.content or ""
        calls = tuple(
            (call.function.name, call.function.arguments) for call in message.tool_calls or ()
        )
        if calls and message.role != "assistant":
            raise InvalidRequest(
                f"messages.{index}: only assistant messages may carry tool_calls",
                param=f"messages.{index}.tool_calls",
            )
        role = "tool" if message.role == "function" else message.role
        out.append(ChatMessage(role, content, calls))
    return out


def tool_specs(tools: Sequence[ToolDef] | None) -> list[ToolSpec]:
    specs = [ToolSpec(t.function.name, t.function.parameters or {}) for t in tools or ()]
    if len({spec.name for spec in specs}) != len(specs):
        raise InvalidRequest("tools: function names must be unique", param="tools")
    return specs


def _tool_choice(request: ChatRequest, tools: Sequence[ToolSpec]) -> str:
    choice = request.tool_choice
    if choice is None:
        return "auto" if tools else "none"
    if isinstance(choice, str):
        if choice == "required" and not tools:
            raise InvalidRequest('tool_choice "required" needs tools', param="tool_choice")
        return choice
    name = choice.function.name
    if name not in {tool.name for tool in tools}:
        raise InvalidRequest(
            f"tool_choice names the function {name!r}, which is not among the tools",
            param="tool_choice",
        )
    return name


def _json_schema(request: ChatRequest) -> dict[str, Any] | None:
    fmt = request.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {}
    if fmt.json_schema is None or fmt.json_schema.json_schema is None:
        raise InvalidRequest(
            'response_format of type "json_schema" needs json_schema.schema',
            param="response_format",
        )
    return fmt.json_schema.json_schema


def prepare_chat(
    request: ChatRequest,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    rules: RequestRules,
    tokenizer: Tokenizer,
    model: ScriptedModel,
) -> PreparedRequest:
    """Check a chat request and plan its ``n`` outputs. Raises :class:`InvalidRequest`."""
    _check_model(request.model, rules)
    priority = _priority(request.priority, headers, rules)
    hint = _output_hint(request.agentrt_output_tokens, headers)
    messages = chat_messages(request.messages)
    tools = tool_specs(request.tools)
    tool_choice = _tool_choice(request, tools)
    schema = _json_schema(request)
    tool_dicts = [t.model_dump(exclude_none=True) for t in request.tools or ()]
    prompt = tokenizer.render_chat(
        messages, tool_dicts, add_generation_prompt=request.add_generation_prompt
    )
    requested = request.max_completion_tokens or request.max_tokens
    max_tokens = _max_tokens(len(prompt), requested, rules)
    fingerprint = _fingerprint(body, prompt)
    outputs = tuple(
        model.generate(
            GenerationSpec(
                messages=messages,
                tools=tools,
                tool_choice=tool_choice,
                parallel_tool_calls=request.parallel_tool_calls is not False,
                json_schema=schema,
                max_tokens=max_tokens,
                ignore_eos=request.ignore_eos,
                output_tokens_hint=hint,
                tool_call_hint=request.agentrt_tool_call,
                fingerprint=fingerprint,
                choice_index=index,
            )
        )
        for index in range(request.n)
    )
    prepared = PreparedPrompt(tuple(prompt), outputs)
    return PreparedRequest((prepared,), priority, request.cache_salt, request.n)


def _prompt_token_lists(
    request: CompletionRequest, tokenizer: Tokenizer, rules: RequestRules
) -> list[list[int]]:
    prompt = request.prompt
    if isinstance(prompt, str):
        return [tokenizer.encode(prompt, add_bos=True)]
    if not prompt:
        raise InvalidRequest("prompt must not be empty", param="prompt")
    lists: list[list[int]] = []
    if all(isinstance(item, str) for item in prompt):
        lists = [tokenizer.encode(str(item), add_bos=True) for item in prompt]
    elif all(isinstance(item, int) for item in prompt):
        lists = [[int(item) for item in prompt]]  # type: ignore[arg-type]
    else:
        lists = [list(item) for item in prompt]  # type: ignore[arg-type]
    for ids in lists:
        if not ids:
            raise InvalidRequest("prompt must not be empty", param="prompt")
        if any(not 0 <= token < rules.vocab_size for token in ids):
            raise InvalidRequest(
                f"prompt token ids must be in [0, {rules.vocab_size})", param="prompt"
            )
    return lists


def prepare_completion(
    request: CompletionRequest,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    rules: RequestRules,
    tokenizer: Tokenizer,
    model: ScriptedModel,
) -> PreparedRequest:
    """Check a completion request (one or several prompts) and plan its outputs."""
    _check_model(request.model, rules)
    if request.echo:
        raise InvalidRequest("echo is not supported by the engine emulator", param="echo")
    priority = _priority(request.priority, headers, rules)
    hint = _output_hint(request.agentrt_output_tokens, headers)
    prompts = []
    for ids in _prompt_token_lists(request, tokenizer, rules):
        max_tokens = _max_tokens(len(ids), request.max_tokens or 16, rules)
        fingerprint = _fingerprint({**body, "prompt": ids}, ids)
        outputs = tuple(
            model.generate(
                GenerationSpec(
                    max_tokens=max_tokens,
                    ignore_eos=request.ignore_eos,
                    output_tokens_hint=hint,
                    fingerprint=fingerprint,
                    choice_index=index,
                )
            )
            for index in range(request.n)
        )
        prompts.append(PreparedPrompt(tuple(ids), outputs))
    return PreparedRequest(tuple(prompts), priority, request.cache_salt, request.n)
