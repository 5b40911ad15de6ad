"""``POST /v1/responses``: the OpenAI Responses API, enough for the OpenAI Agents SDK's default
model (``OpenAIResponsesModel``) and the ``openai`` client's ``responses.create``.

The request is read as the chat request it amounts to (the mapping the controller shares,
:mod:`agentrt_serving.responses_chat`, read strictly: what it cannot read is refused) and goes
through the chat path's rules and scripted model
(:func:`~agentrt_emulator.server.prepare.prepare_chat`), as vLLM renders a Responses request
through its chat template:

* ``input``: a string (one user message) or a list of items — messages (``role`` and
  ``content``: a string or ``input_text`` / ``output_text`` / ``refusal`` parts; ``type``
  may be left out), ``function_call`` (consecutive ones form one assistant message's
  ``tool_calls``), ``function_call_output`` (a ``tool`` message); ``reasoning`` items are
  skipped. ``instructions`` is a leading system message.
* ``tools``: function tools (``name``, ``description``, ``parameters``); ``tool_choice``
  ``auto`` / ``none`` / ``required`` / ``{"type": "function", "name": ...}``; the scripted
  model decides on a call as it does for chat (``agentrt_tool_call`` forces or forbids one).
* ``max_output_tokens``, ``text.format`` (``json_schema`` / ``json_object``), ``priority``,
  ``cache_salt``, ``agentrt_output_tokens``, ``stream``. Other fields are accepted and have no
  effect (``temperature``, ``store``, ``reasoning``, ``include``, ``metadata`` ...).
* Refused (400): ``previous_response_id`` and ``conversation`` (the emulator stores no
  responses), hosted tools.

The answer and the stream: :mod:`agentrt_emulator.server.responses_events`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import ExitStack
from typing import Any

import anyio
import anyio.to_thread
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentrt.errors import InvalidRequest
from agentrt_emulator.core.types import EngineRequest
from agentrt_emulator.scripted_model import ScriptedModel
from agentrt_emulator.server.body import read_json
from agentrt_emulator.server.errors import error_response, from_validation_error
from agentrt_emulator.server.prepare import PreparedRequest, prepare_chat, prepare_in_thread
from agentrt_emulator.server.responses_events import ResponseState, sse_event
from agentrt_emulator.server.state import EmulatorState
from agentrt_emulator.server.streaming import EventStreamResponse, watch_disconnect
from agentrt_emulator.server.wire import ChatRequest
from agentrt_emulator.tokenizer import Tokenizer
from agentrt_serving.responses_chat import chat_messages, chat_tools

__all__ = ["ResponsesEndpoint", "chat_body"]

_CLIENT_CLOSED = 499
#: Fields copied from the request to the response object (with these defaults).
_ECHOED: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "metadata": {},
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "reasoning": None,
    "temperature": 1.0,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
    "top_p": 1.0,
    "truncation": "disabled",
    "user": None,
}


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _tool_choice(choice: Any) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise _bad("tool_choice must be auto, none, required or a function", "tool_choice")


def _response_format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, Mapping) else None
    if not isinstance(fmt, Mapping) or fmt.get("type") in (None, "text"):
        return None
    if fmt.get("type") == "json_schema":
        spec = {k: fmt[k] for k in ("name", "schema", "strict") if k in fmt}
        return {"type": "json_schema", "json_schema": spec}
    return {"type": fmt.get("type")}


def chat_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat request a Responses request amounts to (module docstring). Raises
    :class:`InvalidRequest`."""
    for field in ("previous_response_id", "conversation"):
        if body.get(field) is not None:
            raise _bad(f"{field} is not supported: the engine emulator stores no responses", field)
    chat: dict[str, Any] = {"messages": chat_messages(body, _bad)}
    copied = (
        "model",
        "stream",
        "priority",
        "cache_salt",
        "parallel_tool_calls",
        "seed",
        "agentrt_output_tokens",
        "agentrt_tool_call",
        "temperature",
        "top_p",
        "user",
    )
    chat.update({k: body[k] for k in copied if body.get(k) is not None})
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    tools = chat_tools(body, _bad)
    if tools:
        chat["tools"] = tools
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    return chat


