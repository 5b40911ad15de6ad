"""Reading and validating one incoming generation request (before any scheduling)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import anyio.to_thread

from agentrt.errors import ProtocolError
from agentrt.protocol import HEADER_TIMEOUT_MS, CallTags, deadline_after, parse_timeout_ms
from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.hashing import DEFAULT_BLOCK_TOKENS
from agentrt_controller.scheduling.call import CallFacts, new_call_facts
from agentrt_controller.service.errors import (
    BadRequest,
    BodyTooLarge,
    DeadlinePassed,
    ModelNotFound,
)
from agentrt_controller.service.http.identity import foreign_identity, strip_agentic_context
from agentrt_controller.service.http.prompt_size import PromptSizer, prompt_units
from agentrt_controller.service.http.responses_api import prompt_chars
from agentrt_serving.asgi import Receive, Scope, Send
from agentrt_serving.hardening import NOT_JSON, checked_json

__all__ = [
    "Api",
    "ClientGone",
    "IncomingCall",
    "Receive",
    "Scope",
    "Send",
    "decode_body",
    "forwarded_headers",
    "parse_call",
    "read_body",
]

#: Which OpenAI API a generation path speaks.
Api = Literal["chat", "completion", "responses"]
#: Bodies at least this large (bytes) are decoded in a worker thread: json.loads of a 16 MiB
#: prompt takes tens of milliseconds, which would stall every other call on the event loop.
#: Smaller ones are decoded inline (a thread hop costs more than decoding them).
THREAD_DECODE_BYTES = 1024 * 1024

#: Client headers passed on to the backend (everything else stays here). The client's
#: ``Authorization`` is the tenant's key: it reaches a backend only with
#: ``forward_client_authorization`` (single-tenant setups).
_FORWARDED = frozenset({"x-request-id", "openai-organization", "openai-project"})
_FORWARDED_WITH_AUTH = _FORWARDED | {"authorization"}


def forwarded_headers(headers: dict[str, str], *, authorization: bool) -> dict[str, str]:
    """The client headers (lower-case names) a backend gets; ``authorization`` passes the
    client's ``Authorization`` on (single-tenant setups)."""
    allowed = _FORWARDED_WITH_AUTH if authorization else _FORWARDED
    forward: dict[str, str] = {}
    for name, value in headers.items():  # a loop: no comprehension's frame (per call)
        if name in allowed:
            forward[name] = value
    return forward


class ClientGone(Exception):
    """The client disconnected while its request was read (internal to the service)."""


@dataclass(slots=True)
class IncomingCall:
    """One validated incoming call (holds the prompt: never logged)."""

    #: The call's facts, its program key built here once.
    call: CallFacts
    body: dict[str, Any]
    raw_body: bytes
    model: str
    stream: bool
    client_wants_usage: bool
    untagged: bool
    #: The request's headers (lower-case names), for the trace propagator (``traceparent``,
    #: ``tracestate``, ``baggage``; service/telemetry/tracing.py). Holds credentials: never logged.
    headers: dict[str, str]
    forward_headers: dict[str, str]
    #: The ``cache_salt`` the controller chose for the call's tenant (also in :attr:`body`,
    #: not in :attr:`raw_body`; the core adds it where a backend takes it); ``None`` = none.
    cache_salt: str | None = None
    #: The prompt's size estimate before the model's correction (tokens,
    #: :func:`~agentrt_controller.service.http.prompt_size.prompt_units`).
    prompt_units: int = 0

    def __repr__(self) -> str:
        return f"IncomingCall(call_id={self.call.call_id!r}, model={self.model!r})"


