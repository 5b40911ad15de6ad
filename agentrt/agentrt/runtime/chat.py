"""``chat``: one LLM call as a node of the current program (tagged, traced, journaled)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import anyio
import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessage

from agentrt.errors import (
    DeadlineExceeded,
    EndpointUnavailable,
    LLMCallError,
    http_error_message,
    unreachable_message,
)
from agentrt.journal.api import StepSpec
from agentrt.json_types import JSONObject, JSONValue
from agentrt.protocol import Objective
from agentrt.runtime.calls import CURRENT_CALL, LLMCall
from agentrt.runtime.frame import CURRENT_FRAME, Frame
from agentrt.runtime.runtime import Runtime, current_runtime
from agentrt.runtime.services import RuntimeServices

#: ``current_runtime`` is defined in ``agentrt.runtime.runtime``; it stays importable from here.
__all__ = ["ModelChoice", "chat", "current_runtime", "model_candidates"]

#: What a node may name as its model: one model, or an ordered list of candidates.
ModelChoice = str | Sequence[str]

#: HTTP statuses that move a node with candidates on to its next model: the model is not
#: served there (404 ``model_not_found``), or no backend of it is up (503).
_REFUSED_MODEL = frozenset({404, 503})


def model_candidates(model: ModelChoice | None) -> tuple[str, ...]:
    """``model`` as a tuple of candidates (``()`` = none named). Raises ``ValueError`` for
    an empty list, an empty name or a name given twice."""
    if model is None:
        return ()
    names = (model,) if isinstance(model, str) else tuple(model)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"model must be a model name or a list of them, got {model!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"model candidates must differ, got {list(names)}")
    return names


async def chat(
    messages: Iterable[Mapping[str, Any]],
    *,
    model: ModelChoice | None = None,
    tools: Iterable[Mapping[str, Any]] | None = None,
    response_format: Mapping[str, Any] | None = None,
    objective: Objective | None = None,
    parents: Iterable[str] | None = None,
    runtime: Runtime | None = None,
    **params: Any,
) -> ChatCompletion:
    """One chat completion, made as an ``llm`` node of the current program.

    Outside any program an ad-hoc one-call program is created. ``parents`` overrides the node's
    DAG parents (default: the current chain's leaves); ``objective`` the scheduling hint;
    ``params`` go to the API (``temperature``, ``max_tokens``, ``tool_choice``...). The call
    gets at most the program's remaining budget. With a journal (and ``journal_llm_calls``)
    the completion is recorded and a re-run replays it.

    ``model``: a model name, or an ordered list of candidates: the first is tried, and the
    next one whenever the server answers that the model is not served (404) or has no backend
    up (503) — our controller says so for exactly that model. The node's ``name`` is the
    candidate that answered (its span's ``gen_ai.request.model``; each candidate tried is a
    span of its own), the list is the node's ``model_candidates`` and the spans'
    ``agentrt.model.candidates``.

    Raises ``DeadlineExceeded`` past the deadline, ``EndpointUnavailable`` when the server
    cannot be reached, ``LLMCallError`` for any other failed call. With no ``model`` here nor
    in ``RuntimeConfig.model``, the server's model is used (``GET /v1/models``, asked once per
    runtime: :mod:`agentrt.runtime.models`); errors name the URL and suggest the fix.
    """
    frame = CURRENT_FRAME.get()
    if frame is None:
        entered = current_runtime(runtime)
        async with entered.program("chat"):
            return await chat(
                messages,
                model=model,
                tools=tools,
                response_format=response_format,
                objective=objective,
                parents=parents,
                runtime=entered,
                **params,
            )
    rt: RuntimeServices = frame.run.runtime if runtime is None else runtime
    candidates = model_candidates(model)
    # Neither named: the model the server serves (GET /v1/models, asked once per runtime).
    first = (
        candidates[0] if candidates else rt.config.model or await rt.served_model.get(rt.transport)
    )
    request: dict[str, Any] = {"model": first, "messages": list(messages), **params}
    if tools:
        request["tools"] = list(tools)
    if response_format is not None:
        request["response_format"] = dict(response_format)
    call = LLMCall(
        rt,
        frame,
        first,
        parents=tuple(parents) if parents is not None else None,
        objective=objective,
        request=request,
        candidates=candidates if len(candidates) > 1 else (),
    )
    journal = rt.journal if rt.config.journal_llm_calls else None
    executed = False

    async def send() -> ChatCompletion:
        """Send on the first candidate, then the next while one is refused."""
        nonlocal call
        for index in range(max(1, len(candidates))):
            if index:
                request["model"] = candidates[index]
            try:
                return await _send(rt, frame, call, request)
            except LLMCallError as exc:
                if index + 1 >= len(candidates) or exc.status_code not in _REFUSED_MODEL:
                    raise
                call = call.next_model(candidates[index + 1], exc)
        raise AssertionError("unreachable: the last candidate returns or raises")

    async def execute(_key: str) -> JSONValue:
        nonlocal executed
        executed = True
        completion = await send()
        return completion.model_dump(mode="json", exclude_unset=True)

    # The journal's step: what the call was asked (all candidates), before any was tried.
    arguments = {**request, "model": list(candidates)} if len(candidates) > 1 else dict(request)
    try:
        if journal is None:
            completion = await send()
            call.finish("ok", response=_response_view(completion))
            return completion
        step = StepSpec(
            program_id=frame.graph.id,
            thread_id=frame.thread.id,
            seq=call.node.seq,
            kind="llm",
            name=first,
            arguments=arguments,
            node_id=call.node.id,
        )
        stored = await journal.run_step(step, execute)
        completion = ChatCompletion.model_validate(stored)
        call.finish("ok" if executed else "replayed", response=_response_view(completion))
        return completion
    except BaseException as exc:
        # A call the deadline cut (or left no time to start) was cancelled, not failed.
        cancelled = isinstance(exc, (anyio.get_cancelled_exc_class(), DeadlineExceeded))
        call.finish("cancelled" if cancelled else "error", error=exc)
        raise


async def _send(
    rt: RuntimeServices, frame: Frame, call: LLMCall, request: dict[str, Any]
) -> ChatCompletion:
    # The call's budget is derived once, by the transport stack's deadline layer (which refuses
    # a call with no time left with DeadlineExceeded, caps the timeouts and sends the budget).
    token = CURRENT_CALL.set(call)
    try:
        completion: ChatCompletion = await rt.client.chat.completions.create(**request)
        return completion
    except openai.APITimeoutError as exc:
        if anyio.current_time() >= frame.graph.deadline_s:
            raise DeadlineExceeded(f"program {frame.graph.id} passed its deadline") from exc
        raise LLMCallError(f"LLM call {call.node.id} timed out") from exc
    except openai.APIConnectionError as exc:
        raise EndpointUnavailable(
            f"LLM call {call.node.id}: {unreachable_message(rt.config.base_url, exc)}"
        ) from exc
    except openai.APIStatusError as exc:
        raise LLMCallError(
            f"LLM call {call.node.id} failed: "
            + http_error_message(
                rt.config.base_url, str(exc.request.url), exc.status_code, _server_message(exc)
            ),
            status_code=exc.status_code,
        ) from exc
    except openai.OpenAIError as exc:
        raise LLMCallError(f"LLM call {call.node.id} failed: {exc}") from exc
    finally:
        CURRENT_CALL.reset(token)


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's own error message (OpenAI's ``error.message``), else openai's summary."""
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return exc.message


def _response_view(completion: ChatCompletion) -> JSONObject:
    """The few response fields the span needs, without dumping the whole model."""
    usage = completion.usage
    view: JSONObject = {
        "id": completion.id,
        "model": completion.model,
        "choices": [
            {"finish_reason": c.finish_reason, "message": _message_view(c.message)}
            for c in completion.choices
        ],
    }
    if usage is not None:
        view["usage"] = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
        }
    return view


def _message_view(message: ChatCompletionMessage) -> JSONObject:
    return {"role": "assistant", "content": message.content}