def _echo(body: Mapping[str, Any]) -> dict[str, Any]:
    echoed = {k: body.get(k, default) for k, default in _ECHOED.items()}
    return {
        k: (_ECHOED[k] if v is None and k in ("tools", "metadata") else v)
        for k, v in echoed.items()
    }


class ResponsesEndpoint:
    """The ``/v1/responses`` handler over one emulator's state."""

    def __init__(self, state: EmulatorState) -> None:
        self.state = state

    async def __call__(self, request: Request) -> Response:
        s = self.state
        body = await read_json(request, s.config.max_body_bytes)
        chat = chat_body(body)
        try:
            parsed = ChatRequest.model_validate(chat)
        except ValidationError as exc:
            raise from_validation_error(exc) from None
        prepared = await self._prepare(request, parsed, chat)
        client_id = request.headers.get("x-request-id")
        prompt = prepared.prompts[0]
        output = prompt.outputs[0]
        state = ResponseState(
            "resp_" + (client_id or uuid.uuid4().hex),
            s.config.model_name,
            int(time.time()),
            output,
            len(prompt.prompt_token_ids),
            _echo(body),
        )
        driver = s.driver
        engine_request = EngineRequest(
            request_id=driver.new_request_id(state.response_id),
            prompt_token_ids=prompt.prompt_token_ids,
            output_token_ids=output.token_ids,
            arrival_s=driver.now_s(),
            priority=prepared.priority,
            cache_salt=prepared.cache_salt,
        )
        headers = {"X-Request-Id": client_id} if client_id else {}
        stack = ExitStack()
        group = stack.enter_context(driver.submit([engine_request], [output.finish_reason]))
        if parsed.stream:

            async def produce(emit: Callable[[bytes], Awaitable[None]]) -> None:
                await _stream(group.events, state, emit)

            return EventStreamResponse(produce, on_close=stack.close, headers=headers)
        error: str | None = "the engine stopped before the request finished"
        finished = False
        with stack:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_disconnect, request.receive, tg.cancel_scope)
                async for event in group.events:
                    if event.error is not None:
                        error = event.error
                        break
                    state.apply(event)
                    if state.finished:
                        error = None
                        break
                finished = True
                tg.cancel_scope.cancel()
        if not finished:
            return Response(status_code=_CLIENT_CLOSED)
        if error is not None:
            return error_response(RuntimeError(error), 500)
        return JSONResponse(state.response(), headers=headers)

    async def _prepare(
        self, request: Request, parsed: ChatRequest, chat: dict[str, Any]
    ) -> PreparedRequest:
        s = self.state
        if parsed.n != 1:
            raise _bad("the Responses API has one output", "n")
        if not prepare_in_thread(parsed, request.headers, s.rules):
            return prepare_chat(parsed, chat, request.headers, s.rules, s.tokenizer, s.model)
        # Caches of the tokenizer and the scripted model are not thread-safe: own copies.
        tokenizer = Tokenizer(s.tokenizer.vocab_size)
        model = ScriptedModel(tokenizer, s.config.seed)
        return await anyio.to_thread.run_sync(
            lambda: prepare_chat(parsed, chat, request.headers, s.rules, tokenizer, model),
            limiter=s.prepare_limiter,
        )


async def _stream(
    events: Any, state: ResponseState, emit: Callable[[bytes], Awaitable[None]]
) -> None:
    """Write the response's events; the events of engine steps that are ready go out in one
    write (one socket send per step, as the chat stream does)."""
    await emit(b"".join(sse_event(e) for e in state.start()))
    while True:
        try:
            event = await events.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return
        body = bytearray()
        while event is not None:
            if event.error is not None:
                await emit(bytes(body) + sse_event(state.error_event(event.error)))
                return
            for payload in state.apply(event):
                body += sse_event(payload)
            if state.finished:
                await emit(bytes(body))
                return
            try:
                event = events.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                event = None
        if body:
            await emit(bytes(body))