async def read_body(receive: Receive, headers: dict[str, str], limit: int) -> bytes:
    """The whole request body. Raises :class:`BodyTooLarge` over ``limit`` bytes (declared
    or counted) and :class:`ClientGone` when the client disconnects first."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body over {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body over {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _decode(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"request body is not valid JSON: {str(exc)[:200]}") from exc


async def decode_body(raw: bytes, scope: Scope | None = None) -> object:
    """The JSON value of ``raw``: the one the hardened guard parsed from it when ``scope``
    holds it (:func:`~agentrt_serving.hardening.checked_json`: one parse per request), else
    parsed here (in a worker thread from :data:`THREAD_DECODE_BYTES` on). Raises
    :class:`BadRequest` for invalid JSON."""
    if scope is not None:
        checked = checked_json(scope, raw)
        if checked is not NOT_JSON:
            return checked
    if len(raw) < THREAD_DECODE_BYTES:
        return _decode(raw)
    return await anyio.to_thread.run_sync(_decode, raw)


def _encode(body: dict[str, Any]) -> bytes:
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate: only the \uXXXX escape can carry it
        return json.dumps(body, separators=(",", ":")).encode()


def _count_field(body: dict[str, Any], name: str) -> int:
    """The request's ``name`` (``n``, ``best_of``): an integer >= 1, 1 when absent or
    ``null``; raises :class:`BadRequest` otherwise."""
    value = body.get(name)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"'{name}' must be an integer >= 1", param=name)
    return value


def _sequences(body: dict[str, Any], api: Api) -> int:
    """How many sequences the backend runs for the call at once: ``n`` (chat, completions),
    or ``best_of`` when larger (completions generate ``best_of`` and return the ``n`` best).
    The Responses API has one output (a backend refuses another ``n``)."""
    if api == "responses":
        return 1
    sequences = _count_field(body, "n")
    if api == "completion":
        sequences = max(sequences, _count_field(body, "best_of"))
    return sequences


#: ``(client's cache_salt or None) -> the cache_salt to send`` for the caller's tenant.
SaltFor = Callable[[str | None], str]


def _deadline_s(headers: dict[str, str], now_s: float, time_scale: float) -> float:
    """The call's absolute deadline on the core's clock from its ``X-Agentrt-Timeout-Ms``
    (milliseconds left at send time, on the client's wall clock: ``time_scale`` of the core's
    seconds each), tagged or not; ``math.inf`` when absent. Raises :class:`BadRequest` naming
    the header when it is not an integer >= 0."""
    try:
        timeout_ms = parse_timeout_ms(headers.get(HEADER_TIMEOUT_MS.lower()))
    except ProtocolError as exc:
        raise BadRequest(str(exc), param=HEADER_TIMEOUT_MS.lower()) from exc
    return deadline_after(timeout_ms, now_s, time_scale)


def parse_call(
    raw: bytes,
    headers: dict[str, str],
    call_id: str,
    now_s: float,
    known_models: set[str] | None,
    *,
    tenant: str | None = None,
    salt_for: SaltFor | None = None,
    forward_authorization: bool = True,
    decoded: object = None,
    api: Api = "chat",
    resolve_model: Callable[[object], str] | None = None,
    time_scale: float = 1.0,
    prompt_size: PromptSizer | None = None,
) -> IncomingCall:
    """Validate one generation request and make its :class:`CallFacts` (arrival ``now_s``) for
    ``tenant`` (the authenticated caller; ``None`` = no tenant). ``salt_for`` gives the
    tenant's ``cache_salt``: a client's own ``cache_salt`` is taken out of the body and
    replaced (``salt_for`` decides whether it counts). ``forward_authorization`` passes the
    client's ``Authorization`` header on to the backend. ``decoded`` is ``raw`` already
    decoded (:func:`decode_body`); ``None`` = decode here. ``api`` names the body's shape.
    ``headers`` has lower-case names (as a server hands them over).

    A call without our tags may name its program by another client's convention
    (:mod:`agentrt_controller.service.http.identity`); it is then tagged, and a
    ``vllm_xargs.agentic_context`` is taken out of the body. The request's ``n`` (and
    ``best_of`` for completions) becomes :attr:`CallFacts.sequences`; whether it is under the
    controller's cap is the core's question (it knows the backends' batch).

    A deadline (``X-Agentrt-Timeout-Ms``) holds whether or not the call names a program: it
    becomes :attr:`CallFacts.deadline_s`, which ``service/core/deadlines.py`` enforces. The
    header counts wall milliseconds; the core's clock runs ``time_scale`` of its seconds to
    each wall second (``controller serve --time-scale``).

    :attr:`CallFacts.prompt_tokens` is an estimate from the body's size
    (:mod:`~agentrt_controller.service.http.prompt_size`), corrected by ``prompt_size``'s
    factor for the model (``None`` = uncorrected); :attr:`IncomingCall.prompt_units` keeps the
    uncorrected one, for ``prompt_size`` to learn from the backend's usage. The same factor
    sizes the elements of the call's text prefix chain (:attr:`CallFacts.block_tokens`).

    ``resolve_model`` (the core's: aliases, fallbacks, the one served model for a call naming
    none) turns the body's ``model`` into the model the call runs on — written into the body
    when it differs, and into :attr:`CallFacts.model`; without it the model must be one of
    ``known_models``.

    Raises :class:`BadRequest`, :class:`ModelNotFound` (``model`` not in ``known_models``;
    ``None`` = unknown, anything goes) or :class:`DeadlinePassed` (no time left)."""
    body = _decode(raw) if decoded is None else decoded
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    requested = body.get("model")
    if resolve_model is not None:
        model = resolve_model(requested)
        if model != requested:  # an alias, a fallback or the one model: the backend's name
            body["model"] = model
            raw = _encode(body)
    else:
        if not isinstance(requested, str) or not requested:
            raise BadRequest("'model' is required and must be a string", param="model")
        model = requested
        known = known_models
        if known is not None and model not in known:
            raise ModelNotFound(f"the model {model!r} does not exist; served models: "
                                + ", ".join(repr(m) for m in sorted(known)), param="model",
                                code="model_not_found")  # fmt: skip
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    limit_field = "max_output_tokens" if api == "responses" else "max_tokens"
    if api == "responses":
        max_tokens = body.get("max_output_tokens")
    else:
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)):
        raise BadRequest(f"'{limit_field}' must be an integer", param=limit_field)
    sequences = _sequences(body, api)
    deadline_s = _deadline_s(headers, now_s, time_scale)
    try:
        tags = CallTags.from_headers(headers)
    except ProtocolError as exc:
        raise BadRequest(str(exc)) from exc
    if deadline_s <= now_s:
        raise DeadlinePassed(f"the call arrived with no time left ({HEADER_TIMEOUT_MS}: 0)")
    foreign = foreign_identity(body, headers) if tags is None else None
    if strip_agentic_context(body):  # never upstream, whoever named the program
        raw = _encode(body)
    cache_salt: str | None = None
    if salt_for is not None:
        chosen = body.pop("cache_salt", None)
        if chosen is not None:  # the client's own: re-encode without it (rare)
            raw = _encode(body)
        cache_salt = salt_for(chosen if isinstance(chosen, str) and chosen else None)
        body["cache_salt"] = cache_salt
    options = body.get("stream_options")
    wants_usage = isinstance(options, dict) and options.get("include_usage") is True
    now = now_s
    # bytes/4: a cheap estimate (the Responses API: its text only, the body's item structure
    # is large next to it), corrected by what the backends reported for the model before
    units = prompt_units(prompt_chars(body) if api == "responses" else len(raw))
    factor = 1.0 if prompt_size is None else prompt_size.factor(model)
    prompt_tokens = int(units * factor)
    # The prefix chains are over text too: DEFAULT_BLOCK_TOKENS units of the estimate each
    block_tokens = DEFAULT_BLOCK_TOKENS * factor
    if tags is None and foreign is not None:
        call = new_call_facts(
            call_id=call_id,
            program=ProgramKey(
                session_id=foreign.session_id, program_id=foreign.program_id, tenant=tenant
            ),
            node_id=call_id,
            arrival_s=now,
            deadline_s=deadline_s,
            prompt_tokens=prompt_tokens,
            block_tokens=block_tokens,
            max_tokens=max_tokens,
            sequences=sequences,
            model=model,
        )
    elif tags is None:
        call = new_call_facts(
            call_id=call_id,
            program=ProgramKey.one_call(call_id, tenant),
            node_id=call_id,
            arrival_s=now,
            deadline_s=deadline_s,
            prompt_tokens=prompt_tokens,
            block_tokens=block_tokens,
            max_tokens=max_tokens,
            sequences=sequences,
            model=model,
        )
    else:
        call = new_call_facts(
            call_id=call_id,
            program=ProgramKey(
                session_id=tags.session_id, program_id=tags.program_id, tenant=tenant
            ),
            thread_id=tags.thread_id,
            node_id=tags.node_id,
            parent_ids=tags.parent_ids,
            arrival_s=now,
            deadline_s=deadline_s,
            prompt_tokens=prompt_tokens,
            block_tokens=block_tokens,
            max_tokens=max_tokens,
            sequences=sequences,
            objective=tags.objective,
            attempt=tags.attempt,
            model=model,
        )
    forward = forwarded_headers(headers, authorization=forward_authorization)
    return IncomingCall(
        call=call,
        body=body,
        raw_body=raw,
        model=model,
        stream=stream,
        client_wants_usage=wants_usage,
        untagged=tags is None and foreign is None,
        headers=headers,
        forward_headers=forward,
        cache_salt=cache_salt,
        prompt_units=units,
    )
