"""Retention pin endpoints (agentrt's own; vLLM has no such API).

* ``POST /agentrt/engine/v1/pins`` — body :class:`~agentrt_emulator.server.wire.PinRequest`: pin the
  KV blocks of a token prefix (given as ``prompt``, ``messages`` (+ ``tools``) or
  ``token_ids``, with the same tokenizer and chat template as the generation endpoints, and
  the same ``cache_salt``) for ``ttl_s`` model seconds (``null`` = until deleted). Only the
  leading run of *already cached* full blocks is pinned; pinning an existing ``pin_id``
  replaces it. Answers ``{"pin_id", "blocks", "tokens", "expires_at_s"}``.
* ``DELETE /agentrt/engine/v1/pins/{pin_id}`` — release now; 404 when unknown or expired.
* ``GET /agentrt/engine/v1/pins`` — ``{"pins": [...], "pinned_blocks", "model_time_s"}``.

Pinned blocks are never evicted; requests that need memory wait rather than evict them.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentrt.errors import InvalidRequest
from agentrt_emulator.server.body import read_json
from agentrt_emulator.server.errors import from_validation_error
from agentrt_emulator.server.prepare import chat_messages
from agentrt_emulator.server.state import EmulatorState, PinInfo
from agentrt_emulator.server.wire import PinRequest

__all__ = ["PIN_PREFIX", "pin_routes"]

PIN_PREFIX = "/agentrt/engine/v1/pins"

Handler = Callable[[Request], Awaitable[Response]]


def _token_ids(state: EmulatorState, request: PinRequest) -> list[int]:
    given = [x is not None for x in (request.prompt, request.messages, request.token_ids)]
    if sum(given) != 1:
        raise InvalidRequest("give exactly one of prompt, messages or token_ids", param="prompt")
    if request.prompt is not None:
        return state.tokenizer.encode(request.prompt, add_bos=True)
    if request.token_ids is not None:
        if any(not 0 <= t < state.tokenizer.vocab_size for t in request.token_ids):
            raise InvalidRequest("token ids out of range", param="token_ids")
        return list(request.token_ids)
    tools = [t.model_dump(exclude_none=True) for t in request.tools or ()]
    return state.tokenizer.render_chat(
        chat_messages(request.messages or []),
        tools,
        add_generation_prompt=request.add_generation_prompt,
    )


def _live(state: EmulatorState) -> list[PinInfo]:
    now = state.driver.now_s()
    state.core.expire_pins(now)
    for pin_id, info in list(state.pins.items()):
        if info.expires_at_s is not None and info.expires_at_s <= now:
            del state.pins[pin_id]
    return list(state.pins.values())


def pin_routes(state: EmulatorState) -> list[tuple[str, Handler, list[str]]]:
    """``(path, handler, methods)`` of the pin endpoints bound to ``state``."""

    async def create(request: Request) -> Response:
        body = await read_json(request, state.config.max_body_bytes)
        try:
            parsed = PinRequest.model_validate(body)
        except ValidationError as exc:
            raise from_validation_error(exc) from None
        tokens = _token_ids(state, parsed)
        now = state.driver.now_s()
        ttl = math.inf if parsed.ttl_s is None else parsed.ttl_s
        blocks = state.core.pin(
            parsed.pin_id, tokens, cache_salt=parsed.cache_salt, ttl_s=ttl, now_s=now
        )
        expires = None if math.isinf(ttl) else now + ttl
        info = PinInfo(parsed.pin_id, blocks, len(tokens), expires, parsed.cache_salt is not None)
        state.pins[parsed.pin_id] = info
        return JSONResponse(asdict(info))

    async def listing(request: Request) -> Response:
        pins: list[dict[str, Any]] = [asdict(info) for info in _live(state)]
        return JSONResponse(
            {
                "pins": pins,
                "pinned_blocks": state.core.stats().pinned_blocks,
                "model_time_s": state.driver.now_s(),
            }
        )

    async def delete(request: Request) -> Response:
        pin_id = request.path_params["pin_id"]
        _live(state)
        state.pins.pop(pin_id, None)
        if not state.core.unpin(pin_id):
            raise InvalidRequest(f"no pin {pin_id!r}", status_code=404, param="pin_id")
        state.driver.wake()
        return JSONResponse({"pin_id": pin_id, "deleted": True})

    return [
        (PIN_PREFIX, create, ["POST"]),
        (PIN_PREFIX, listing, ["GET"]),
        (PIN_PREFIX + "/{pin_id:path}", delete, ["DELETE"]),
    ]
